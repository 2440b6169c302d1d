"""What every trl training command (SFT, GRPO, the GRPO scorer) does the same way around its trainer, in the order a
run meets it:

1. :func:`launch_problems`: ``trainer.*`` checked before trl is imported, said with the settings' other problems:
   trl's fields and their types from a table (``trl_fields.json``, :func:`fields_of`: torch and transformers take
   10-16 s to import), the sizes (:data:`TRAINER_RANGES`), the batch on this launch's processes
   (:func:`batch_problems`), ``report_to`` (:data:`BACKENDS`);
2. :func:`trl_config`: trl's config class built from ``trainer.*`` over the command's defaults (the batch's
   accumulation for this launch, bf16 where the GPU does it natively or as the launcher chose, ``use_cpu`` without a
   GPU); trl's refusal becomes one message naming ``trainer.*``;
3. :func:`start_output`: the output folder, checked on every process before any model loads
   (:func:`reward.core.outputs.check_output`), created by the main process while the others wait;
4. :func:`resume_checkpoint`: the checkpoint a resumed run continues from (the last complete one);
5. :func:`require_trained`: a run that made no optimizer step refused before any export.

The effective batch is per device x gradient accumulation x processes; ``trainer.global_batch_size`` (ours, never
passed to trl) derives the accumulation for the launch's processes, a launch it does not divide refused; null with no
accumulation given: the source's batch (SFT: SA-IQA §4.1's 256; GRPO: App. D.3's 32 completions) on one process or
eight. An accumulation given as a number is used as given.

Example (a command's own steps in between)::

    problems = launch_problems("SFTConfig", settings.trainer, processes=launch_processes(), source=SFT_BATCH)
    output = check_output(...)                          # every process, before any model loads
    config = trl_config(SFTConfig, settings.trainer, out=settings.out, source=SFT_BATCH, base={"report_to": "none"})
    start_output(output, config)
    trainer.train(resume_from_checkpoint=resume_checkpoint(output))

>>> trainer = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": None, "global_batch_size": None}
>>> [resolve_batch(trainer, n, SFT_BATCH).accumulation for n in (1, 8)]
[32, 4]
>>> for problem in launch_problems("SFTConfig", {"lerning_rate": 1e-3, "max_steps": "ten"}, processes=1, source=None):
...     print(problem)
unknown key trainer.lerning_rate (did you mean 'learning_rate'?)
trainer.max_steps='ten': expected an integer
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from reward.core.config import Range, range_problem
from reward.core.errors import UserError, close_match, is_main_process
from reward.core.outputs import Output
from training.shared.checkpoints import last_complete_checkpoint

logger = logging.getLogger(__name__)

C = TypeVar("C")


# trl's config fields, read without importing trl: trl_fields.json holds each class's init fields (library_fields)
# with the trl and transformers versions it was made from; with other versions installed the classes themselves are
# read. tests/test_trl_fields.py regenerates the table and fails when trl's fields changed.

SIMPLE = {bool: "true or false", int: "an integer", float: "a float", str: "a string"}
TABLE = Path(__file__).with_name("trl_fields.json")
CLASSES = ("SFTConfig", "GRPOConfig")
VERSIONED = ("trl", "transformers")  # trl's configs extend transformers' TrainingArguments


@cache
def fields_of(name: str) -> dict[str, Any]:
    """The fields of trl's config class ``name``: from the table when it was made from the installed versions (read
    from their metadata: nothing is imported), else from the class itself."""
    table = json.loads(TABLE.read_text(encoding="utf-8")) if TABLE.is_file() else {}
    if table.get("versions") == {lib: metadata.version(lib) for lib in VERSIONED} and name in table:
        return table[name]
    import trl

    return library_fields(getattr(trl, name))


def library_fields(cls: type) -> dict[str, str | list[str] | None]:
    """The init fields of a library's settings dataclass as data: a plain type's name, an enum's values, or ``None``
    for a richer type (left to the library): a table checked without importing the library (:func:`field_problems`).
    """
    import enum
    import types

    hints = typing.get_type_hints(cls)

    def kind(tp: Any) -> str | list[str] | None:
        if tp in SIMPLE:
            return tp.__name__
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return sorted(str(m.value) for m in tp)
        if typing.get_origin(tp) not in (typing.Union, types.UnionType):
            return None
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
        if len(args) == 1 or (len(enums) == 1 and set(args) == {enums[0], str}):
            return kind(enums[0] if enums else args[0])
        return None

    return {f.name: kind(hints.get(f.name)) for f in dataclasses.fields(cls) if f.init}


def field_problems(fields: Mapping[str, Any], values: Mapping[str, Any], where: str) -> list[str]:
    """``values`` checked against a table of :func:`library_fields`: unknown keys, plain types, enum values.

    >>> for p in field_problems({"steps": "int", "kind": ["cosine", "linear"]}, {"steps": 1.5, "kind": "cosin"}, "t"):
    ...     print(p)
    t.steps=1.5: expected an integer
    t.kind='cosin': expected one of cosine, linear (did you mean 'cosine'?)
    """
    found = []
    names = {"bool": bool, "int": int, "float": float, "str": str}
    for key, value in values.items():
        kind = fields.get(key, "?")
        if kind == "?":
            found.append(f"unknown key {where}.{key}{close_match(key, list(fields), fmt=' (did you mean {!r}?)')}")
        elif isinstance(kind, str) and value is not None:
            want = names[kind]  # a bool is no number here, nor a number a bool
            if isinstance(value, bool) != (want is bool) or not isinstance(
                value, int | float if want is float else want
            ):
                found.append(f"{where}.{key}={value!r}: expected {SIMPLE[want]}")
        elif isinstance(kind, list) and value is not None and value not in kind:
            hint = close_match(str(value), kind, fmt=" (did you mean {!r}?)")
            choices = ", ".join(kind) if len(kind) <= 8 or not hint else f"{len(kind)} values"
            found.append(f"{where}.{key}={value!r}: expected one of {choices}{hint}")
    return found


# sizes

MAX_BATCH = 65_536  # samples per device and step, accumulation steps, generations per prompt
MAX_STEPS = 10**9

TRAINER_RANGES: dict[str, Range] = {
    "per_device_train_batch_size": (1, MAX_BATCH),
    "per_device_eval_batch_size": (1, MAX_BATCH),
    "gradient_accumulation_steps": (1, MAX_BATCH),
    "global_batch_size": (1, MAX_BATCH * 64),  # ours: the effective batch (below)
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
    -1 or N >= 1, and ``num_train_epochs`` > 0 unless ``max_steps`` sets the length: a zero, negative or absurd size
    would train 0 steps and say done, fail deep in torch or run for days (trl checks few, and only once imported).

    >>> trainer_size_problems({"gradient_accumulation_steps": -3, "num_train_epochs": 0, "max_steps": -1})
    ['trainer.gradient_accumulation_steps=-3: must be between 1 and 65,536', 'trainer.num_train_epochs=0: must be \
above 0 and at most 10,000 (or set trainer.max_steps=N)']
    """
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


