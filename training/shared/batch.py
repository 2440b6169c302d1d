"""The effective batch (per device x gradient accumulation x processes) and ``trainer.global_batch_size`` (ours,
never passed to trl): the accumulation derived from it for the launch's processes, a launch it does not divide
refused; null with no accumulation given: the source's batch (SFT: SA-IQA §4.1's 256; GRPO: App. D.3's 32
completions) on one process or eight. An accumulation given as a number is used as given. ``plan_for``
(:class:`PlanSettings`) is the launch a ``plan=true`` makes the batch for, here so that a run never imports the plan.

>>> sft = SFT_BATCH
>>> trainer = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": None, "global_batch_size": None}
>>> [resolve_batch(trainer, n, sft).accumulation for n in (1, 8)]
[32, 4]
>>> batch_problems(trainer, 3, sft)  # doctest: +NORMALIZE_WHITESPACE
['trainer.global_batch_size=256 (SA-IQA §4.1) is not a multiple of trainer.per_device_train_batch_size=8 x 3
processes = 24: give a multiple of 24 (240 or 264), or a per-device batch that divides 256 / 3 processes']
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reward.core.errors import UserError

GLOBAL_BATCH_KEY = "global_batch_size"  # ours: kept out of trl's configs
OURS = (GLOBAL_BATCH_KEY,)
DEFAULT_GPU_MEMORY_GIB = 139.0  # one H200, as torch reports it (141 GB)


@dataclass(frozen=True)
class SourceBatch:
    """The effective batch a command's source trained with, and where it says so."""

    value: int
    source: str
    unit: str = "samples"


SFT_BATCH = SourceBatch(256, "SA-IQA §4.1")  # "gradient accumulation ... an effective global batch size of 256"
GRPO_BATCH = SourceBatch(32, "SA-IQA App. D.3 (4 prompts x group 8)", "completions")  # "group size of 8, batch size 4"


@dataclass(frozen=True)
class Batch:
    """How one optimizer step's batch is made on a launch."""

    per_device: int
    accumulation: int
    processes: int
    derived: bool  # the accumulation was derived from the global batch (given, or the source's)


def global_batch_help(source: SourceBatch) -> str:
    """The help of ``trainer.global_batch_size`` for a command whose source trained with ``source``."""
    return (
        f"ours, not trl's: the effective batch ({source.unit} per optimizer step = per device x accumulation x "
        "processes) on any number of processes, the accumulation derived from it (refused when the processes do "
        f"not divide it); null: {source.source}'s {source.value} unless gradient_accumulation_steps is set"
    )


def launch_processes() -> int:
    """Processes of this launch, all machines together (``WORLD_SIZE``, set by accelerate, torchrun and deepspeed;
    1 alone)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def trl_fields(trainer: Mapping[str, Any]) -> dict[str, Any]:
    """``trainer.*`` without our own keys: what trl's config receives."""
    return {k: v for k, v in trainer.items() if k not in OURS}


def batch_problems(trainer: Mapping[str, Any], processes: int, source: SourceBatch | None) -> list[str]:
    """What keeps ``trainer``'s batch settings from making a batch on ``processes`` processes (none: they do);
    ``source`` ``None``: no source batch to derive the accumulation from (as given, else 1)."""
    per_device = trainer.get("per_device_train_batch_size")
    given = trainer.get(GLOBAL_BATCH_KEY)
    accumulation = trainer.get("gradient_accumulation_steps")
    problems = [
        f"trainer.{key}={value!r}: give a whole number >= 1"
        for key, value in (("per_device_train_batch_size", per_device), (GLOBAL_BATCH_KEY, given))
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1)
    ]
    if accumulation is not None and not (isinstance(accumulation, int) and accumulation >= 1):
        problems.append(f"trainer.gradient_accumulation_steps={accumulation!r}: give a whole number >= 1, or null")
    if problems or per_device is None:
        return problems
    step = per_device * processes
    if given is not None and accumulation is not None:
        if step * accumulation != given:
            problems.append(
                f"trainer.global_batch_size={given} and trainer.gradient_accumulation_steps={accumulation} disagree: "
                f"{per_device} per device x {accumulation} x {processes} processes = {step * accumulation}; set one "
                "of them (the other null)"
            )
        return problems
    target = given if given is not None else (None if accumulation is not None or source is None else source.value)
    if target is not None and target % step:
        why = f"trainer.global_batch_size={target}" + (
            "" if given is not None or source is None else f" ({source.source})"
        )
        lower, higher = target // step * step, (target // step + 1) * step
        options = f"{lower} or {higher}" if lower else f"{higher}"
        problems.append(
            f"{why} is not a multiple of trainer.per_device_train_batch_size={per_device} x {processes} processes "
            f"= {step}: give a multiple of {step} ({options}), or a per-device batch that divides {target} / "
            f"{processes} processes"
        )
    return problems


