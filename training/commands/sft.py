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
from typing import TYPE_CHECKING, Any, ClassVar

from omegaconf import MISSING

from reward.core.config import Alias, library_field_problems, parse, resume_mode
from reward.core.errors import ConfigError, MissingInputError
from reward.core.inputs import missing_model
from reward.core.outputs import Output, check_output, may_change_keys
from reward.core.summary import log_summary
from reward.data.datasets import check_source, mos_range_of
from reward.data.files import atomic_write_json
from reward.data.hf import HfColumns
from reward.rewards.levels import LEVEL_VALUES, LEVEL_WORDS
from reward.vlm.loading import ModelLoading, loading_of, merge_lora
from training.curves import write_train_curve
from training.model_card import ScorerCard, command_line, write_card
from training.plan import PlanSettings, plan_problems
from training.push import push_problems, push_scorer
from training.reporting import report_to_problems
from training.scorer_format import (
    DEFAULT_DIMENSIONS,
    resolve_definitions,
    scorer_metadata,
)
from training.shared import (
    LoraSettings,
    freeze_vision,
    gathered_state_dict,
    last_complete_checkpoint,
    load_checkpoint_weights,
    load_dtype,
    load_for_training,
    lora_config,
    restored_weights_quiet,
    save_gathered_weights_under_zero3,
    start_deepspeed_comm,
    uses_deepspeed,
    zero3_init_off,
)
from training.streams import STREAMS

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)


@dataclass
class ModelSettings(ModelLoading):
    """The VLM to fine-tune; loading knobs from :class:`reward.vlm.ModelLoading` (``dtype=auto``: fp32 master
    weights for full fine-tuning under the trainer's bf16 autocast, bf16 for LoRA or DeepSpeed, see
    :func:`training.shared.load_dtype`; ``min_pixels``/``max_pixels`` are saved with the scorer)."""

    path: str = field(
        default=MISSING, metadata={"help": "VLM checkpoint directory or hub id (Qwen2-VL, Qwen2.5-VL, Qwen3-VL)"}
    )
    freeze_vision: bool = field(default=True, metadata={"help": "SA-IQA freezes the ViT ..."})
    freeze_aligner: bool = field(default=True, metadata={"help": "... and the aligner (merger); the LLM is trained"})

    def loading(self) -> ModelLoading:
        return loading_of(self)


