"""``trainer.*`` sizes checked before anything loads against :data:`TRAINER_RANGES` (SFT and GRPO; trl checks few,
and only once imported): a zero, negative or absurd size would train 0 steps and say done, fail deep in torch or run
for days. :func:`require_trained` refuses, before any export, a run that made no optimizer step.

Example:
    >>> trainer_size_problems({"gradient_accumulation_steps": -3, "num_train_epochs": 0, "max_steps": -1})
    ['trainer.gradient_accumulation_steps=-3: must be between 1 and 65,536', 'trainer.num_train_epochs=0: must be \
above 0 and at most 10,000 (or set trainer.max_steps=N)']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reward.core.config import Range, range_problem
from reward.core.errors import UserError

MAX_BATCH = 65_536  # samples per device and step, accumulation steps, generations per prompt
MAX_STEPS = 10**9

TRAINER_RANGES: dict[str, Range] = {
    "per_device_train_batch_size": (1, MAX_BATCH),
    "per_device_eval_batch_size": (1, MAX_BATCH),
    "gradient_accumulation_steps": (1, MAX_BATCH),
    "global_batch_size": (1, MAX_BATCH * 64),  # ours: the effective batch (training.shared.batch)
    "max_steps": (-1, MAX_STEPS),  # -1: the epochs decide (0 refused below)
    "learning_rate": (0, 10),
    "weight_decay": (0, None),
    "max_grad_norm": (0, None),
    "warmup_steps": (0, MAX_STEPS),
    "logging_steps": (0, MAX_STEPS, True),
    "save_steps": (0, MAX_STEPS, True),
    "eval_steps": (0, MAX_STEPS, True),
    "save_total_limit": (1, None),
    "dataloader_num_workers": (0, 1024),
    # GRPO (trl.GRPOConfig)
    "num_generations": (2, MAX_BATCH),  # a group's advantages need 2 completions
    "generation_batch_size": (1, MAX_BATCH * 64),
    "steps_per_generation": (1, MAX_BATCH),
    "num_iterations": (1, 1000),
    "max_completion_length": (1, 1_000_000),
    "temperature": (0, 100, True),
    "beta": (0, None),
    "epsilon": (0, None),
}
MAX_EPOCHS = 10_000


def trainer_size_problems(trainer: Mapping[str, Any], where: str = "trainer") -> list[str]:
    """Out-of-range sizes among ``trainer`` (a ``trainer.*`` section): :data:`TRAINER_RANGES`, plus ``max_steps``
    -1 or N >= 1, and ``num_train_epochs`` > 0 unless ``max_steps`` sets the length."""
    problems = [p for k, v in trainer.items() if (p := range_problem(f"{where}.{k}", v, TRAINER_RANGES.get(k)))]
    steps = trainer.get("max_steps", -1)
    if steps == 0:
        problems.append(f"{where}.max_steps=0: give -1 (the epochs decide) or a number of steps >= 1")
    epochs = trainer.get("num_train_epochs")
    steps_set = isinstance(steps, int) and not isinstance(steps, bool) and steps > 0
    if (
        epochs is not None
        and not steps_set
        and (problem := range_problem(f"{where}.num_train_epochs", epochs, (0, MAX_EPOCHS, True)))
    ):
        problems.append(f"{problem} (or set {where}.max_steps=N)")
    return problems


def require_trained(global_step: int, what: str, trainer: Mapping[str, Any]) -> None:
    """Refuse a run that made no optimizer step (nothing to export; its result would be the untrained model), naming
    the ``trainer.*`` settings that set its length.

    >>> require_trained(3, "SFT", {})
    >>> require_trained(0, "SFT", {"num_train_epochs": 0})
    Traceback (most recent call last):
    ...
    reward.core.errors.UserError: SFT trained 0 steps (trainer.num_train_epochs=0): nothing was exported; give the \
run at least one step (trainer.max_steps=N, or num_train_epochs > 0 over a non-empty training set)
    """
    if global_step > 0:
        return
    keys = ("max_steps", "num_train_epochs", "gradient_accumulation_steps", "per_device_train_batch_size")
    hint = ", ".join(f"trainer.{k}={trainer[k]}" for k in keys if k in trainer)
    raise UserError(
        f"{what} trained 0 steps{f' ({hint})' if hint else ''}: nothing was exported; give the run at least one step "
        "(trainer.max_steps=N, or num_train_epochs > 0 over a non-empty training set)"
    )
