"""DeepSpeed under SFT and GRPO: whether a launch uses it, ZeRO-3's gathered weights and whole models beside a
partitioned one, its communication on CPU launches, and the C++ extension build locks it may wait on forever."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reward.core.errors import UserError

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)


def uses_deepspeed(args: Any) -> bool:
    """Whether training runs under DeepSpeed (``accelerate launch`` with a DeepSpeed config, or ``deepspeed=``):
    the trainer arguments' DeepSpeed plugin once they exist, else the launcher's environment."""
    if getattr(args, "deepspeed", None) or getattr(args, "deepspeed_plugin", None) is not None:
        return True
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() in ("1", "true")


def launcher_bf16(default: bool) -> bool:
    """``trainer.bf16: null``: under DeepSpeed, what ``accelerate launch --mixed_precision`` chose (DeepSpeed's
    config follows the launcher, and transformers refuses a trainer that differs: ``ds bf16.enabled=True vs hf
    bf16=False`` on a CPU or a GPU without bf16, launched with the shipped ``zero3.yaml``); else ``default``.

    >>> import os
    >>> os.environ |= {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_MIXED_PRECISION": "bf16"}
    >>> launcher_bf16(False), [os.environ.pop(k) for k in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_MIXED_PRECISION")]
    (True, ['true', 'bf16'])
    >>> launcher_bf16(False)
    False
    """
    chosen = os.environ.get("ACCELERATE_MIXED_PRECISION")
    return chosen == "bf16" if uses_deepspeed(None) and chosen in ("bf16", "fp16", "no") else default


@contextmanager
def zero3_init_off(args: Any = None) -> Iterator[None]:
    """Within the block, ``from_pretrained`` builds whole models, not ZeRO-3 partitions (the final save; rewards and
    generators built beside a ZeRO-3 policy). ``args``: the trainer's arguments; the DeepSpeed config active before the
    block is active again after it (the trainer's own, else the launch's plugin's: transformers' public
    ``set_hf_deepspeed_config``, accelerate's ``set_deepspeed_weakref``)."""
    from transformers.integrations.deepspeed import (
        is_deepspeed_zero3_enabled,
        set_hf_deepspeed_config,
        unset_hf_deepspeed_config,
    )

    was_on = is_deepspeed_zero3_enabled()
    unset_hf_deepspeed_config()
    try:
        yield
    finally:
        config = getattr(args, "hf_deepspeed_config", None)
        plugin = getattr(args, "deepspeed_plugin", None)
        if was_on and config is not None:
            set_hf_deepspeed_config(config)
        elif was_on and plugin is not None:
            plugin.set_deepspeed_weakref()


def save_gathered_weights_under_zero3() -> bool:
    """Under a ZeRO-3 launch, the final save writes the gathered 16-bit weights (accelerate's
    ``zero3_save_16bit_model``, off unless the launch turned it on): without them the trainer writes DeepSpeed's
    sharded checkpoint where the model should be. Call before the trainer's arguments are built; returns whether it
    was turned on here."""
    launch = os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() in ("1", "true")
    key = "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"
    if not launch or os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") != "3" or os.environ.get(key) == "true":
        return False
    os.environ[key] = "true"
    logger.info("ZeRO-3: the model is saved from its gathered 16-bit weights (zero3_save_16bit_model turned on)")
    return True


def start_deepspeed_comm(args: Any) -> bool:
    """Under DeepSpeed, DeepSpeed's communication started on the launch's process group before a trainer is built;
    returns whether it was started here.

    accelerate starts it only for GPU launches: with ``use_cpu`` the processes get ``torch.distributed`` alone, and a
    model built under ``deepspeed.zero.Init`` before the trainer's engine exists (trl's GRPO reference model) reads a
    world of one process from DeepSpeed and fails its batch check (``train_batch_size ... 16 != 8 * 1 * 1``).
    """
    import torch.distributed as torch_dist

    if not uses_deepspeed(args) or not torch_dist.is_available() or not torch_dist.is_initialized():
        return False
    import deepspeed
    from deepspeed import comm

    if comm.is_initialized():
        return False
    check_build_locks()
    deepspeed.init_distributed(dist_backend=torch_dist.get_backend(), auto_mpi_discovery=False)
    return True


STALE_LOCK_S = 20 * 60  # a torch extension build lock older than this was left by an interrupted build


def check_build_locks(max_age_s: float = STALE_LOCK_S, now: float | None = None) -> None:
    """Refuse to start when an extension build lock is older than any build: torch's ``FileBaton`` would wait on it
    forever (an interrupted DeepSpeed op build leaves its ``lock`` behind). The locks are where torch builds (and
    DeepSpeed JIT-compiles) C++ extensions: ``TORCH_EXTENSIONS_DIR`` or the per-user cache."""
    import time

    from torch.utils.cpp_extension import get_default_build_root

    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())
    now = time.time() if now is None else now
    for lock in sorted([*root.glob("*/lock"), *root.glob("*/*/lock")]):
        try:
            age = now - lock.stat().st_mtime
        except OSError:
            continue  # released meanwhile
        if age > max_age_s:
            raise UserError(
                f"{lock} is {age / 60:.0f} minutes old: a C++ extension build (DeepSpeed's ops) was interrupted and "
                f"every DeepSpeed run would wait on it forever; remove it (rm {lock}) or set TORCH_EXTENSIONS_DIR to "
                "another folder"
            )


def gathered_state_dict(trainer: Any) -> dict[str, torch.Tensor] | None:
    """Under DeepSpeed ZeRO-3, the full (16-bit) weights gathered from every process; ``None`` otherwise.

    A collective call: every process must make it. ``model.save_pretrained`` on a ZeRO-3 model would write
    empty placeholders instead of the weights.
    """
    accelerator = getattr(trainer, "accelerator", None)
    ds_config = getattr(accelerator, "deepspeed_config", None) if accelerator is not None else None
    if not ds_config or int(ds_config.get("zero_optimization", {}).get("stage", 0)) != 3:
        return None
    state = accelerator.get_state_dict(trainer.model_wrapped)
    return {k: v.float() for k, v in state.items()} if state else state