@dataclass
class PromptSettings:
    type: int = field(default=4, metadata={"help": "SA-IQA prompt type 1-4 (App. B.1); 4: expert-aware definitions"})
    tag: bool = field(default=False, metadata={"help": "prepend the <dimension> tag to any type"})
    dimensions: list[str] = field(default_factory=lambda: list(DEFAULT_DIMENSIONS))
    definitions: dict[str, str] = field(
        default_factory=dict, metadata={"help": "name -> definition; default: the paper's"}
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
            "help": (
                'ratings manifest, datasets folder, "synthetic" (fresh procedural scenes every step), or a '
                "public dataset read from its own files: NAME:FOLDER[:SPLIT] (e.g. "
                "koniq10k:/data/KonIQ-10k; split train)"
            )
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
        metadata={
            "help": (
                "after training: one A3 leaderboard (SRCC/PLCC per dataset) of the scorer over these "
                "sources (NAME:FOLDER[:SPLIT] or manifests), written to out/cross/ (hf:NAME_OR_DIR[:SPLIT]:"
                " a datasets dataset, its train / test split by default)"
            )
        },
    )
    columns: HfColumns = field(
        default_factory=HfColumns, metadata={"help": "hf:... data: the image, MOS and dimension columns"}
    )
    mos_range: list[float] | None = field(
        default=None,
        metadata={
            "help": (
                "MOS scale of the rating words; null: each source's own (a dataset's, e.g. SPAQ 0-100 for "
                "data.train=spaq:DIR), else [1, 5]"
            )
        },
    )
    skip_bad: bool = field(
        default=True, metadata={"help": "bad rows are reported with file and line, skipped and counted"}
    )
    max_decode_pixels: int = field(
        default=36_000_000, metadata={"help": "decode guard (not the processor budget: model.max_pixels)"}
    )
    synthetic_size: int = field(default=64, metadata={"help": "data.train=synthetic: image size in pixels"})
    soft_targets: Any = field(
        default=False,
        metadata={
            "help": (
                "false: the MOS's word | true: a word drawn from the annotators' votes where the data has "
                "them, else from a Gaussian of std soft_std with expectation = MOS | gaussian: from a "
                "Gaussian of each row's own std (DeQA-Score's label: the SD/std/var columns of KonIQ-10k, "
                'KADID-10k, AGIQA-3K; a manifest\'s "std")'
            )
        },
    )
    soft_std: float = field(
        default=0.5,
        metadata={"help": "std (MOS units) of the Gaussian where a row has no votes (true) or no std (gaussian)"},
    )
    perception: str | None = field(
        default=None, metadata={"help": 'A1 questions mixed in: an LLVisionQA file, or "synthetic" (fresh every step)'}
    )
    perception_fraction: float = field(
        default=0.5, metadata={"help": "share of perception examples (1.0: perception only, data.train not read)"}
    )
    perception_families: list[str] | None = field(
        default=None, metadata={"help": "data.perception=synthetic: question families (default all)"}
    )
    perception_answer: str = field(
        default="letter", metadata={"help": 'completion: "letter" (B) or "letter_text" (B. The second image)'}
    )
    perception_shuffle: float = field(
        default=1.0, metadata={"help": "share of questions with options shuffled as task=a1 does (0: given order)"}
    )
    photos: str | None = field(
        default=None,
        metadata={"help": "data.train=distorted-photos: photo folder (default: photos of installed packages)"},
    )
    photos_crop: int = field(
        default=112, metadata={"help": "data.train=distorted-photos: crop side in pixels, at native scale"}
    )
    photos_side: int | None = field(
        default=None, metadata={"help": "data.train=distorted-photos: downscale photos to this short side first"}
    )
    calibration: str | None = field(
        default=None, metadata={"help": "data.train=distorted-photos: JSON {type: [MOS at levels 1-5]}"}
    )
    augment: bool = field(
        default=False,
        metadata={"help": "manifest training: random native-scale crops and horizontal flips (training.augment)"},
    )
    augment_crop: float = field(default=0.875, metadata={"help": "side fraction each random crop keeps"})


@dataclass
class LossSettings:
    rating_weight: float = field(
        default=1.0, metadata={"help": "weight of the rating-word token in the completion loss (1: plain trl loss)"}
    )


