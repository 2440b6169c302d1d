"""The settings of ``rl/flow_grpo.py`` (Flow-GRPO), checked without torch: the fields' own types, ranges and choices
(:func:`reward.core.config.parse`), and :meth:`FlowGrpoSettings.problems`, every check between them, the generator's
model, the tasks held out, the batch over this launch's processes and the launch itself, all said together."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

from omegaconf import MISSING

from reward.core.config import COUNT, PIXELS, overwrite_field, resume_field, to_plain
from reward.data.images import DEFAULT_MAX_PIXELS
from reward.data.manifest import allow_absolute_paths_field, image_root_field
from reward.rewards.registry import reward_config
from reward.vlm.hub import missing_model
from rl.flow_advantages import SCALES
from rl.flow_settings import Layout, flow_generator_config
from rl.inpaint_tasks import heldout_problems
from rl.reward_fields import max_reward_failures_field, normalize_rewards_field
from training.shared.deepspeed import uses_deepspeed
from training.shared.launch import SourceBatch, batch_problems, launch_processes
from training.shared.plan import PlanSettings, planned_processes

# flow_grpo's FLUX configs (config/grpo.py, pickscore_flux): 48 prompts a round ("epoch") x group 24, two updates
FLOW_GRPO_BATCH = SourceBatch(576, "flow_grpo's pickscore_flux (48 prompts x group 24 a round, two updates)", "images")
FLOW_GRPO_ROUND = 1152  # images a round: 48 prompts x 24


@dataclass
class SampleSettings:
    """How the images of a round are sampled (flow_grpo's ``config.sample``)."""

    steps: int = field(
        default=6,
        metadata={
            "help": "denoising steps while training (Denoising Reduction; held-out images: generator.steps)",
            "range": (1, 1000),
        },
    )
    noise_level: float = field(
        default=0.9, metadata={"help": "a in the SDE's noise scale a sqrt(t / (1 - t))", "range": (0, 10, True)}
    )
    window: int = field(
        default=5,
        metadata={
            "help": "consecutive steps sampled by the SDE and trained on (Flow-GRPO-Fast); the rest: the ODE",
            "range": (1, 1000),
        },
    )
    window_range: list[int] = field(
        default_factory=lambda: [0, 5],
        metadata={"help": "[first, end): the steps a window is drawn within (one window per group and round)"},
    )
    guidance: float | None = field(
        default=None,
        metadata={
            "help": "guidance while training (FLUX: the embedded scale; SD3.5: classifier-free); null: "
            "generator.guidance",
            "range": (0, None),
        },
    )
    max_size: int = field(
        default=512,
        metadata={"help": "longer image side while training (pixels; flow_grpo's resolution)", "range": (16, 16_384)},
    )


@dataclass
class FlowTrainerSettings:
    """The optimisation (names as trl's GRPOConfig where they mean the same)."""

    num_generations: int = field(
        default=24, metadata={"help": "group size G: images per prompt", "range": (2, 65_536)}
    )
    per_device_train_batch_size: int = field(
        default=3,
        metadata={
            "help": "images per process in a sampling (and training) batch; divides num_generations",
            "range": (1, 65_536),
        },
    )
    generation_batch_size: int | None = field(
        default=None,
        metadata={
            "help": f"images a round samples, all processes together; null: {FLOW_GRPO_ROUND} (48 prompts "
            "x 24, flow_grpo's)",
            "range": (1, 10**8),
        },
    )
    global_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "images per optimizer step, all processes together (a round's updates: "
            "generation_batch_size / this); null: half a round (flow_grpo's two updates)",
            "range": (1, 10**8),
        },
    )
    max_steps: int = field(default=300, metadata={"help": "optimizer steps", "range": (1, 10**9), "may_change": True})
    learning_rate: float = field(default=3e-4, metadata={"help": "AdamW", "range": (0, 10, True)})
    adam_beta1: float = field(default=0.9, metadata={"help": "", "range": (0, 1)})
    adam_beta2: float = field(default=0.999, metadata={"help": "", "range": (0, 1)})
    adam_epsilon: float = field(default=1e-8, metadata={"help": "", "range": (0, 1, True)})
    weight_decay: float = field(default=1e-4, metadata={"help": "AdamW's", "range": (0, None)})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping (0: none)", "range": (0, None)})
    beta: float = field(
        default=0.0, metadata={"help": "weight of the KL to the frozen model (the adapter off)", "range": (0, None)}
    )
    epsilon: float = field(
        default=1e-4, metadata={"help": "the ratio's clip range (flow_grpo's clip_range)", "range": (0, 1, True)}
    )
    advantage_clip: float = field(
        default=5.0,
        metadata={"help": "advantages clipped to +-this (flow_grpo's adv_clip_max)", "range": (0, None, True)},
    )
    scale_rewards: str = field(
        default="batch",
        metadata={
            "help": "advantage's denominator: group (its std), batch (the round's std: flow_grpo's global_std) "
            "or none",
            "choices": SCALES,
        },
    )
    num_iterations: int = field(
        default=1, metadata={"help": "passes over a round's images (flow_grpo's num_inner_epochs)", "range": (1, 100)}
    )
    reward_weights: list[float] | None = field(
        default=None, metadata={"help": "one per reward (reward + more_rewards), summed; null: all 1"}
    )
    bf16: bool | None = field(default=None, metadata={"help": "mixed precision; null: on where the GPU supports it"})
    activation_checkpointing: bool = field(
        default=False, metadata={"help": "recompute the transformer's activations in backward (memory for time)"}
    )
    save_steps: int = field(
        default=60,
        metadata={
            "help": "a checkpoint at the end of the round that reaches each multiple",
            "range": (1, 10**9),
            "may_change": True,
        },
    )
    save_total_limit: int | None = field(
        default=2,
        metadata={"help": "checkpoints kept (oldest removed); null: all", "range": (1, None), "may_change": True},
    )


