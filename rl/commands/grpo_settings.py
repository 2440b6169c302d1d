"""The settings of ``rl/grpo.py`` (GRPO prompt expansion), checked without torch or trl: the fields' own types,
ranges and choices (:func:`reward.core.config.parse`), and :meth:`GrpoSettings.problems`, every check between them, the
models and files named, trl's fields and the batch over this launch's processes, all said together."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import MISSING

from reward.core.config import COUNT, PIXELS, TOKENS, overwrite_field, resume_field, to_plain
from reward.data.datasets import check_source
from reward.data.images import DEFAULT_MAX_PIXELS
from reward.data.manifest import allow_absolute_paths_field, image_root_field
from reward.integrations.reward_set import missing_reward_models
from reward.rewards.registry import reward_config
from reward.vlm.hub import missing_model
from rl.generators import generator_config
from rl.inpaint_tasks import heldout_problems
from rl.policy import PolicySettings
from rl.reward_fields import max_reward_failures_field, normalize_rewards_field
from training.shared.launch import (
    GLOBAL_BATCH_KEY,
    GRPO_BATCH,
    batch_problems,
    global_batch_help,
    launch_problems,
    launch_processes,
    resolve_batch,
)
from training.shared.plan import PlanSettings, planned_processes
from training.shared.trainable import LoraSettings

DEFAULT_TEMPLATE = (
    "Expand this prompt for inpainting the masked region of an interior photo into one detailed, vivid "
    "description of the finished room: {prompt}"
)


@dataclass
class ExpansionPromptSettings:
    template: str = field(
        default=DEFAULT_TEMPLATE, metadata={"help": "the user turn; {prompt} is the task's base prompt"}
    )
    system: str | None = field(default=None, metadata={"help": "optional system turn"})

    def problems(self) -> list[str]:
        if "{prompt}" not in self.template:
            return ["prompt.template must contain {prompt} (where the task's base prompt goes)"]
        return []


@dataclass
class HeldOutSettings:
    every: int = field(
        default=10,
        metadata={"help": "held-out evaluation every K steps (0: off)", "may_change": True, "range": (0, None)},
    )
    max_new_tokens: int | None = field(
        default=None, metadata={"help": "null: trainer.max_completion_length", "range": TOKENS}
    )


# trl.GRPOConfig fields, NAME -> (default, help): the paper's where App. D.3 states them (group 8, batch 4, eq. 8's
# loss and KL estimator), ours elsewhere; any other field is set with trainer.NAME=VALUE (checked against
# GRPOConfig's fields and their types before anything loads)
PAPER_TRAINER: dict[str, tuple[Any, str]] = {
    "num_generations": (8, "group size G (the paper: 8)"),
    "per_device_train_batch_size": (
        4,
        "completions per process and micro-step: 4 divides the paper's 32 on 1, 2, 4 or 8 processes (groups may "
        "span processes)",
    ),
    "gradient_accumulation_steps": (
        None,
        "null: derived from global_batch_size (8 on one process, 1 on eight); a number: used as given, the batch "
        "then grows with the processes",
    ),
    GLOBAL_BATCH_KEY: (None, global_batch_help(GRPO_BATCH)),
    "loss_type": (
        "grpo",
        "eq. 8: each completion's token losses averaged over its own length, then over the group (trl's grpo; "
        "trl's own default, dapo, averages over all tokens of the batch)",
    ),
    "use_bias_correction_kl": (
        False,
        "eq. 8: the KL term is DeepSeekMath's k3 estimator, pi_ref/pi - log(pi_ref/pi) - 1 (its gradient "
        "beta (1 - pi_ref/pi)); true: trl's default, DeepSeek-V3.2's correction, the KL term x pi/pi_old (its "
        "gradient beta (log pi - log pi_ref): not eq. 8)",
    ),
    "max_completion_length": (None, "null: the generator's text budget (CLIP 77; FLUX Fill's T5: 512)"),
    "temperature": (1.0, "ours (the paper gives none)"),
    "learning_rate": (1.0e-6, "ours (the paper gives none)"),
    "beta": (0.04, "ours: KL to the reference policy (0 drops the reference model)"),
    "max_steps": (500, "ours"),
    "lr_scheduler_type": ("constant", ""),
    "bf16": (None, "null: on where the GPU supports it"),
    "activation_checkpointing": (True, "trl's GRPO default: recompute activations in backward to save memory"),
    "use_vllm": (False, "true on GPUs: trl's vLLM generation (vllm_mode colocate | server)"),
    "reward_weights": (None, "one per reward (reward + more_rewards); null: all 1"),
    "logging_steps": (1, ""),
    "save_steps": (50, ""),
    "save_total_limit": (2, ""),
    "report_to": ("none", ""),
}


@dataclass
class GrpoSettings:
    """Settings of ``rl/grpo.py``. Keys marked ``may_change`` may differ when a run is resumed: they change how long it
    runs, what it logs or where the models sit, not what it learns."""

    groups: ClassVar[dict] = {"reward": reward_config, "generator": generator_config}

    out: str = field(
        default=MISSING, metadata={"help": "checkpoints, policy/ (with its card), plots, results", "may_change": True}
    )
    data: str = field(
        default=MISSING, metadata={"help": 'tasks: JSONL {"image", "mask", "prompt"[, "scene"]} or datasets folder'}
    )
    policy: PolicySettings = field(default_factory=PolicySettings)
    eval_data: str | None = field(
        default=None, metadata={"help": "held-out tasks; null: whole scenes / images from the end of data"}
    )
    eval_tasks: int = field(
        default=8, metadata={"help": "held out of data when eval_data is null (whole groups)", "range": COUNT}
    )
    image_root: str | None = image_root_field()
    allow_absolute_paths: bool = allow_absolute_paths_field()
    skip_bad: bool = field(
        default=False,
        metadata={"help": "a bad row (file and line named) is refused; true: skipped and counted instead"},
    )
    max_decode_pixels: int = field(
        default=DEFAULT_MAX_PIXELS, metadata={"help": "larger images are refused unread", "range": PIXELS}
    )
    reward: Any = field(
        default=None,
        metadata={
            "help": "reward=NAME picks the config reward/NAME.yaml",
            "may_change": ("device", "backend", "server", "batch_size"),
        },
    )
    generator: Any = field(
        default=None,
        metadata={"help": "generator=NAME picks generator/NAME.yaml", "may_change": ("device", "batch_size")},
    )
    more_rewards: list[Any] = field(
        default_factory=list, metadata={"help": "further training rewards ({name: ..., ...})"}
    )
    eval_rewards: list[Any] = field(
        default_factory=list, metadata={"help": "held-out only: names or {name: ..., ...}"}
    )
    normalize_rewards: bool = normalize_rewards_field()
    max_reward_failures: float = max_reward_failures_field("step", "completions")
    lora: LoraSettings = field(default_factory=LoraSettings)
    prompt: ExpansionPromptSettings = field(default_factory=ExpansionPromptSettings)
    eval: HeldOutSettings = field(default_factory=HeldOutSettings)
    resume: str = resume_field("auto: continue the same run in out; never: new only")
    overwrite: bool = overwrite_field("an earlier run in out is moved aside to out.old-<time>")
    seed: int = field(default=42, metadata={"help": "trl's seed and the generator's (one per task and step)"})
    samples_per_step: int = field(
        default=4, metadata={"help": "images saved per step in out/samples", "may_change": True, "range": (0, 1024)}
    )
    stall_timeout_s: float = field(
        default=1800,
        metadata={
            "help": "no progress this long: dump the stacks, exit 2 (0: never)",
            "may_change": True,
            "range": (0, None),
        },
    )
    trainer: dict[str, Any] = field(
        default_factory=lambda: {name: default for name, (default, _) in PAPER_TRAINER.items()},
        metadata={
            "help": "trl.GRPOConfig fields (any one: trainer.NAME=V)",
            "entries": {name: text for name, (_, text) in PAPER_TRAINER.items() if text},
            "may_change": (
                "max_steps",
                "logging_steps",
                "logging_first_step",
                "save_steps",
                "save_total_limit",
                "report_to",
                "dataloader_num_workers",
            ),
        },
    )
    plan: bool = field(
        default=False,
        metadata={
            "help": "true: print the run's plan (batch, memory per GPU of each model) and exit; nothing loads",
            "may_change": True,
        },
    )
    plan_for: PlanSettings = field(
        default_factory=PlanSettings,
        metadata={"help": "plan=true: GPUs, machines, ZeRO stage, GPU memory", "may_change": True},
    )

    def problems(self) -> list[str]:
        """Every check beyond the fields' own, before trl is imported: between the fields, trl's ``GRPOConfig``
        fields (from a table of them) and the batch over this launch's processes (``plan_for``'s for a plan); the files
        named are :meth:`missing_inputs`'s, when a run starts."""
        problems = []
        if not isinstance(self.reward, dict) or not self.reward.get("name"):  # parse made it a plain dict
            problems.append("no reward: choose one with reward=NAME (e.g. reward=sa-iqa reward.model=DIR)")
        if not self.generator:
            problems.append("no generator: choose one with generator=NAME (procedural, sd15-inpaint, ...)")
        if self.trainer.get("remove_unused_columns"):
            problems.append(
                "trainer.remove_unused_columns=true would drop task_id, which the rewards need; leave it unset"
            )
        if self.trainer.get("sync_ref_model") and (self.lora.enabled or not self.trainer.get("beta")):
            why = (
                "with LoRA the reference is the policy with its adapter disabled" if self.lora.enabled else "beta is 0"
            )
            problems.append(f"trainer.sync_ref_model=true has no reference model to sync ({why}); leave it false")
        n_rewards = 1 + len(self.more_rewards)
        weights = self.trainer.get("reward_weights")
        if weights is not None and len(weights) != n_rewards:
            problems.append(
                f"trainer.reward_weights has {len(weights)} weights for {n_rewards} rewards "
                "(reward + more_rewards); give one per reward"
            )
        processes = planned_processes(self.plan_for) if self.plan else launch_processes()
        problems += launch_problems("GRPOConfig", self.trainer, processes=processes, source=GRPO_BATCH)
        return problems + (
            [] if batch_problems(self.trainer, processes, GRPO_BATCH) else self._group_problems(processes)
        )

    def _group_problems(self, processes: int) -> list[str]:
        """trl's checks of the completions a generation makes against the group size, made before trl loads."""
        t = self.trainer
        group, made, steps = t.get("num_generations"), t.get("generation_batch_size"), t.get("steps_per_generation")
        if not isinstance(group, int) or made is not None and not isinstance(made, int):
            return []  # a mistyped value: launch_problems names it
        if group < 2:
            return [
                f"trainer.num_generations={group}: GRPO compares at least 2 completions of a prompt; give 2 or more"
            ]
        batch = resolve_batch(t, processes, GRPO_BATCH)
        if made is None and (steps is None or isinstance(steps, int)):
            made = batch.per_device * processes * (steps or batch.accumulation)
        if made is None or made % group == 0:
            return []
        return [
            f"trainer.num_generations={group} must divide the {made} completions a generation makes "
            f"(trainer.generation_batch_size; by default {processes} process(es) x "
            f"trainer.per_device_train_batch_size={batch.per_device} x steps_per_generation, the accumulation "
            f"{batch.accumulation}): change the group size or the batch"
        ]

    def missing_inputs(self) -> list[str]:
        """The models and task files named that are not there, and the tasks held out against the rows of ``data``
        (counted, no image read): checked when a run starts (a plan is made before they are), before trl loads."""
        gen = to_plain(self.generator) if self.generator else {}
        problems = [
            problem
            for key, value in (("policy.path", self.policy.path), ("generator.path", gen.get("path")))
            if (problem := missing_model(value, key))
        ]
        for key, value in (("data", self.data), ("eval_data", self.eval_data)):
            if value and not check_source(value) and not Path(value).expanduser().exists():
                problems.append(f"{key}={value}: no such file or folder (an inpainting tasks manifest)")
        problems += missing_reward_models([self.reward], "reward")
        problems += missing_reward_models(self.more_rewards, "more_rewards")
        problems += missing_reward_models(self.eval_rewards, "eval_rewards")
        return problems + heldout_problems(self)


def reward_scale(settings: GrpoSettings) -> str:
    """What trl's logged ``reward`` (the weighted sum of the rewards) ranges over: each reward normalised to [0, 1].

    >>> s = GrpoSettings(out="o", data="d", policy=PolicySettings(path="p"), more_rewards=[{"name": "qbench"}])
    >>> reward_scale(s), reward_scale(GrpoSettings(out="o", data="d", normalize_rewards=False))
    ('normalised to [0, 2]', 'raw scale')
    """
    if not settings.normalize_rewards:
        return "raw scale"
    weights = settings.trainer.get("reward_weights") or [1.0] * (1 + len(settings.more_rewards))
    return f"normalised to [{sum(min(w, 0) for w in weights):g}, {sum(max(w, 0) for w in weights):g}]"