# trl.SFTConfig fields with SA-IQA's defaults, NAME -> (default, help); any other field is set with trainer.NAME=VALUE
# (checked against SFTConfig's fields and their types before anything loads)
PAPER_TRAINER: dict[str, tuple[Any, str]] = {
    "learning_rate": (2.0e-5, ""),
    "num_train_epochs": (3, ""),
    "max_steps": (-1, "> 0 overrides epochs (required with the endless streams)"),
    "per_device_train_batch_size": (8, ""),
    "gradient_accumulation_steps": (32, "effective batch 8 x 32 x GPUs: SA-IQA's 256 on one GPU (32/N on N)"),
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


def _paper_trainer() -> dict[str, Any]:
    return {name: default for name, (default, _) in PAPER_TRAINER.items()}


@dataclass
class SftSettings:
    """Settings of ``training/sft.py``. Keys marked ``may_change`` may differ when a run is resumed (everything else
    must equal the saved run's, compared in full)."""

    aliases: ClassVar[dict[str, Alias]] = {
        "output_dir": Alias("out", removed_in="0.3.0"),
        "trainer.output_dir": Alias("out", removed_in="0.3.0"),
        "trainer.seed": Alias("seed", removed_in="0.3.0"),
        "data.synthetic_seed": Alias("seed", removed_in="0.3.0"),
    }

    out: str = field(default=MISSING, metadata={"help": "checkpoints, run.json, scorer/, metrics.json"})
    model: ModelSettings = field(default_factory=ModelSettings)
    data: DataSettings = field(default_factory=DataSettings)
    lora: LoraSettings = field(default_factory=LoraSettings)
    prompt: PromptSettings = field(default_factory=PromptSettings)
    levels: LevelSettings = field(default_factory=LevelSettings)
    seed: int = field(
        default=42, metadata={"help": "the trainer's seed (trl), the training stream's and the manifest's shuffle"}
    )
    resume: str = field(
        default="auto",
        metadata={
            "help": "auto: continue the same run from out's last checkpoint; never: a new run only",
            "may_change": True,
        },
    )
    overwrite: bool = field(
        default=False,
        metadata={
            "help": "true: an out folder holding another run is moved aside to DIR.old-<time>",
            "may_change": True,
        },
    )
    merge_lora: bool = field(
        default=True, metadata={"help": "scorer/ holds the merged model (false: the adapter plus base_model)"}
    )
    eval_before: bool = field(
        default=False,
        metadata={"help": "also evaluate the untrained model into out/before/, for comparison", "may_change": True},
    )
    eval_batch_size: int = field(
        default=16, metadata={"help": "images per scoring call at the end", "may_change": True}
    )
    trainer: dict[str, Any] = field(
        default_factory=_paper_trainer,
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
        default=False,
        metadata={"help": "true: print the run's plan (batch, steps, memory per GPU, time) and exit; nothing loads"},
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
        default=None,
        metadata={"help": "push_to_hub: the Hub repo ORG/NAME, created if it does not exist", "may_change": True},
    )


def parse_settings(cfg: Any) -> SftSettings:
    """Typed settings from the Hydra config; unknown, missing or mistyped keys in any section fail together."""
    settings = parse(SftSettings, cfg, where="")
    _validate(settings)
    return settings


def _validate(s: SftSettings) -> None:
    problems = []
    if len(s.levels.words) != len(s.levels.values) or len(s.levels.words) < 2:
        problems.append(f"levels.words {s.levels.words} and levels.values {s.levels.values} need the same length >= 2")
    try:
        resume_mode(s.resume)
    except ConfigError as err:
        problems.append(str(err))
    if s.prompt.type not in (1, 2, 3, 4):
        problems.append(f"prompt.type={s.prompt.type}: SA-IQA has prompt types 1-4")
    if s.data.train in STREAMS and int(s.trainer.get("max_steps", -1)) <= 0:
        problems.append(f"data.train={s.data.train} streams without end: set trainer.max_steps=N")
    try:
        s.model.loading()
    except ValueError as err:
        problems.append(f"model: {err}".replace("\n  - ", "; "))
    if soft_mode(s.data.soft_targets) == "?":
        problems.append(f"data.soft_targets={s.data.soft_targets!r}: use false, true (votes) or gaussian (row std)")
    elif soft_mode(s.data.soft_targets) == "gaussian" and s.data.train in STREAMS:
        problems.append(
            f"data.soft_targets=gaussian needs each row's std; data.train={s.data.train} has none: use true"
        )
    mr = s.data.mos_range
    if mr is not None and (len(mr) != 2 or not mr[0] < mr[1]):
        problems.append(f"data.mos_range={mr}: give [low, high] with low < high, or null for each source's own")
    problems.extend(_prompt_problems(s))
    from trl import SFTConfig

    problems.extend(library_field_problems(SFTConfig, s.trainer, "trainer"))
    problems.extend(plan_problems(s.plan_for))
    problems.extend(report_to_problems(s.trainer.get("report_to", "none")))
    problems.extend(push_problems(s.push_to_hub, s.hub_model_id))
    if s.trainer.get("push_to_hub"):
        problems.append("trainer.push_to_hub would push the whole output folder: use push_to_hub=true (scorer/ only)")
    if problems:
        raise ConfigError("invalid sft settings:\n  - " + "\n  - ".join(problems))


def _prompt_problems(s: SftSettings) -> list[str]:
    """Types 3-4 need a definition of every dimension: say so now, not after training (when the scorer is written)."""
    dims = s.prompt.dimensions
    if not dims or len(set(dims)) != len(dims):
        return [f"prompt.dimensions={dims}: give one or more distinct dimension names"]
    if s.prompt.type not in (3, 4):
        return []
    defs = resolve_definitions(dims, s.prompt.type, s.prompt.definitions)
    missing = [d for d in dims if not defs.get(d)]
    if not missing:
        return []
    example = " ".join(f"+prompt.definitions.{d}='...'" for d in missing)
    return [
        f"prompt.type={s.prompt.type} needs a definition of each dimension; none for {missing}: set "
        f"prompt.definitions ({example}) or use prompt.type=1 or 2"
    ]


def check_inputs(s: SftSettings) -> None:
    """The model, the training and test data exist: fail now, not after training (a missing data.test would)."""
    sources = [("data.train", s.data.train), ("data.test", s.data.test)]
    sources += [(f"data.cross[{i}]", v) for i, v in enumerate(s.data.cross)]
    named = {v for _, v in sources if check_source(v)}  # NAME:FOLDER: name, split, folder checked
    model = missing_model(s.model.path, "model.path")
    missing = [
        f"{key}={value}: no such file or folder (a ratings manifest or a datasets folder)"
        for key, value in sources
        if value and value not in STREAMS and value not in named and not Path(value).exists()
    ]
    if model or missing:
        raise MissingInputError("\n".join([*([model] if model else []), *missing]))


def check_output_folder(s: SftSettings) -> Output:
    """The output folder's decision (new, or the same run resumed) or a refusal, before anything is loaded."""
    settings = {k: v for k, v in asdict(s).items() if k not in ("out", "plan", "plan_for")}
    inputs = {"model": s.model.path, "data.train": s.data.train}
    return check_output(
        s.out,
        "sft",
        settings,
        inputs,
        resume=resume_mode(s.resume),
        overwrite=s.overwrite,
        may_change=may_change_keys(SftSettings),
        resume_hint="resume=auto",
    )


def _level_check(tokenizer: Any, queries: dict[str, dict[str, str]], words: list[str]) -> None:
    """Every level word must be one token after every dimension's response prefix: fail before training."""
    from reward.vlm.tokens import resolve_candidates

    for q in queries.values():
        resolve_candidates(tokenizer, q["response_prefix"], words)


def _trainer_args(s: SftSettings, out: Path) -> Any:
    import torch
    from trl import SFTConfig

    args = {"report_to": "none", "save_strategy": "steps", "logging_first_step": True, **s.trainer, "seed": s.seed}
    if args.get("bf16") is None:
        args["bf16"] = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if not torch.cuda.is_available():
        args.setdefault("use_cpu", True)
    args.setdefault("max_length", None)  # never cut the image tokens
    args.setdefault("remove_unused_columns", False)  # the soft-target transform reads dimension and mos
    try:
        return SFTConfig(output_dir=str(out), **args)
    except TypeError as err:
        raise ConfigError(f"invalid trainer.* settings (trl.SFTConfig): {err}") from None


def run(cfg: Any, callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Train, write ``out/scorer``, evaluate; returns paths, final step and metrics."""
    s = parse(SftSettings, cfg, where="")
    if s.plan:  # no file needs to exist yet: the plan is made from the settings alone
        _validate(s)
        return _print_plan(s)
    check_inputs(s)  # a missing file needs no library: said before trl and torch are imported
    _validate(s)

    from reward.vlm import VLM, load_processor, thinking_off
    from training.rating_loss import weighted_trainer_class

    out = Path(s.out)
    definitions = resolve_definitions(s.prompt.dimensions, s.prompt.type, s.prompt.definitions)
    meta = scorer_metadata(
        s.prompt.dimensions,
        prompt_type=s.prompt.type,
        definitions=definitions,
        tag=s.prompt.tag,
        level_words=s.levels.words,
        level_values=s.levels.values,
        trained_from=s.model.path,
    )
    processor = load_processor(s.model.path, min_pixels=s.model.min_pixels, max_pixels=s.model.max_pixels)
    if thinking_off(processor):
        logger.info("chat template: thinking switched off for training (the answer follows the prompt directly)")
    _level_check(processor.tokenizer, meta["queries"], s.levels.words)
    output = check_output_folder(s)
    train_ds, skipped = _train_dataset(s, meta["queries"])
    save_gathered_weights_under_zero3()  # the scorer is written from the gathered weights
    args = _trainer_args(s, out)
    args.distributed_state.wait_for_everyone()  # every process has checked out before it is created
    if args.distributed_state.is_main_process:
        output.create()
    args.distributed_state.wait_for_everyone()
    resume_from = (
        last_complete_checkpoint(out, main_process=args.distributed_state.is_main_process) if output.resumed else None
    )
    log_effective_batch(args)
    start_deepspeed_comm(args)  # on CPU launches too (refusing a stale build lock), before any zero.Init
    dtype = load_dtype(s.model.dtype, lora=s.lora.enabled, bf16=bool(args.bf16), deepspeed=uses_deepspeed(args))
    model = load_for_training(s.model.path, dtype, s.model.loading())
    if s.model.freeze_vision or s.model.freeze_aligner:
        freeze_vision(model, vision=s.model.freeze_vision, aligner=s.model.freeze_aligner)
    result: dict[str, Any] = {"skipped_train_rows": skipped, "output_dir": str(out), "run": output.provenance()}
    described = getattr(getattr(train_ds, "info", None), "description", None)
    if described and described.startswith("{"):  # a dataset by name: its scale, split rule and seed
        result["data_train"] = json.loads(described)
    if s.eval_before and s.data.test:
        from reward.rewards.sa_iqa import SaIqaReward

        if s.model.device_map is None and not uses_deepspeed(args):
            model.to(args.device)  # score on the training device, not on the CPU the weights were loaded to
        vlm = VLM(model.eval(), processor, batch_size=s.eval_batch_size)
        result["metrics_before"] = _evaluate(SaIqaReward(vlm, meta), s, out / "before")
        model.train()
    restored = bool(resume_from) and not s.lora.enabled and not uses_deepspeed(args)
    restored = restored and load_checkpoint_weights(model, resume_from)
    trainer_cls = weighted_trainer_class(s.loss.rating_weight, _rating_ids(processor.tokenizer, meta, s))
    trainer = trainer_cls(
        model=model,
        args=args,
        train_dataset=train_ds,
        processing_class=processor,
        peft_config=lora_config(s.lora) if s.lora.enabled else None,
        callbacks=callbacks,
    )
    with restored_weights_quiet() if restored else contextlib.nullcontext():  # its key warnings are moot
        train_out = trainer.train(resume_from_checkpoint=resume_from)
    result["global_step"] = train_out.global_step
    result["train_loss"] = train_out.training_loss
    if trainer.is_world_process_zero():
        result["train_curve"] = write_train_curve(trainer.state.log_history, out)["png"]
    full_state = gathered_state_dict(trainer)  # ZeRO-3: every process takes part in gathering the weights
    if trainer.is_world_process_zero():
        scorer_dir = save_scorer(
            trainer.model, processor, out / "scorer", meta, s, state_dict=full_state, args=trainer.args
        )
        result["scorer"] = str(scorer_dir)
        if s.data.test or s.data.cross:  # through the saved directory, exactly as reward=sa-iqa will load it
            from reward.rewards.sa_iqa import build

            reward = build({"model": str(scorer_dir), "batch_size": s.eval_batch_size})
            if s.data.test:
                result["metrics"] = _evaluate(reward, s, out)
            if s.data.cross:
                result["cross"] = _cross_leaderboard(reward, s, out / "cross")
        card = _card(s, cfg, meta, result)
        result["model_card"] = str(write_card(scorer_dir, card))
        write_card(out, card)  # in place of trl's template in the output folder
        if s.push_to_hub and s.hub_model_id:
            result["pushed"] = push_scorer(scorer_dir, s.hub_model_id, message=f"SA-IQA scorer: {out.name}")
    path = atomic_write_json(out / "sft_result.json", result)
    if trainer.is_world_process_zero():
        output.finish()
    if "scorer" in result:  # the main process
        srcc = (result.get("metrics") or {}).get("overall", {}).get("srcc")
        facts = {"steps": result["global_step"], "train loss": result["train_loss"], "test SRCC": srcc}
        files = {k: result.get(k) for k in ("scorer", "model_card", "train_curve")}
        files |= {
            "metrics": out / "metrics.json" if s.data.test else None,
            "result": path,
            "pushed": result.get("pushed"),
        }
        log_summary("sft", facts, files)
    return result


def _card(s: SftSettings, cfg: Any, meta: dict[str, Any], result: dict[str, Any]) -> ScorerCard:
    """What the scorer's model card says: base model, data and split, dimensions, words, metrics, the command."""
    from omegaconf import OmegaConf

    from reward.core.cli import CONFIG_DIR

    given = OmegaConf.to_container(cfg) if OmegaConf.is_config(cfg) else dict(cfg)
    yaml = OmegaConf.load(CONFIG_DIR / "sft.yaml")  # the defaults: the settings dataclass and configs/sft.yaml
    yaml.pop("defaults", None)
    defaults = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(SftSettings), yaml))
    written = Path(s.out) / "metrics.json"
    test_info = json.loads(written.read_text()).get("meta", {}).get("data") if written.is_file() else None
    data_info = {k: v for k, v in (("train", result.get("data_train")), ("test", test_info)) if v}
    return ScorerCard(
        base_model=s.model.path,
        dimensions=meta["dimensions"],
        level_words=s.levels.words,
        level_values=s.levels.values,
        train_data=s.data.train,
        test_data=s.data.test,
        command=command_line("training/sft.py", given, defaults),
        prompt_type=s.prompt.type,
        adapter=s.lora.enabled and not s.merge_lora,
        metrics={k: v for k, v in (result.get("metrics") or {}).items() if isinstance(v, dict)},
        data_info=data_info,
        steps=result.get("global_step"),
    )


