"""Settings of ``training/sft.py`` (SA-IQA supervised fine-tuning), each section with the checks between its fields
(``problems()``, collected by :func:`reward.core.config.parse` with every other problem, before anything loads):
the model, the data and how its rows are labelled, the prompts, the level words, the loss, trl's ``trainer.*``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from reward.core.config import BATCH, FRACTION, PIXELS, SIDE, overwrite_field, resume_field
from reward.data.datasets import mos_range_of
from reward.data.hf import HfColumns
from reward.data.manifest import allow_absolute_paths_field, image_root_field
from reward.rewards.levels import LEVEL_VALUES, LEVEL_WORDS
from reward.vlm.hub import is_repo_id
from training.prompts import WORDINGS
from training.shared.launch import GLOBAL_BATCH_KEY, SFT_BATCH, global_batch_help, launch_problems, launch_processes
from training.shared.plan import PlanSettings, planned_processes
from training.shared.trainable import LoraSettings, ModelSettings
from training.streams import STREAMS


def _bounds_problem(key: str, value: Sequence[float] | None, fix: str) -> list[str]:
    """``[low, high]`` with low < high, or the message naming ``key`` (``None``: not set, fine)."""
    return [] if value is None or (len(value) == 2 and value[0] < value[1]) else [f"{key}={value}: {fix}"]


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

    def problems(self) -> list[str]:
        """Distinct dimensions; questions and a response prefix replace the queries of one dimension (null: checked
        on the dimensions data.train rates)."""
        dims, problems = self.dimensions, []
        if dims is not None and (not dims or len(set(dims)) != len(dims)):
            problems.append(f"prompt.dimensions={dims}: give one or more distinct names (or null: data.train's own)")
        one = [
            k for k, v in (("prompt.questions", self.questions), ("prompt.response_prefix", self.response_prefix)) if v
        ]
        if one and dims is not None and len(dims) != 1:
            problems.append(f"{' and '.join(one)} replace the queries of one dimension: set prompt.dimensions=[NAME]")
        return problems


@dataclass
class LevelSettings:
    words: list[str] = field(
        default_factory=lambda: list(LEVEL_WORDS), metadata={"help": "rating words, best first; each one token"}
    )
    values: list[float] = field(default_factory=lambda: list(LEVEL_VALUES), metadata={"help": "their scores"})

    def problems(self) -> list[str]:
        """As many values as words, two or more."""
        if len(self.words) != len(self.values) or len(self.words) < 2:
            return [f"levels.words {self.words} and levels.values {self.values} need the same length >= 2"]
        return []

    def best_first(self) -> list[str]:
        """The words ordered best first by their values (the MOS bins map onto them in that order).

        >>> LevelSettings(["bad", "good", "fair"], [1, 3, 2]).best_first()
        ['good', 'fair', 'bad']
        """
        return [w for _, w in sorted(zip(self.values, self.words, strict=True), reverse=True)]


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

    def mos_scale(self, source: str | None) -> tuple[float, float]:
        """The MOS scale of ``source`` (data.train, data.test): ``mos_range`` when set, else the source's own (a
        dataset's), else 1-5."""
        low, high = self.mos_range if self.mos_range is not None else mos_range_of(source)
        return float(low), float(high)

    def soft(self) -> str | None:
        """``soft_targets`` read: None (hard targets), ``votes`` (true), ``gaussian`` or ``deqa``; ``?`` for anything
        else.

        >>> [DataSettings(train="t", soft_targets=v).soft() for v in (False, "false", True, "True", "votes", "soft")]
        [None, None, 'votes', 'votes', 'votes', '?']
        """
        text = str(self.soft_targets).strip().lower()
        if text in ("false", "none", "0", ""):
            return None
        if text in ("true", "1", "votes"):
            return "votes"
        return text if text in ("gaussian", "deqa") else "?"

    def problems(self) -> list[str]:
        """The label rule's values (soft_targets, mos_range, level_range, keep) and how they go together with each
        other and with data.train (a stream has no rows' std, score or values to keep by)."""
        problems = []
        if self.perception and self.perception_fraction <= 0:
            problems.append(f"data.perception_fraction={self.perception_fraction}: use a share in (0, 1]")
        soft = self.soft()
        if soft == "?":
            problems.append(
                f"data.soft_targets={self.soft_targets!r}: use false, true (votes), gaussian (row std, ours) or "
                "deqa (DeQA-Score's label)"
            )
        elif soft in ("gaussian", "deqa") and self.train in STREAMS:
            problems.append(
                f"data.soft_targets={soft} needs each row's std; data.train={self.train} has none: use true"
            )
        problems += _bounds_problem(
            "data.mos_range", self.mos_range, "give [low, high] with low < high, or null for each source's own"
        )
        problems += _bounds_problem("data.level_range", self.level_range, "give [low, high] with low < high, or null")
        for name, bounds in self.keep.items():
            problems += _bounds_problem(f"data.keep.{name}", bounds, "give [low, high] with low < high")
        if self.level_from not in (None, "mos") and soft is not None:
            problems.append(f"data.level_from={self.level_from} gives hard targets: leave data.soft_targets=false")
        if self.score != "mos" and soft is not None:
            problems.append(
                f"data.soft_targets={self.soft_targets} reads each row's std or votes, which are on the dataset's own "
                f"scale, not data.score={self.score}'s: use data.score=mos with soft targets"
            )
        return problems


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
    resume: str = resume_field("auto: continue the same run from out's last checkpoint; never: a new run only")
    overwrite: bool = overwrite_field(
        "true: an out folder holding another run, or an existing targets_out FILE, is moved aside to NAME.old-<time>"
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

    def problems(self) -> list[str]:
        """What goes together across sections: an endless stream needs trainer.max_steps and takes no row rule, the
        loss's needs, ``trainer.*`` for this launch (or the planned one), the upload."""
        data, loss, trainer, problems = self.data, self.loss, self.trainer, []
        key = "data.train" if data.train in STREAMS else "data.perception" if data.perception == "synthetic" else None
        if key and int(trainer.get("max_steps", -1)) <= 0:
            problems.append(f"{key}={getattr(data, key[5:])} streams without end: set trainer.max_steps=N")
        custom = [k for k, v in (("data.keep", data.keep), ("data.level_range", data.level_range)) if v]
        custom += ["data.score"] if data.score != "mos" else []
        custom += ["prompt.questions"] if self.prompt.questions else []
        if data.train in STREAMS and custom:
            problems.append(f"{', '.join(custom)} apply to a ratings manifest or dataset, not data.train={data.train}")
        if loss.kind == "deqa":
            if int(trainer.get("per_device_train_batch_size", 8)) < 2:
                problems.append(
                    "loss.kind=deqa pairs the examples of a batch: set trainer.per_device_train_batch_size>=2"
                )
            if loss.rating_weight != 1.0:
                problems.append(
                    "loss.rating_weight applies to loss.kind=nll; DeQA's weights are deqa_weight and fidelity_weight"
                )
            if data.train in STREAMS or data.perception:
                problems.append(
                    "loss.kind=deqa needs rating rows with a std: a ratings manifest or dataset, no perception"
                )
            if trainer.get("remove_unused_columns"):
                problems.append(
                    "loss.kind=deqa reads the rows' soft targets: leave trainer.remove_unused_columns=false"
                )
        if self.targets_out is not None and (data.train in STREAMS or data.perception):
            problems.append(
                "targets_out writes the rating rows of a ratings manifest or dataset (no stream, no perception)"
            )
        processes = planned_processes(self.plan_for) if self.plan else launch_processes()
        problems += launch_problems("SFTConfig", trainer, processes=processes, source=SFT_BATCH)
        problems += self.push_problems() if self.push_to_hub else []
        if trainer.get("push_to_hub"):
            problems.append(
                "trainer.push_to_hub would push the whole output folder: use push_to_hub=true (scorer/ only)"
            )
        return problems

    def push_problems(self) -> list[str]:
        """What stops ``push_to_hub=true`` (no repo id, no token, offline), naming the key and the fix. The token is
        the login's or ``HF_TOKEN``, where ``huggingface_hub`` reads it."""
        if not self.hub_model_id:
            return ["push_to_hub=true needs hub_model_id=ORG/NAME (the Hub repo to create or update)"]
        if not is_repo_id(self.hub_model_id):
            return [f"hub_model_id={self.hub_model_id}: write the Hub repo as ORG/NAME"]
        from huggingface_hub import constants, get_token

        if constants.HF_HUB_OFFLINE:
            return ["push_to_hub=true but HF_HUB_OFFLINE=1 is set: unset it to push, or set push_to_hub=false"]
        if not get_token():
            return ["push_to_hub=true needs a Hugging Face token with write access: run hf auth login or set HF_TOKEN"]
        return []