@dataclass
class FlowLoraSettings:
    """The transformer's LoRA adapter (peft, added as diffusers' LoRA training adds it)."""

    r: int = field(default=64, metadata={"help": "rank", "range": (1, 4096)})
    alpha: int = field(default=128, metadata={"help": "lora_alpha", "range": (1, 100_000)})
    target_modules: list[str] | None = field(
        default=None, metadata={"help": "null: flow_grpo's modules for the generator (attention, FLUX's feed-forward)"}
    )


@dataclass
class FlowEvalSettings:
    every: int = field(
        default=60,
        metadata={
            "help": "held-out images scored every K steps (and before the first; 0: never)",
            "range": (0, None),
            "may_change": True,
        },
    )
    sheet_tasks: int = field(
        default=6,
        metadata={
            "help": "held-out tasks shown in sample_sheets.png (a row per evaluation)",
            "range": (0, 64),
            "may_change": True,
        },
    )


@dataclass
class FlowGrpoSettings:
    """Settings of ``rl/flow_grpo.py``. Keys marked ``may_change`` may differ when a run is resumed."""

    groups: ClassVar[dict] = {"reward": reward_config, "generator": flow_generator_config}

    out: str = field(
        default=MISSING, metadata={"help": "checkpoints, lora/ (with its card), plots, results", "may_change": True}
    )
    data: str = field(
        default=MISSING,
        metadata={"help": 'tasks: flux-fill {"image", "mask", "prompt"}; sd3 {"prompt"} (JSONL or datasets folder)'},
    )
    eval_data: str | None = field(
        default=None, metadata={"help": "held-out tasks; null: whole scenes / images from the end of data"}
    )
    eval_tasks: int = field(
        default=8, metadata={"help": "held out of data when eval_data is null (whole groups)", "range": COUNT}
    )
    image_root: str | None = image_root_field()
    allow_absolute_paths: bool = allow_absolute_paths_field()
    skip_bad: bool = field(
        default=False, metadata={"help": "true: skip bad rows (named by file:line) and count them instead of failing"}
    )
    max_decode_pixels: int = field(
        default=DEFAULT_MAX_PIXELS, metadata={"help": "larger images are refused unread", "range": PIXELS}
    )
    generator: Any = field(
        default=None,
        metadata={
            "help": "generator=flux-fill (inpainting) | sd3 (text to image), with generator.path=",
            "may_change": ("device", "batch_size"),
        },
    )
    reward: Any = field(
        default=None,
        metadata={
            "help": "reward=NAME picks reward/NAME.yaml",
            "may_change": ("device", "backend", "server", "batch_size"),
        },
    )
    more_rewards: list[Any] = field(
        default_factory=list,
        metadata={"help": "further training rewards ({name: ..., ...}); weights: trainer.reward_weights"},
    )
    judge: Any = field(
        default=None,
        metadata={"help": "a held-out judge the generator is not trained on (name or {name: ..., ...}); null: none"},
    )
    normalize_rewards: bool = normalize_rewards_field()
    max_reward_failures: float = max_reward_failures_field("round", "images")
    sample: SampleSettings = field(default_factory=SampleSettings)
    trainer: FlowTrainerSettings = field(default_factory=FlowTrainerSettings)
    lora: FlowLoraSettings = field(default_factory=FlowLoraSettings)
    eval: FlowEvalSettings = field(default_factory=FlowEvalSettings)
    seed: int = field(default=42, metadata={"help": "every noise, window and held-out image is drawn from it"})
    resume: str = resume_field("auto: continue the same run in out; never: new only")
    overwrite: bool = overwrite_field("an earlier run in out is moved aside to out.old-<time>")
    stall_timeout_s: float = field(
        default=1800,
        metadata={
            "help": "no progress this long: dump the stacks, exit 2 (0: never)",
            "may_change": True,
            "range": (0, None),
        },
    )
    plan: bool = field(
        default=False,
        metadata={
            "help": "true: print the run's plan (memory per GPU, time) and exit; nothing loads",
            "may_change": True,
        },
    )
    plan_for: PlanSettings = field(
        default_factory=PlanSettings,
        metadata={"help": "plan=true: GPUs, machines, ZeRO stage, GPU memory", "may_change": True},
    )

    def batch_mapping(self) -> dict[str, Any]:
        """The trainer's batch keys as :mod:`training.shared.launch` reads them (the accumulation always derived)."""
        return {
            "per_device_train_batch_size": self.trainer.per_device_train_batch_size,
            "gradient_accumulation_steps": None,
            "global_batch_size": self.trainer.global_batch_size or self.round_images() // 2,
        }

    def round_images(self) -> int:
        return self.trainer.generation_batch_size or FLOW_GRPO_ROUND

    def problems(self) -> list[str]:
        """Checks between fields, the generator's model (not for a plan), the tasks held out against the rows of
        ``data``, the layout and batch over this launch's processes (``plan_for``'s for a plan) and the launch (FSDP
        and ZeRO-3 refused), every one (the fields' own ranges and choices are :func:`parse`'s)."""
        processes = planned_processes(self.plan_for) if self.plan else launch_processes()
        found = [] if str(self.out).strip() else ["out= is empty: name the output folder (an unset shell variable?)"]
        if not isinstance(self.generator, dict) or self.generator.get("name") not in ("flux-fill", "sd3"):
            name = self.generator.get("name") if isinstance(self.generator, dict) else None
            found.append(
                f"generator={name}: Flow-GRPO trains generator=flux-fill (inpainting) or generator=sd3 (text to "
                "image), with generator.path=DIR"
            )
        if not isinstance(self.reward, dict) or not self.reward.get("name"):
            found.append("no reward: choose one with reward=NAME (e.g. reward=sa-iqa reward.model=DIR)")
        t, s = self.trainer, self.sample
        images, group = self.round_images(), t.num_generations
        if images % group:
            found.append(f"trainer.generation_batch_size={images} is not a multiple of num_generations={group}")
        elif problem := Layout(images // group, group, processes, t.per_device_train_batch_size).problem():
            found.append(problem)
        found += batch_problems(self.batch_mapping(), processes, FLOW_GRPO_BATCH)
        per_update = self.batch_mapping()["global_batch_size"]
        if not found and images % per_update:
            found.append(
                f"trainer.global_batch_size={per_update} does not divide a round's {images} images "
                "(trainer.generation_batch_size): a round makes a whole number of optimizer steps"
            )
        if len(s.window_range) != 2 or not 0 <= s.window_range[0] < s.window_range[1]:
            found.append(f"sample.window_range={s.window_range}: give [first, end) with 0 <= first < end")
        elif min(s.window_range[1], s.steps) - s.window_range[0] < s.window:
            found.append(
                f"sample.window={s.window} steps do not fit in sample.window_range={s.window_range} of "
                f"sample.steps={s.steps}"
            )
        weights, n_rewards = t.reward_weights, 1 + len(self.more_rewards)
        if weights is not None and len(weights) != n_rewards:
            found.append(
                f"trainer.reward_weights has {len(weights)} weights for {n_rewards} rewards (reward + more_rewards)"
            )
        if self.judge and to_plain_entry(self.judge) in [to_plain_entry(r) for r in (self.reward, *self.more_rewards)]:
            found.append("judge= is a training reward: a held-out judge must be another measure (or null)")
        if not self.plan:
            gen = to_plain(self.generator) if isinstance(self.generator, dict) else {}
            if problem := missing_model(gen.get("path"), "generator.path"):
                found.append(problem)
            found += heldout_problems(self, prompts=gen.get("name") == "sd3")
        return found + ([] if self.plan else launch_problems())


def launch_problems() -> list[str]:
    """What this launch's accelerate settings ask that Flow-GRPO cannot do."""
    found = []
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() in ("1", "true"):
        found.append(
            "FSDP launches are not supported by Flow-GRPO (sampling needs the whole transformer): use DDP "
            "or DeepSpeed ZeRO-1/2"
        )
    if uses_deepspeed(None) and os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3":
        found.append(
            "DeepSpeed ZeRO-3 is not supported by Flow-GRPO (sampling needs the whole transformer at every "
            "step): use ZeRO-2 (configs/accelerate/zero2.yaml) or DDP"
        )
    return found


def to_plain_entry(entry: Any) -> dict[str, Any]:
    """A reward entry (a name or a config node) as one comparable mapping."""
    return {"name": entry} if isinstance(entry, str) else to_plain(entry)