def _print_plan(s: SftSettings) -> dict[str, Any]:
    from training.commands.sft_plan import sft_plan
    from training.plan import report_plan

    return report_plan(sft_plan(s))


def _train_dataset(s: SftSettings, queries: dict[str, dict[str, str]]) -> tuple[Any, int]:
    from training.sft_data import manifest_dataset, synthetic_stream

    if s.data.perception:  # Q-Bench A1 multiple-choice questions, mixed with the rating data (perception_sft.py)
        from training.perception_sft import mix_perception

        no_perception = replace(s, data=replace(s.data, perception=None))
        return mix_perception(s, lambda: _train_dataset(no_perception, queries))
    words = _sorted_words(s)  # best first
    mos_range = data_mos_range(s, s.data.train)
    mode = soft_mode(s.data.soft_targets)
    soft = s.data.soft_std if mode else None
    if s.data.train == "synthetic":
        ds = synthetic_stream(
            queries,
            words,
            seed=s.seed,
            size=s.data.synthetic_size,
            mos_range=mos_range,
            soft_std=soft,
        )
        return ds, 0
    if s.data.train == "distorted-photos":
        from training.procedural.photos import distorted_photos_stream

        ds = distorted_photos_stream(
            queries,
            words,
            photos=s.data.photos,
            crop=s.data.photos_crop,
            side=s.data.photos_side,
            seed=s.seed,
            mos_range=mos_range,
            soft_std=soft,
            calibration=s.data.calibration,
        )
        return ds, 0
    return manifest_dataset(
        s.data.train,
        queries,
        words,
        mos_range=mos_range,
        skip_bad=s.data.skip_bad,
        max_pixels=s.data.max_decode_pixels,
        soft_std=soft,
        seed=s.seed,
        augment=s.data.augment_crop if s.data.augment else None,
        split="train",
        row_std=mode == "gaussian",
        columns=s.data.columns,
    )