# the effective batch

GLOBAL_BATCH_KEY = "global_batch_size"  # ours: kept out of trl's configs
OURS = (GLOBAL_BATCH_KEY,)


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
    ``source`` ``None``: no source batch to derive the accumulation from (as given, else 1).

    >>> trainer = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": None, "global_batch_size": None}
    >>> batch_problems(trainer, 3, SFT_BATCH)  # doctest: +NORMALIZE_WHITESPACE
    ['trainer.global_batch_size=256 (SA-IQA §4.1) is not a multiple of trainer.per_device_train_batch_size=8 x 3
    processes = 24: give a multiple of 24 (240 or 264), or a per-device batch that divides 256 / 3 processes']
    """
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


# report_to: transformers' names (INTEGRATION_TO_CALLBACK, kept equal by tests/test_summaries.py)

# backend -> (modules any one of which makes it available, the pip command that installs it)
BACKENDS: dict[str, tuple[tuple[str, ...], str]] = {
    "tensorboard": (("tensorboard", "tensorboardX"), "pip install 'perceptual-rewards[tensorboard]' (or tensorboard)"),
    "wandb": (("wandb",), "pip install wandb"),
    "mlflow": (("mlflow",), "pip install mlflow"),
    "comet_ml": (("comet_ml",), "pip install comet-ml"),
    "clearml": (("clearml",), "pip install clearml"),
    "dvclive": (("dvclive",), "pip install dvclive"),
    "swanlab": (("swanlab",), "pip install swanlab"),
    "trackio": (("trackio",), "pip install trackio"),
    "neptune": (("neptune",), "pip install neptune"),
    "codecarbon": (("codecarbon",), "pip install codecarbon"),
    "dagshub": (("dagshub",), "pip install dagshub mlflow"),
    "azure_ml": (("azureml",), "pip install azureml-core"),
    "flyte": (("flytekit",), "pip install flytekit flytekitplugins-deck-standard"),
    "kubeflow": ((), "set KUBEFLOW_TRAINER_SERVER_URL (kubeflow logs through its trainer server)"),
}


def report_to_problems(value: Any, key: str = "trainer.report_to") -> list[str]:
    """A message per backend in ``value`` (a name, a list of names, ``none`` or ``all``) that is unknown or not
    installed (transformers imports a tracker only once the model has loaded), naming the ``pip`` command that adds a
    missing one; ``[]`` when every one will work.

    >>> report_to_problems("none")
    []
    >>> report_to_problems("tensorbord")  # doctest: +ELLIPSIS
    ["trainer.report_to=tensorbord: unknown backend. Did you mean 'tensorboard'? Known: ..."]
    """
    names = [value] if isinstance(value, str) or value is None else list(value)
    problems = []
    for name in names:
        if name in (None, "none", "all"):
            continue
        if name not in BACKENDS:
            problems.append(
                f"{key}={name}: unknown backend.{close_match(str(name), list(BACKENDS))} Known: "
                f"{', '.join(BACKENDS)}, none or all"
            )
            continue
        modules, install = BACKENDS[name]
        found = any(importlib.util.find_spec(m) for m in modules)
        if not (os.environ.get("KUBEFLOW_TRAINER_SERVER_URL") if name == "kubeflow" else found):
            problems.append(f"{key}={name}: {name} is not installed; {install}, or set {key}=none")
    return problems


def launch_problems(
    config_name: str, trainer: Mapping[str, Any], *, processes: int, source: SourceBatch | None
) -> list[str]:
    """What keeps ``trainer`` (a command's ``trainer.*``) from making trl's ``config_name`` (``SFTConfig``,
    ``GRPOConfig``) on ``processes`` processes, found without importing trl: unknown or mistyped fields, sizes out of
    range, a batch the processes do not divide (``source``: the batch the command's source trained with; ``None``:
    the accumulation as given, trl's 1 by default), an unknown or uninstalled ``report_to``. Empty when none."""
    return [
        *field_problems(fields_of(config_name), trl_fields(trainer), "trainer"),
        *trainer_size_problems(trainer),
        *batch_problems(trainer, processes, source),
        *report_to_problems(trainer.get("report_to", "none")),
    ]


def native_bf16() -> bool:
    """Whether this process's GPU computes in bf16 natively (compute capability 8 or more, read without making a
    tensor on GPU 0); ``False`` without one."""
    import torch

    if not torch.cuda.is_available():
        return False
    device = int(os.environ.get("LOCAL_RANK") or 0) % torch.cuda.device_count()
    return torch.cuda.get_device_capability(device)[0] >= 8


def trl_config(
    config_class: type[C],
    trainer: Mapping[str, Any],
    *,
    out: str | Path,
    source: SourceBatch | None,
    base: Mapping[str, Any] | None = None,
    fixed: Mapping[str, Any] | None = None,
) -> C:
    """trl's ``config_class`` (``SFTConfig``, ``GRPOConfig``) for this launch, writing to ``out``: ``base`` (the
    command's defaults) under ``trainer`` (``trainer.*`` as given, our own keys left out) under ``fixed`` (what the
    command needs whatever was given), the gradient accumulation :func:`resolve_batch` derives for the launch's
    processes, ``bf16: null`` as :func:`native_bf16` (under DeepSpeed: the launcher's choice), ``use_cpu`` without a
    GPU. Building it sets up the launch's processes, each on its own device; a ZeRO-3 launch's final save writes the
    gathered weights. trl's refusal of a value is a :class:`UserError` naming ``trainer.*``; a launch whose
    processes are not those ``WORLD_SIZE`` said (the accumulation was derived for them) is refused."""
    import torch

    from training.shared.deepspeed import (
        check_build_locks,
        launcher_bf16,
        save_gathered_weights_under_zero3,
        uses_deepspeed,
    )

    batch = resolve_batch(trainer, launch_processes(), source)
    args = {**(base or {}), **trl_fields(trainer), "gradient_accumulation_steps": batch.accumulation, **(fixed or {})}
    deepspeed = uses_deepspeed(None)  # the launcher's environment: trl's config is not built yet
    if args.get("bf16") is None:
        args["bf16"] = launcher_bf16(native_bf16()) if deepspeed else native_bf16()
    if not torch.cuda.is_available():
        args.setdefault("use_cpu", True)
    if deepspeed:
        save_gathered_weights_under_zero3()  # the trained model is written whole, not as DeepSpeed's shards
        check_build_locks()  # before accelerate starts DeepSpeed, which may build its ops behind a stale lock
    try:
        config = config_class(output_dir=str(out), **args)
    except (TypeError, ValueError) as err:
        raise UserError(f"invalid trainer.* settings (trl.{config_class.__name__}): {err}") from None
    check_world(batch, config.world_size)  # type: ignore[attr-defined]
    logger.info("%s", describe_batch(batch, trainer, source))
    return config


def start_output(output: Output, config: Any) -> None:
    """The output folder checked by every process (``output``: :func:`reward.core.outputs.check_output`, before any
    model loaded) created by the main process (``run.json``; an old run moved aside), the others waiting before and
    after, so that none checks a folder the main process has already made and none writes into one not yet made.
    ``config``: trl's config (:func:`trl_config`), whose processes these are."""
    state = config.distributed_state
    state.wait_for_everyone()
    if state.is_main_process:
        output.create()
    state.wait_for_everyone()


def resume_checkpoint(output: Output) -> str | None:
    """The checkpoint a resumed run (``output.resumed``) continues from: its last complete ``checkpoint-N`` (newer,
    incomplete ones moved aside by the main process), ``None`` for a new run or one with no checkpoint yet."""
    if not output.resumed:
        return None
    found = last_complete_checkpoint(output.path, main_process=is_main_process())
    logger.info("resuming the run in %s from %s", output.path, found or "its start (no checkpoint yet)")
    return found


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
