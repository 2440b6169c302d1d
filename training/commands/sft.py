"""What ``training/sft.py`` does, as a function of its config: SA-IQA supervised fine-tuning with trl.

Validate everything first (all problems at once), check a resumed run is the same run, train with
``trl.SFTTrainer`` (loss on the completion only), write ``out/scorer/`` and evaluate it on the test split.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import MISSING

from reward.core.config import BATCH, FRACTION, PIXELS, RESUME, SIDE, parse, resume_mode
from reward.core.errors import MissingInputError, UserError
from reward.core.outputs import Output, check_output, may_change_keys
from reward.core.summary import log_summary
from reward.data.datasets import check_source, mos_range_of
from reward.data.files import atomic_write_json
from reward.data.hf import HfColumns
from reward.data.manifest import allow_absolute_paths_field, image_paths, image_root_field
from reward.rewards.levels import LEVEL_VALUES, LEVEL_WORDS
from reward.vlm.hub import check_models, missing_model
from reward.vlm.loading import ModelLoading, loading_of, merge_lora
from training.commands.sft_targets import label_kwargs, label_problems, write_training_targets
from training.model_card import scorer_card
from training.prompts import WORDINGS
from training.push import push_problems, push_scorer
from training.scorer_format import (
    DEFAULT_DIMENSIONS,
    resolve_definitions,
    scorer_metadata,
)
from training.sft_labels import soft_mode, words_best_first
from training.shared.batch import (
    GLOBAL_BATCH_KEY,
    SFT_BATCH,
    PlanSettings,
    global_batch_help,
    launch_processes,
    planned_processes,
)
from training.shared.cards import settings_command, write_card
from training.shared.checkpoints import load_checkpoint_weights, restored_weights_quiet
from training.shared.deepspeed import (
    gathered_state_dict,
    start_deepspeed_comm,
    uses_deepspeed,
    zero3_init_off,
)
from training.shared.launch import launch_problems, resume_checkpoint, start_output, trl_config
from training.shared.sizes import require_trained
from training.shared.trainable import LoraSettings, freeze_vision, load_dtype, load_for_training, lora_config
from training.streams import STREAMS

if TYPE_CHECKING:
    import torch
    from huggingface_hub import ModelCard

logger = logging.getLogger(__name__)


@dataclass
class ModelSettings(ModelLoading):
    """The VLM to fine-tune; loading knobs from :class:`reward.vlm.ModelLoading` (``dtype=auto``: fp32 master
    weights for full fine-tuning under the trainer's bf16 autocast, bf16 for LoRA or DeepSpeed, see
    :func:`training.shared.trainable.load_dtype`; ``min_pixels``/``max_pixels`` are saved with the scorer)."""

    path: str = field(default=MISSING, metadata={"help": "VLM folder or Hub id (Qwen2-VL, Qwen2.5-VL, Qwen3-VL)"})
    freeze_vision: bool = field(default=True, metadata={"help": "SA-IQA freezes the ViT ..."})
    freeze_aligner: bool = field(default=True, metadata={"help": "... and the aligner (merger); the LLM is trained"})

    def loading(self) -> ModelLoading:
        return loading_of(self)


@dataclass
class ScorerPromptSettings:
    type: int = field(
        default=4, metadata={"help": "SA-IQA prompt type 1-4 (App. B.1); 4: expert-aware definitions", "range": (1, 4)}
    )
    wording: str = field(
        default="release",
        metadata={
            "help": "release: the authors' released prompts (the <dimension> tag in types 2-4; sa-iqa-prompt4's "
            "training) | paper: App. B.1 as printed (the tag in type 2 only)",
            "choices": WORDINGS,
        },
    )
    dimensions: list[str] | None = field(
        default=None,
        metadata={
            "help": "the scorer's dimensions; null: those data.train rates (a manifest's or dataset's own; synthetic: "
            "the paper's four)"
        },
    )
    definitions: dict[str, str] = field(default_factory=dict, metadata={"help": "name: definition; else the paper's"})
    questions: list[str] = field(
        default_factory=list,
        metadata={
            "help": "one dimension: training questions replacing the prompt type's, one drawn per training row (once, "
            "with seed); the scorer asks the first (e.g. Q-Align's nine)"
        },
    )
    response_prefix: str | None = field(
        default=None,
        metadata={
            "help": "one dimension: the response before the rating word in place of SA-IQA's template (e.g. Q-Align's "
            '"The quality of the image is"), trained and read by the scorer'
        },
    )


@dataclass
class LevelSettings:
    words: list[str] = field(
        default_factory=lambda: list(LEVEL_WORDS), metadata={"help": "rating words, best first; each one token"}
    )
    values: list[float] = field(default_factory=lambda: list(LEVEL_VALUES), metadata={"help": "their scores"})


@dataclass
class DataSettings:
    train: str = field(
        default=MISSING,
        metadata={
            "help": 'ratings manifest, datasets folder, "synthetic" (fresh procedural scenes every step), '
            '"distorted-photos", or a public dataset NAME:FOLDER[:SPLIT] (e.g. koniq10k:/data/KonIQ-10k; split train)'
        },
    )
    test: str | None = field(
        default=None,
        metadata={
            "help": "the same kinds, evaluated at the end (metrics.json); NAME:FOLDER's split: test",
            "may_change": True,
        },
    )
    cross: list[str] = field(
        default_factory=list,
        metadata={"help": "after training: the scorer's A3 leaderboard (SRCC/PLCC) over these sources, out/cross/"},
    )
    columns: HfColumns = field(default_factory=HfColumns, metadata={"help": "hf:...: image, MOS, dimension columns"})
    mos_range: list[float] | None = field(
        default=None,
        metadata={"help": "MOS scale of the words; null: each source's own (e.g. SPAQ 0-100), else [1, 5]"},
    )
    skip_bad: bool = field(
        default=False,
        metadata={"help": "a bad row (file and line named) is refused; true: skipped and counted instead"},
    )
    max_decode_pixels: int = field(
        default=36_000_000, metadata={"help": "decode guard; the processor's: model.max_pixels", "range": PIXELS}
    )
    synthetic_size: int = field(default=64, metadata={"help": "data.train=synthetic: image side (px)", "range": SIDE})
    soft_targets: Any = field(
        default=False,
        metadata={
            "help": "false: the MOS's word | true: drawn from the votes, else a Gaussian (soft_std) of mean MOS | "
            "gaussian (ours): from a Gaussian of the row's std, centre shifted to keep the MOS | deqa: DeQA-Score's "
            "label (build_soft_labels/gen_soft_label.py); drawn into the text with loss.kind=nll, exact with "
            "loss.kind=deqa"
        },
    )
    score: str = field(
        default="mos",
        metadata={
            "help": "the value trained and tested as the MOS: mos, or one the reader keeps beside it (e.g. "
            "mos_zscore: KonIQ-10k's 0-100 MOS, Q-Align's; set mos_range)"
        },
    )
    level_from: str | None = field(
        default=None,
        metadata={
            "help": "hard targets: a row value read as the word's level 1..n (n: best); null: the source's own "
            "(sa-bench: mos_int), else the MOS's bin; mos: always the bin"
        },
    )
    level_range: list[float] | None = field(
        default=None,
        metadata={
            "help": "[low, high]: equal bins between low and high closed on the right (Q-Align's, DeQA-Score's; "
            "deqa's normalisation range); null: equal bins of mos_range closed on the left (ours)"
        },
    )
    keep: dict[str, list[float]] = field(
        default_factory=dict,
        metadata={"help": "NAME: [low, high]: only rows with low <= NAME < high (e.g. mos_zscore: Q-Align's subset)"},
    )
    deqa_density: str | None = field(
        default=None,
        metadata={
            "help": "soft_targets=deqa: pdf or cdf; null: DeQA-Score's (cdf for spaq, else pdf)",
            "choices": ("pdf", "cdf", None),
        },
    )
    soft_std: float = field(
        default=0.5,
        metadata={
            "help": "std (MOS units) where a row has no votes (true) or no std (gaussian)",
            "range": (0, 100, True),
        },
    )
    perception: str | None = field(
        default=None, metadata={"help": 'A1 questions mixed in: an LLVisionQA file, or "synthetic" (fresh every step)'}
    )
    perception_fraction: float = field(
        default=0.5, metadata={"help": "share of perception examples (1.0: perception only)", "range": FRACTION}
    )
    perception_families: list[str] | None = field(
        default=None, metadata={"help": "data.perception=synthetic: question families (default all)"}
    )
    perception_answer: str = field(
        default="letter",
        metadata={
            "help": 'completion: "letter" (B) or "letter_text" (B. The second image)',
            "choices": ("letter", "letter_text"),
        },
    )
    perception_shuffle: float = field(
        default=1.0, metadata={"help": "share of questions with options shuffled (0: as given)", "range": FRACTION}
    )
    photos: str | None = field(
        default=None, metadata={"help": "data.train=distorted-photos: photo folder (default: installed packages')"}
    )
    photos_crop: int = field(
        default=112, metadata={"help": "data.train=distorted-photos: crop side, native scale", "range": SIDE}
    )
    photos_side: int | None = field(
        default=None, metadata={"help": "distorted-photos: downscale to this short side first", "range": SIDE}
    )
    calibration: str | None = field(
        default=None, metadata={"help": "data.train=distorted-photos: JSON {type: [MOS at levels 1-5]}"}
    )
    augment: bool = field(default=False, metadata={"help": "manifests: random native-scale crops, horizontal flips"})
    augment_crop: float = field(default=0.875, metadata={"help": "side share a crop keeps", "range": (0, 1, True)})


@dataclass
class LossSettings:
    kind: str = field(
        default="nll",
        metadata={
            "help": "nll: trl's next-token loss of the completion | deqa: DeQA-Score's (training.deqa_loss): "
            "deqa_weight x (cross-entropy of the other tokens + exact KL of the level word's softmax to the soft "
            "target) + fidelity_weight x the fidelity loss of the batch's pairs (batch >= 2)",
            "choices": ("nll", "deqa"),
        },
    )
    rating_weight: float = field(
        default=1.0,
        metadata={
            "help": "kind=nll: weight of the rating-word token in the completion loss (1: plain trl loss)",
            "range": (0, 1000),
        },
    )
    deqa_weight: float = field(
        default=0.05, metadata={"help": "kind=deqa: weight of (CE + KL) of each side (DeQA: --weight_next_token)"}
    )
    fidelity_weight: float = field(
        default=1.0, metadata={"help": "kind=deqa: weight of the pairs' fidelity loss (DeQA: --weight_rank)"}
    )


# trl.SFTConfig fields with SA-IQA's defaults, NAME -> (default, help), and our trainer.global_batch_size; any other
# field is set with trainer.NAME=VALUE (checked against SFTConfig's fields and their types before anything loads)
PAPER_TRAINER: dict[str, tuple[Any, str]] = {
    "learning_rate": (2.0e-5, ""),
    "num_train_epochs": (3, ""),
    "max_steps": (-1, "> 0 overrides epochs (required with the endless streams)"),
    "per_device_train_batch_size": (8, ""),
    "gradient_accumulation_steps": (
        None,
        "null: derived from global_batch_size (32 on one process, 4 on eight); a number: used as given, the batch "
        "then grows with the processes",
    ),
    GLOBAL_BATCH_KEY: (None, global_batch_help(SFT_BATCH)),
    "optim": ("adamw_torch", ""),
    "lr_scheduler_type": ("cosine", ""),
    "warmup_steps": (0.03, "a float < 1 is a ratio of the total steps"),
    "weight_decay": (0.0, ""),
    "bf16": (None, "null: on where the GPU supports it"),
    "activation_checkpointing": (False, "recompute activations in backward to save memory"),
    "logging_steps": (10, ""),
    "save_steps": (100, ""),
    "save_total_limit": (2, ""),
    "dataloader_num_workers": (0, ""),
    "report_to": ("none", ""),
}


@dataclass
class SftSettings:
    """Settings of ``training/sft.py``. Keys marked ``may_change`` may differ when a run is resumed (everything else
    must equal the saved run's, compared in full)."""

    out: str = field(default=MISSING, metadata={"help": "checkpoints, run.json, scorer/, metrics.json"})
    model: ModelSettings = field(default_factory=ModelSettings)
    data: DataSettings = field(default_factory=DataSettings)
    image_root: str | None = image_root_field()
    allow_absolute_paths: bool = allow_absolute_paths_field()
    lora: LoraSettings = field(default_factory=LoraSettings)
    prompt: ScorerPromptSettings = field(default_factory=ScorerPromptSettings)
    levels: LevelSettings = field(default_factory=LevelSettings)
    seed: int = field(default=42, metadata={"help": "trl's seed, the training stream's and the manifest's shuffle"})
    resume: str = field(
        default="auto",
        metadata={
            "help": "auto: continue the same run from out's last checkpoint; never: a new run only",
            "may_change": True,
            "choices": RESUME,
        },
    )
    overwrite: bool = field(
        default=False,
        metadata={
            "help": "true: an out folder holding another run, or an existing targets_out FILE, is moved aside to "
            "NAME.old-<time>",
            "may_change": True,
        },
    )
    merge_lora: bool = field(
        default=True, metadata={"help": "scorer/ holds the merged model (false: the adapter plus base_model)"}
    )
    eval_before: bool = field(
        default=False, metadata={"help": "also evaluate the untrained model (out/before/)", "may_change": True}
    )
    eval_batch_size: int = field(
        default=16, metadata={"help": "images per scoring call at the end", "may_change": True, "range": BATCH}
    )
    trainer: dict[str, Any] = field(
        default_factory=lambda: {name: default for name, (default, _) in PAPER_TRAINER.items()},
        metadata={
            "help": "trl.SFTConfig fields (any one: trainer.NAME=V)",
            "entries": {name: text for name, (_, text) in PAPER_TRAINER.items() if text},
            "may_change": (
                "max_steps",
                "num_train_epochs",
                "logging_steps",
                "save_steps",
                "save_total_limit",
                "report_to",
                "dataloader_num_workers",
            ),
        },
    )
    loss: LossSettings = field(default_factory=LossSettings)
    plan: bool = field(
        default=False, metadata={"help": "true: print the plan (batch, steps, GPU memory, time), load nothing, exit"}
    )
    targets_out: str | None = field(
        default=None,
        metadata={
            "help": "FILE: write each training row as it will be trained (JSON lines: image, prompt, response, target "
            "{word: probability}, mos, std) and exit; no model loads",
            "may_change": True,
            "output": "file",
        },
    )
    plan_for: PlanSettings = field(
        default_factory=PlanSettings, metadata={"help": "plan=true: GPUs, machines, ZeRO stage, GPU memory"}
    )
    push_to_hub: bool = field(
        default=False,
        metadata={
            "help": "upload scorer/ (model, card, sa_iqa.json) to hub_model_id (HfApi.upload_folder)",
            "may_change": True,
        },
    )
    hub_model_id: str | None = field(
        default=None, metadata={"help": "push_to_hub: the Hub repo ORG/NAME (created if missing)", "may_change": True}
    )


def parse_settings(cfg: Any, *, with_inputs: bool = False) -> SftSettings:
    """Typed settings from the Hydra config; unknown, missing or mistyped keys and invalid values in any section fail
    together. ``with_inputs`` (a run): the model and data are checked first, before the validation imports trl, so a
    missing file is said at once; ``plan=true`` checks none, its model and data may not exist yet. Then
    ``prompt.dimensions=null`` becomes the dimensions ``data.train`` rates, in order of first appearance: a
    manifest's or dataset's own (read without decoding an image), the synthetic stream's four, the photos' one."""
    settings = parse(SftSettings, cfg, where="")
    if with_inputs and not settings.plan:
        check_inputs(settings)
    _validate(settings)
    if not with_inputs or settings.plan or settings.prompt.dimensions:
        return settings
    data = settings.data
    if data.train in STREAMS:
        from training.procedural.photos import DIMENSION

        found = list(DEFAULT_DIMENSIONS) if data.train == "synthetic" else [DIMENSION]
    else:
        from reward.data import load_ratings

        where = {"columns": data.columns, **image_paths(settings)}
        rows = load_ratings(data.train, skip_bad=True, check_images=False, default_split="train", **where).rows
        found = list(dict.fromkeys(row.dimension for row in rows))
        logger.info("prompt.dimensions: %s, the dimensions data.train rates (%d rows)", found, len(rows))
    settings.prompt.dimensions = found
    if (settings.prompt.questions or settings.prompt.response_prefix) and len(found) != 1:
        raise UserError(
            f"prompt.questions / prompt.response_prefix replace the queries of one dimension, and data.train "
            f"rates {found}: set prompt.dimensions=[NAME]"
        )
    return settings


def _validate(settings: SftSettings) -> None:
    problems = []
    words, values = settings.levels.words, settings.levels.values
    if len(words) != len(values) or len(words) < 2:
        problems.append(f"levels.words {words} and levels.values {values} need the same length >= 2")
    data = settings.data
    key = "data.train" if data.train in STREAMS else "data.perception" if data.perception == "synthetic" else None
    if key and int(settings.trainer.get("max_steps", -1)) <= 0:
        problems.append(f"{key}={getattr(data, key[5:])} streams without end: set trainer.max_steps=N")
    if data.perception and data.perception_fraction <= 0:
        problems.append(f"data.perception_fraction={data.perception_fraction}: use a share in (0, 1]")
    try:
        loading_of(settings.model)
    except ValueError as err:
        problems.append(f"model: {err}".replace("\n  - ", "; "))
    if soft_mode(data.soft_targets) == "?":
        problems.append(
            f"data.soft_targets={data.soft_targets!r}: use false, true (votes), gaussian (row std, ours) or "
            "deqa (DeQA-Score's label)"
        )
    elif soft_mode(data.soft_targets) in ("gaussian", "deqa") and data.train in STREAMS:
        problems.append(
            f"data.soft_targets={soft_mode(data.soft_targets)} needs each row's std; "
            f"data.train={data.train} has none: use true"
        )
    mos_range = data.mos_range
    if mos_range is not None and (len(mos_range) != 2 or not mos_range[0] < mos_range[1]):
        problems.append(f"data.mos_range={mos_range}: give [low, high] with low < high, or null for each source's own")
    dims = settings.prompt.dimensions
    if dims is not None and (not dims or len(set(dims)) != len(dims)):
        problems.append(f"prompt.dimensions={dims}: give one or more distinct names (or null: data.train's own)")
    problems.extend(label_problems(settings, STREAMS))
    processes = planned_processes(settings.plan_for) if settings.plan else launch_processes()
    problems.extend(launch_problems("SFTConfig", settings.trainer, processes=processes, source=SFT_BATCH))
    problems.extend(push_problems(settings.push_to_hub, settings.hub_model_id))
    if settings.trainer.get("push_to_hub"):
        problems.append("trainer.push_to_hub would push the whole output folder: use push_to_hub=true (scorer/ only)")
    if problems:
        raise UserError("invalid sft settings:\n  - " + "\n  - ".join(problems))


def check_inputs(settings: SftSettings) -> None:
    """The model, the training and test data exist: fail now, not after training (a missing data.test would)."""
    sources = [("data.train", settings.data.train), ("data.test", settings.data.test)]
    sources += [(f"data.cross[{i}]", v) for i, v in enumerate(settings.data.cross)]
    sources = sources[:1] if settings.targets_out is not None else sources  # targets_out reads data.train only
    named = {v for _, v in sources if check_source(v)}  # NAME:FOLDER: name, split, folder checked
    model = None if settings.targets_out is not None else missing_model(settings.model.path, "model.path")
    missing = [
        f"{key}={value}: no such file or folder (a ratings manifest or a datasets folder)"
        for key, value in sources
        if value and value not in STREAMS and value not in named and not Path(value).exists()
    ]
    if model or missing:
        raise MissingInputError("\n".join([*([model] if model else []), *missing]))


def check_output_folder(settings: SftSettings) -> Output:
    """The output folder's decision (new, or the same run resumed) or a refusal, before anything is loaded."""
    record = {k: v for k, v in asdict(settings).items() if k not in ("out", "plan", "plan_for", "targets_out")}
    inputs = {"model": settings.model.path, "data.train": settings.data.train}
    flags = {"resume": resume_mode(settings.resume), "overwrite": settings.overwrite, "resume_hint": "resume=auto"}
    return check_output(settings.out, "sft", record, inputs, may_change=may_change_keys(SftSettings), **flags)


def run(cfg: Any, callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Set up, train, report; returns paths, final step and metrics (also ``out/sft_result.json``)."""
    given = asdict(cfg) if isinstance(cfg, SftSettings) else cfg  # as given, before the dimensions are resolved
    settings = parse_settings(cfg, with_inputs=True)
    if settings.plan:  # no file needs to exist yet: the plan is made from the settings alone
        from training.commands.sft_plan import sft_plan
        from training.shared.plan import report_plan

        return report_plan(sft_plan(settings))
    if settings.targets_out is not None:  # the training rows only: no model, no output folder
        mos_range = data_mos_range(settings, settings.data.train)
        return write_training_targets(settings, _scorer_meta(settings)["queries"], mos_range)
    setup = set_up(settings)
    trained = train(setup, callbacks or [])
    result = report(setup, trained, given)
    trained.trainer.accelerator.end_training()  # the process groups destroyed (a launched process ends: cli.main)
    return result


@dataclass
class Setup:
    """What :func:`set_up` builds for :func:`train` and :func:`report`."""

    settings: SftSettings
    out: Path
    output: Output
    meta: dict[str, Any]  # the scorer's sa_iqa.json: dimensions, rendered queries, level words
    processor: Any
    train_dataset: Any
    skipped: int  # bad rows of data.train, skipped and counted
    args: Any  # trl.SFTConfig
    model: Any
    resume_from: str | None  # the checkpoint a resumed run continues from


@dataclass
class Trained:
    """What :func:`train` leaves for :func:`report`."""

    trainer: Any
    global_step: int
    train_loss: float
    metrics_before: dict[str, Any] | None  # eval_before: the untrained model's metrics on data.test
    main_process: bool  # the process that writes the run's files
    scorer: Path | None  # out/scorer, written by the main process (None on the others)


def set_up(settings: SftSettings) -> Setup:
    """Every check before a model loads (the output folder, each level word one token after every query, the
    training data), then trl's arguments (this launch's processes), the output folder and the model (the one precision
    rule's dtype, vision tower and aligner frozen as set)."""
    from reward.vlm import load_processor, thinking_off

    out = Path(settings.out)
    meta = _scorer_meta(settings)
    check_models({"model.path": settings.model.path})  # a folder that holds no model, an uncached Hub id offline
    output = check_output_folder(settings)  # already complete, or refused: said before transformers loads
    processor = load_processor(
        settings.model.path, min_pixels=settings.model.min_pixels, max_pixels=settings.model.max_pixels
    )
    if thinking_off(processor):
        logger.info("chat template: thinking switched off for training (the answer follows the prompt directly)")
    _rating_ids(processor.tokenizer, meta, settings)  # each level word one token after every prefix, or fail now
    train_dataset, skipped = _train_dataset(settings, meta["queries"])
    from trl import SFTConfig

    base = {"report_to": "none", "save_strategy": "steps", "logging_first_step": True}
    base |= {"max_length": None, "remove_unused_columns": False}  # never cut the image tokens; soft targets read mos
    args = trl_config(SFTConfig, settings.trainer, out=out, source=SFT_BATCH, base=base, fixed={"seed": settings.seed})
    start_output(output, args)
    resume_from = resume_checkpoint(output)
    start_deepspeed_comm(args)  # on CPU launches too (refusing a stale build lock), before any zero.Init
    lora, deepspeed = settings.lora.enabled, uses_deepspeed(args)
    dtype = load_dtype(settings.model.dtype, lora=lora, bf16=bool(args.bf16), deepspeed=deepspeed)
    model = load_for_training(settings.model.path, dtype, loading_of(settings.model))
    if settings.model.freeze_vision or settings.model.freeze_aligner:
        freeze_vision(model, vision=settings.model.freeze_vision, aligner=settings.model.freeze_aligner)
    return Setup(settings, out, output, meta, processor, train_dataset, skipped, args, model, resume_from)


def _scorer_meta(settings: SftSettings) -> dict[str, Any]:
    """The scorer's ``sa_iqa.json`` metadata: its dimensions, their rendered queries, the level words and values; a
    dimension prompt types 3-4 have no definition of is asked in plain words, said once here."""
    dims = settings.prompt.dimensions or list(DEFAULT_DIMENSIONS)
    definitions = resolve_definitions(dims, settings.prompt.type, settings.prompt.definitions)
    levels = {"level_words": settings.levels.words, "level_values": settings.levels.values}
    prompt = {"prompt_type": settings.prompt.type, "definitions": definitions, "wording": settings.prompt.wording}
    meta = scorer_metadata(dims, **prompt, **levels, trained_from=settings.model.path)
    for query in meta["queries"].values():  # prompt.questions / response_prefix: one dimension (checked)
        if settings.prompt.questions:
            query["question"] = settings.prompt.questions[0]
        if settings.prompt.response_prefix:
            query["response_prefix"] = settings.prompt.response_prefix
    kind, text = (
        settings.prompt.type,
        "prompt.type=%d has no definition of %r: it is asked %r (+prompt.definitions.%s=",
    )
    for dim in meta["generic"]:
        logger.info(text + "'...' gives a type-%d query)", kind, dim, meta["queries"][dim]["question"], dim, kind)
    return meta


def train(setup: Setup, callbacks: list[Any]) -> Trained:
    """The untrained model evaluated first (``eval_before``), then trl's SFTTrainer (the loss of ``loss.kind``) from
    the last complete checkpoint of a resumed run; the scorer saved to ``out/scorer`` by the main process (gathering
    ZeRO-3's weights takes every process)."""

    settings, args, model = setup.settings, setup.args, setup.model
    metrics_before = _evaluate_before(setup) if settings.eval_before and settings.data.test else None
    restored = bool(setup.resume_from) and not settings.lora.enabled and not uses_deepspeed(args)
    restored = restored and load_checkpoint_weights(model, setup.resume_from)
    if settings.loss.kind == "deqa":
        from reward.vlm.tokens import resolve_candidates
        from training.deqa_loss import deqa_trainer_class

        words = words_best_first(settings.levels.words, settings.levels.values)  # as the rows' soft targets
        prefix = next(iter(setup.meta["queries"].values()))["response_prefix"]
        ids = resolve_candidates(setup.processor.tokenizer, prefix, words)
        values, loss = sorted(settings.levels.values, reverse=True), settings.loss
        trainer_cls = deqa_trainer_class(
            ids, values, deqa_weight=loss.deqa_weight, fidelity_weight=loss.fidelity_weight
        )
    else:
        from training.rating_loss import weighted_trainer_class

        ids = _rating_ids(setup.processor.tokenizer, setup.meta, settings)
        trainer_cls = weighted_trainer_class(settings.loss.rating_weight, ids)
    trainer = trainer_cls(
        model=model,
        args=args,
        train_dataset=setup.train_dataset,
        processing_class=setup.processor,
        peft_config=lora_config(settings.lora) if settings.lora.enabled else None,
        callbacks=callbacks,
    )
    with restored_weights_quiet() if restored else contextlib.nullcontext():  # its key warnings are moot
        train_out = trainer.train(resume_from_checkpoint=setup.resume_from)
    require_trained(train_out.global_step, "SFT", settings.trainer)  # no scorer from no step
    full_state = gathered_state_dict(trainer)  # ZeRO-3: every process takes part in gathering the weights
    main_process, scorer = trainer.is_world_process_zero(), None
    if main_process:
        scorer = save_scorer(setup, trainer.model, full_state)
    return Trained(trainer, train_out.global_step, train_out.training_loss, metrics_before, main_process, scorer)


def _evaluate_before(setup: Setup) -> dict[str, Any]:
    """The untrained model's metrics on ``data.test`` (every process scores: under ZeRO-3 the forward pass takes
    them all; the main process writes ``out/before/``)."""
    from reward.rewards.sa_iqa import SaIqaReward
    from reward.vlm import VLM

    settings, args, model = setup.settings, setup.args, setup.model
    if settings.model.device_map is None and not uses_deepspeed(args):
        model.to(args.device)  # score on the training device, not on the CPU the weights were loaded to
    vlm = VLM(model.eval(), setup.processor, batch_size=settings.eval_batch_size)
    metrics = _evaluate(SaIqaReward(vlm, setup.meta), settings, setup.out / "before", write=args.process_index == 0)
    model.train()
    return metrics


def report(setup: Setup, trained: Trained, cfg: Any) -> dict[str, Any]:
    """On the main process: the loss curve, the saved scorer evaluated on ``data.test`` (``out/metrics.json``) and
    ``data.cross`` (``out/cross/``), the model card, the upload, ``sft_result.json`` and the
    closing summary. The other processes write nothing and return what they know."""
    settings, out = setup.settings, setup.out
    result: dict[str, Any] = {"skipped_train_rows": setup.skipped, "output_dir": str(out)}
    result["run"] = setup.output.provenance()
    described = getattr(getattr(setup.train_dataset, "info", None), "description", None)
    if described and described.startswith("{"):  # a dataset by name: its scale, split rule and seed
        result["data_train"] = json.loads(described)
    if trained.metrics_before is not None:
        result["metrics_before"] = trained.metrics_before
    result |= {"global_step": trained.global_step, "train_loss": trained.train_loss}
    if not trained.main_process or trained.scorer is None:
        return result
    from training.curves import write_train_curve  # matplotlib: imported when drawn, not when settings are checked

    result["train_curve"] = write_train_curve(trained.trainer.state.log_history, out)["png"]
    result["scorer"] = str(trained.scorer)
    if settings.data.test or settings.data.cross:  # scored through the folder exactly as reward=sa-iqa loads it
        from reward.rewards.sa_iqa import build

        reward = build({"model": str(trained.scorer), "batch_size": settings.eval_batch_size})
        if settings.data.test:
            result["metrics"] = _evaluate(reward, settings, out)
        if settings.data.cross:
            result["cross"] = _cross_leaderboard(reward, settings, out / "cross")
    card = _card(settings, cfg, setup.meta, result)
    result["model_card"] = str(write_card(trained.scorer, card))
    write_card(out, card)  # in place of trl's template in the output folder
    if settings.push_to_hub and settings.hub_model_id:
        result["pushed"] = push_scorer(trained.scorer, settings.hub_model_id, message=f"SA-IQA scorer: {out.name}")
    path = atomic_write_json(out / "sft_result.json", result)
    setup.output.finish()
    srcc = (result.get("metrics") or {}).get("overall", {}).get("srcc")
    facts = {"steps": result["global_step"], "train loss": result["train_loss"], "test SRCC": srcc}
    files = {k: result.get(k) for k in ("scorer", "model_card", "train_curve")}
    metrics = out / "metrics.json" if settings.data.test else None
    files |= {"metrics": metrics, "result": path, "pushed": result.get("pushed")}
    log_summary("sft", facts, files)
    return result


def _card(settings: SftSettings, cfg: Any, meta: dict[str, Any], result: dict[str, Any]) -> ModelCard:
    """What the scorer's model card says: base model, data and split, dimensions, words, metrics, the command."""
    from omegaconf import OmegaConf

    given = OmegaConf.to_container(cfg) if OmegaConf.is_config(cfg) else dict(cfg)
    written = Path(settings.out) / "metrics.json"
    test_info = json.loads(written.read_text()).get("meta", {}).get("data") if written.is_file() else None
    data_info = {k: v for k, v in (("train", result.get("data_train")), ("test", test_info)) if v}
    return scorer_card(
        base_model=settings.model.path,
        dimensions=meta["dimensions"],
        level_words=settings.levels.words,
        level_values=settings.levels.values,
        train_data=settings.data.train,
        test_data=settings.data.test,
        command=settings_command("training/sft.py", "sft", SftSettings, given),
        prompt_type=settings.prompt.type,
        adapter=settings.lora.enabled and not settings.merge_lora,
        metrics=result.get("metrics"),
        data_info=data_info,
        steps=result.get("global_step"),
        location=settings.hub_model_id if settings.push_to_hub and settings.hub_model_id else result["scorer"],
    )


def _train_dataset(settings: SftSettings, queries: dict[str, dict[str, str]]) -> tuple[Any, int]:
    from training.sft_data import distorted_photos_stream, manifest_dataset, synthetic_stream

    if settings.data.perception:  # Q-Bench A1 multiple-choice questions mixed with the ratings (perception_sft.py)
        from training.perception_sft import mix_perception

        no_perception = replace(settings, data=replace(settings.data, perception=None))
        return mix_perception(settings, lambda: _train_dataset(no_perception, queries))
    data, words = settings.data, words_best_first(settings.levels.words, settings.levels.values)
    mos_range = data_mos_range(settings, data.train)
    soft = data.soft_std if soft_mode(data.soft_targets) else None
    stream = {"seed": settings.seed, "mos_range": mos_range, "soft_std": soft}
    if data.train == "synthetic":
        return synthetic_stream(queries, words, size=data.synthetic_size, **stream), 0
    if data.train == "distorted-photos":
        photos = {"photos": data.photos, "crop": data.photos_crop, "side": data.photos_side}
        return distorted_photos_stream(queries, words, **photos, calibration=data.calibration, **stream), 0
    read = {"skip_bad": data.skip_bad, "max_pixels": data.max_decode_pixels, "split": "train", "columns": data.columns}
    read |= {"seed": settings.seed, "augment": data.augment_crop if data.augment else None, **image_paths(settings)}
    return manifest_dataset(data.train, queries, words, **read, **label_kwargs(settings, mos_range))


def data_mos_range(settings: SftSettings, source: str | None) -> tuple[float, float]:
    """The MOS scale of ``source``: ``data.mos_range`` when set, else the source's own (a dataset's), else 1-5."""
    low, high = settings.data.mos_range if settings.data.mos_range is not None else mos_range_of(source)
    return float(low), float(high)


def _rating_ids(tokenizer: Any, meta: dict[str, Any], settings: SftSettings) -> list[int]:
    """The token ids of the level words after every dimension's response prefix (``loss.rating_weight``)."""
    from reward.vlm.tokens import resolve_candidates

    return [
        i
        for q in meta["queries"].values()
        for i in resolve_candidates(tokenizer, q["response_prefix"], settings.levels.words)
    ]


def save_scorer(setup: Setup, model: Any, state_dict: dict[str, torch.Tensor] | None) -> Path:
    """``out/scorer``: the model (merged, or the LoRA adapter plus ``base_model``), processor and ``sa_iqa.json``.
    ``state_dict``: the full weights gathered from a ZeRO-3 run (whose ``model`` holds placeholders), loaded into a
    fresh CPU copy first."""
    from reward.rewards.scorer_folder import write_metadata

    settings, scorer_dir, meta = setup.settings, setup.out / "scorer", dict(setup.meta)
    scorer_dir.mkdir(parents=True, exist_ok=True)
    if state_dict is not None:
        model = rebuild_from_state(settings, state_dict, setup.args)
    if settings.lora.enabled and settings.merge_lora:  # the loader's merge: W + B A s in fp32, rounded once
        merge_lora(model)
        model = model.unload()
    elif settings.lora.enabled:
        local = Path(settings.model.path)
        meta["base_model"] = str(local.resolve()) if local.exists() else settings.model.path  # a hub id stays an id
    model.save_pretrained(scorer_dir)
    setup.processor.save_pretrained(scorer_dir)  # tokenizer, image processor, chat template
    write_metadata(scorer_dir, meta)  # the scorer folder's format: reward.rewards.scorer_folder
    logger.info("scorer written to %s", scorer_dir)
    return scorer_dir


def rebuild_from_state(settings: SftSettings, state_dict: dict[str, torch.Tensor], args: Any = None) -> Any:
    """A CPU copy of the trained model (with its LoRA adapter when there is one) holding ``state_dict``."""
    import torch

    with zero3_init_off(args):
        model = load_for_training(settings.model.path, torch.float32, ModelLoading(attn_implementation=None))
    if settings.lora.enabled:
        from peft import get_peft_model

        model = get_peft_model(model, lora_config(settings.lora))
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    if unexpected or [k for k in missing if "lora_" in k]:
        raise RuntimeError(
            f"the gathered weights do not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    return model


def _cross_leaderboard(reward: Any, settings: SftSettings, out: Path) -> dict[str, Any]:
    """Q-Bench's A3 leaderboard of the trained scorer over ``data.cross``: SRCC/PLCC per dataset and their mean."""
    from reward.data.files import atomic_write_text, json_safe
    from reward.eval.evaluation import EvalSettings
    from reward.qbench.a3_leaderboard import dataset_names, format_leaderboard, leaderboard

    paths = {"image_root": settings.image_root, "allow_absolute_paths": settings.allow_absolute_paths}
    board = leaderboard(
        reward, dataset_names(list(settings.data.cross)), EvalSettings(batch_size=settings.eval_batch_size, **paths)
    )
    table = format_leaderboard(board, title="cross-dataset: the trained scorer (SRCC/PLCC)")
    atomic_write_text(out / "leaderboard.md", table)
    atomic_write_json(out / "leaderboard.json", json_safe(board))
    logger.info("\n%s", table)
    return board


def _evaluate(reward: Any, settings: SftSettings, out: Path, *, write: bool = True) -> dict[str, Any]:
    """The metrics of ``reward`` on ``data.test``, written to ``out`` (metrics.json, scores, plots) when ``write``."""
    from reward.data import load_ratings
    from reward.eval.evaluation import EvalSettings, evaluate_rows, format_table, write_results
    from training.sft_labels import keep_rows, with_score

    data, mos_range = settings.data, data_mos_range(settings, settings.data.test)
    eval_settings = EvalSettings(batch_size=settings.eval_batch_size, skip_bad=data.skip_bad, mos_range=mos_range)
    where = {"columns": data.columns, "mos_range": mos_range, **image_paths(settings)}
    read = {"skip_bad": data.skip_bad, "check_images": False, "default_split": "test", "skip_key": "data.skip_bad"}
    rows = load_ratings(data.test, **read, **where)
    tested = with_score(rows.rows, settings.data.score, rows.source)  # the MOS trained on, the rows kept
    keep = {name: (float(b[0]), float(b[1])) for name, b in settings.data.keep.items()}
    tested, kept_out = keep_rows(tested, keep, rows.source)
    result = evaluate_rows(reward, tested, eval_settings, score_range=(1.0, 5.0), source=rows.source)
    if rows.info:  # a dataset by name: its scale, split rule and seed, the file read
        result.meta["data"] = rows.info | {"score": settings.data.score, "kept_out": kept_out}
    if write:
        write_results(out, result, eval_settings, (1.0, 5.0), title="sa-iqa")
    logger.info("SA-IQA on %s\n%s", settings.data.test, format_table(result.metrics))
    return result.metrics