def soft_mode(value: Any) -> str | None:
    """``data.soft_targets`` as None (hard targets), ``votes`` (true) or ``gaussian``; ``?`` for anything else.

    >>> [soft_mode(v) for v in (False, "false", True, "True", "votes", "gaussian", "soft")]
    [None, None, 'votes', 'votes', 'votes', 'gaussian', '?']
    """
    text = str(value).strip().lower()
    if text in ("false", "none", "0", ""):
        return None
    if text in ("true", "1", "votes"):
        return "votes"
    return "gaussian" if text == "gaussian" else "?"


def data_mos_range(s: SftSettings, source: str | None) -> tuple[float, float]:
    """The MOS scale of ``source``: ``data.mos_range`` when set, else the source's own (a dataset's), else 1-5."""
    low, high = s.data.mos_range if s.data.mos_range is not None else mos_range_of(source)
    return float(low), float(high)


def _rating_ids(tokenizer: Any, meta: dict[str, Any], s: SftSettings) -> list[int]:
    """The token ids of the level words after every dimension's response prefix (``loss.rating_weight``)."""
    from reward.vlm.tokens import resolve_candidates

    return [
        i
        for q in meta["queries"].values()
        for i in resolve_candidates(tokenizer, q["response_prefix"], s.levels.words)
    ]


