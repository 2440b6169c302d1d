"""What every trl training command (SFT, GRPO, the GRPO scorer) does the same way around its trainer, in the order a
run meets it:

1. :func:`launch_problems`: ``trainer.*`` checked before trl is imported (trl's fields and their types from a table,
   the sizes, the batch on this launch's processes, ``report_to``), said with the settings' other problems;
2. :func:`trl_config`: trl's config class built from ``trainer.*`` over the command's defaults (the batch's
   accumulation for this launch, bf16 where the GPU does it natively or as the launcher chose, ``use_cpu`` without a
   GPU); trl's refusal becomes one message naming ``trainer.*``;
3. :func:`start_output`: the output folder, checked on every process before any model loads
   (:func:`reward.core.outputs.check_output`), created by the main process while the others wait;
4. :func:`resume_checkpoint`: the checkpoint a resumed run continues from (the last complete one).

Example (a command's own steps in between)::

    problems = launch_problems("SFTConfig", settings.trainer, processes=launch_processes(), source=SFT_BATCH)
    output = check_output(...)                          # every process, before any model loads
    config = trl_config(SFTConfig, settings.trainer, out=settings.out, source=SFT_BATCH, base={"report_to": "none"})
    start_output(output, config)
    trainer.train(resume_from_checkpoint=resume_checkpoint(output))
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from reward.core.errors import UserError, is_main_process
from reward.core.outputs import Output
from training.shared.batch import (
    SourceBatch,
    batch_problems,
    check_world,
    describe_batch,
    launch_processes,
    resolve_batch,
    trl_fields,
)
from training.shared.checkpoints import last_complete_checkpoint
from training.shared.reporting import report_to_problems
from training.shared.sizes import trainer_size_problems
from training.shared.trl_fields import trainer_problems

logger = logging.getLogger(__name__)

C = TypeVar("C")


def launch_problems(
    config_name: str, trainer: Mapping[str, Any], *, processes: int, source: SourceBatch | None
) -> list[str]:
    """What keeps ``trainer`` (a command's ``trainer.*``) from making trl's ``config_name`` (``SFTConfig``,
    ``GRPOConfig``) on ``processes`` processes, found without importing trl: unknown or mistyped fields, sizes out of
    range, a batch the processes do not divide (``source``: the batch the command's source trained with; ``None``:
    the accumulation as given, trl's 1 by default), an unknown or uninstalled ``report_to``. Empty when none."""
    return [
        *trainer_problems(config_name, trl_fields(trainer)),
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

    from training.shared.deepspeed import check_build_locks, launcher_bf16, save_gathered_weights_under_zero3

    batch = resolve_batch(trainer, launch_processes(), source)
    args = {**(base or {}), **trl_fields(trainer), "gradient_accumulation_steps": batch.accumulation, **(fixed or {})}
    if args.get("bf16") is None:
        args["bf16"] = launcher_bf16(native_bf16())
    if not torch.cuda.is_available():
        args.setdefault("use_cpu", True)
    save_gathered_weights_under_zero3()  # the trained model is written whole, not as DeepSpeed's shards
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() in ("1", "true"):
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
