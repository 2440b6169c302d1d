"""Settings of ``training/grpo_scorer.py`` (GRPO on the scorer itself), with the checks between their fields
(``problems()``, collected by :func:`reward.core.config.parse` before anything loads); ``trainer.*`` are
trl.GRPOConfig fields, checked for this launch as SFT's are (:func:`training.shared.launch.launch_problems`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from reward.core.config import BATCH, RESUME
from reward.rewards.reasoning_prompts import PROMPTS
from training.commands.grpo_scorer_data import ScorerDataSettings
from training.shared.launch import launch_problems, launch_processes
from training.shared.plan import PlanSettings, planned_processes
from training.shared.trainable import LoraSettings, ModelSettings

REWARDS = ("score", "format", "degradation", "ranking")
SCOPES = ("step", "process")
# VisualQuality-R1's release (the default prompt's and rewards'): 8 images of 6 answers per process, 256 answer tokens,
# beta 0.04 and lr 1e-6 (its GRPOConfig's defaults), sampling at temperature 1 with transformers' top-k 50, the loss
# averaged per answer (trl's loss_type grpo) with the k3 KL estimator; configs/recipe/visualquality-r1-koniq.yaml cites
# each line.
TRAINER = {
    "num_generations": 6,
    "per_device_train_batch_size": 48,
    "max_completion_length": 256,
    "beta": 0.04,
    "learning_rate": 1e-6,
    "temperature": 1.0,
    "top_k": 50,
    "loss_type": "grpo",
    "use_bias_correction_kl": False,
}


@dataclass
class GrpoScorerSettings:
    """Settings of ``training/grpo_scorer.py``; ``trainer.*`` are trl.GRPOConfig fields."""

    out: str = field(default=MISSING, metadata={"help": "checkpoints, scorer/, grpo_scorer_result.json"})
    model: ModelSettings = field(default_factory=ModelSettings)
    data: ScorerDataSettings = field(default_factory=ScorerDataSettings)
    prompt: str = field(default="visualquality-r1", metadata={"help": f"the released prompt: {', '.join(PROMPTS)}"})
    rewards: list[str] = field(
        default_factory=lambda: ["ranking", "format"], metadata={"help": f"trl reward functions of {REWARDS}"}
    )
    threshold: float = field(
        default=0.35, metadata={"help": "score reward: |score - MOS| below this on 1-5", "range": (0, 4, True)}
    )
    ranking_scope: str = field(
        default="step",
        metadata={
            "help": "ranking reward's images: step (every process's, gathered: as one process on the same batch) or "
            "process (each process's own, as VisualQuality-R1's release)",
            "choices": SCOPES,
        },
    )
    lora: LoraSettings = field(default_factory=LoraSettings)
    seed: int = field(default=42, metadata={"help": "data order, sampling, synthetic images"})
    resume: str = field(
        default="false", metadata={"help": "auto | true | false", "may_change": True, "choices": RESUME}
    )
    overwrite: bool = field(default=False, metadata={"help": "replace another run's out folder", "may_change": True})
    eval_batch_size: int = field(default=16, metadata={"help": "test images per forward", "range": BATCH})
    trainer: dict[str, Any] = field(default_factory=lambda: dict(TRAINER), metadata={"help": "trl.GRPOConfig fields"})
    plan: bool = field(default=False, metadata={"help": "print memory and time of the run, load nothing"})
    plan_for: PlanSettings = field(default_factory=PlanSettings)

    def problems(self) -> list[str]:
        """The rewards and the prompt named, ``trainer.*`` for this launch (or the planned one); ``data``'s own
        problems are its section's."""
        problems = [f"rewards: {r!r} is none of {REWARDS}" for r in self.rewards if r not in REWARDS]
        problems += [] if self.rewards else [f"rewards=[]: name at least one of {list(REWARDS)}"]
        problems += [f"prompt={self.prompt!r} is none of {list(PROMPTS)}"] if self.prompt not in PROMPTS else []
        processes = planned_processes(self.plan_for) if self.plan else launch_processes()
        return problems + launch_problems("GRPOConfig", self.trainer, processes=processes, source=None)