def _sorted_words(s: SftSettings) -> list[str]:
    """Level words ordered best first by their values (the MOS bins map onto them in that order)."""
    pairs = sorted(zip(s.levels.values, s.levels.words, strict=True), reverse=True)
    return [w for _, w in pairs]


def save_scorer(
    model: Any,
    processor: Any,
    scorer_dir: Path,
    meta: dict[str, Any],
    s: SftSettings,
    *,
    state_dict: dict[str, torch.Tensor] | None = None,
    args: Any = None,
) -> Path:
    """Model (merged, or the LoRA adapter plus ``base_model``), processor files and ``sa_iqa.json``.

    ``state_dict``: the full weights gathered from a ZeRO-3 run (``model``'s own parameters are placeholders
    there); they are loaded into a fresh copy on the CPU before merging and saving.
    """
    from reward.rewards.scorer_folder import write_metadata

    scorer_dir.mkdir(parents=True, exist_ok=True)
    meta = dict(meta)
    if state_dict is not None:
        model = rebuild_from_state(s, state_dict, args)
    if s.lora.enabled and s.merge_lora:  # the loader's merge: W + B A s in fp32, rounded once to W's dtype
        merge_lora(model)
        model = model.unload()
    elif s.lora.enabled:
        local = Path(s.model.path)
        meta["base_model"] = str(local.resolve()) if local.exists() else s.model.path  # a hub id stays an id
    model.save_pretrained(scorer_dir)
    save_processor(processor, scorer_dir)
    write_metadata(scorer_dir, meta)  # the scorer folder's format: reward.rewards.scorer_folder
    logger.info("scorer written to %s", scorer_dir)
    return scorer_dir