def resolve_batch(trainer: Mapping[str, Any], processes: int, source: SourceBatch | None) -> Batch:
    """The batch ``trainer``'s settings make on ``processes`` processes; a :class:`UserError` naming the numbers
    when they make none (:func:`batch_problems`)."""
    problems = batch_problems(trainer, processes, source)
    if problems:
        raise UserError("invalid batch settings:\n  - " + "\n  - ".join(problems))
    per_device = int(trainer["per_device_train_batch_size"])
    accumulation = trainer.get("gradient_accumulation_steps")
    if accumulation is not None:
        return Batch(per_device, int(accumulation), processes, derived=False)
    target = trainer.get(GLOBAL_BATCH_KEY) or (source.value if source else None)
    if target is None:  # no source batch: trl's own accumulation
        return Batch(per_device, 1, processes, derived=False)
    return Batch(per_device, target // (per_device * processes), processes, derived=True)


def describe_batch(batch: Batch, trainer: Mapping[str, Any], source: SourceBatch | None) -> str:
    """The line a run prints at start and a plan shows: how the batch is made, beside the source's.

    >>> sft = SFT_BATCH
    >>> describe_batch(Batch(8, 1, 8, derived=False), {"gradient_accumulation_steps": 1}, sft)
    'effective batch 64 = 8 per device x 1 accumulation x 8 processes (trainer.gradient_accumulation_steps=1 as \
given: the batch grows with the processes; SA-IQA §4.1 trained with 256)'
    """
    unit = "" if source is None or source.unit == "samples" else f" {source.unit}"
    effective = batch.per_device * batch.accumulation * batch.processes
    made = (
        f"effective batch {effective}{unit} = {batch.per_device} per device x {batch.accumulation} "
        f"accumulation x {batch.processes} processes"
    )
    given = trainer.get(GLOBAL_BATCH_KEY)
    if not batch.derived and trainer.get("gradient_accumulation_steps") is None:
        how = f"trainer.gradient_accumulation_steps={batch.accumulation}, trl's: the batch grows with the processes"
    elif not batch.derived:
        how = f"trainer.gradient_accumulation_steps={batch.accumulation} as given: the batch grows with the processes"
    elif given is None and source is not None:
        how = f"trainer.global_batch_size=null: {source.source}'s, the accumulation derived for the processes"
    else:
        how = f"trainer.global_batch_size={given}, the accumulation derived for the processes"
    return f"{made} ({how}" + (f"; {source.source} trained with {source.value})" if source else ")")


def check_world(batch: Batch, world_size: int) -> None:
    """The processes trl's config found are those the batch was made for (``WORLD_SIZE``)."""
    if world_size != batch.processes:
        raise UserError(
            f"this launch runs {world_size} processes but WORLD_SIZE said {batch.processes}: the accumulation "
            f"({batch.accumulation}) was derived for {batch.processes}; launch with accelerate launch, torchrun or "
            "deepspeed (they set WORLD_SIZE), or set trainer.gradient_accumulation_steps"
        )


@dataclass
class PlanSettings:
    """What ``plan=true`` plans for when the launch itself cannot say (a plan runs in one process, before any
    ``accelerate launch``): null values are read from this launch's environment."""

    processes: int | None = field(
        default=None,
        metadata={
            "help": "GPUs (processes) per machine; null: this launch's (WORLD_SIZE / machines), else 1",
            "range": (1, 4096),
        },
    )
    machines: int = field(default=1, metadata={"help": "machines (accelerate --num_machines)", "range": (1, 100_000)})
    zero_stage: int | None = field(
        default=None,
        metadata={"help": "DeepSpeed ZeRO stage 0-3; null: this launch's accelerate config, else 0", "range": (0, 3)},
    )
    gpu_memory_gib: float = field(
        default=DEFAULT_GPU_MEMORY_GIB,
        metadata={"help": "memory of one GPU (H200: 139 GiB as torch reports it)", "range": (0, 100_000, True)},
    )
    model: str | None = field(
        default=None,
        metadata={"help": "plan with this model (a built-in name) when model.path / policy.path is not here yet"},
    )
    reward_model: str | None = field(
        default=None, metadata={"help": "GRPO: the same for the reward's model (e.g. a scorer still to be trained)"}
    )
    rows: int | None = field(
        default=None,
        metadata={
            "help": "SFT: training rows to plan epochs with when data.train cannot be read here",
            "range": (1, 10**10),
        },
    )


def planned_processes(p: PlanSettings) -> int:
    """Processes of the planned launch, all machines together: ``p.processes`` per machine, else this launch's."""
    return (p.processes or max(1, launch_processes() // max(1, p.machines))) * p.machines