def rebuild_from_state(s: SftSettings, state_dict: dict[str, torch.Tensor], args: Any = None) -> Any:
    """A CPU copy of the trained model (with its LoRA adapter when there is one) holding ``state_dict``."""
    import torch

    with zero3_init_off(args):
        model = load_for_training(s.model.path, torch.float32, ModelLoading(attn_implementation=None))
    if s.lora.enabled:
        from peft import get_peft_model

        model = get_peft_model(model, lora_config(s.lora))
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    if unexpected or [k for k in missing if "lora_" in k]:
        raise RuntimeError(
            f"the gathered weights do not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    return model


def log_effective_batch(args: Any) -> int:
    """Log (and return) the effective batch: per device x gradient accumulation x processes."""
    per_device, accum, world = args.per_device_train_batch_size, args.gradient_accumulation_steps, args.world_size
    effective = per_device * accum * world
    logger.info(
        "effective batch %d = %d per device x %d accumulation x %d processes (SA-IQA used 256)",
        effective,
        per_device,
        accum,
        world,
    )
    return effective


def save_processor(processor: Any, out: Path) -> None:
    """Save tokenizer, image processor, chat template and processor config (``processor.save_pretrained``)."""
    processor.save_pretrained(out)


def _cross_leaderboard(reward: Any, s: SftSettings, out: Path) -> dict[str, Any]:
    """Q-Bench's A3 leaderboard of the trained scorer over ``data.cross``: SRCC/PLCC per dataset and their mean."""
    from reward.data.files import atomic_write_text, json_safe
    from reward.eval.evaluation import EvalSettings
    from reward.qbench.a3_leaderboard import dataset_names, format_leaderboard, leaderboard

    board = leaderboard(reward, dataset_names(list(s.data.cross)), EvalSettings(batch_size=s.eval_batch_size))
    table = format_leaderboard(board, title="cross-dataset: the trained scorer (SRCC/PLCC)")
    atomic_write_text(out / "leaderboard.md", table)
    atomic_write_json(out / "leaderboard.json", json_safe(board))
    logger.info("\n%s", table)
    return board


def _evaluate(reward: Any, s: SftSettings, out: Path) -> dict[str, Any]:
    from reward.data import load_ratings
    from reward.eval.evaluation import EvalSettings, evaluate_rows, format_table, write_results

    mos_range = data_mos_range(s, s.data.test)
    settings = EvalSettings(batch_size=s.eval_batch_size, skip_bad=s.data.skip_bad, mos_range=mos_range)
    rows = load_ratings(
        s.data.test,
        skip_bad=s.data.skip_bad,
        check_images=False,
        mos_range=mos_range,
        default_split="test",
        columns=s.data.columns,
    )
    base = rows.base if rows.info else Path(s.data.test).resolve().parent
    result = evaluate_rows(reward, rows.rows, settings, score_range=(1.0, 5.0), base=base, source=rows.source)
    if rows.info:  # a dataset by name: its scale, split rule and seed, the file read
        result.meta["data"] = rows.info
    write_results(out, result, settings, (1.0, 5.0), title="sa-iqa")
    logger.info("SA-IQA on %s\n%s", s.data.test, format_table(result.metrics))
    return result.metrics
