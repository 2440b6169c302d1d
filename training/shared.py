"""What SFT (``training/sft.py``) and GRPO (``rl/grpo.py``) share: model loading for training (one
precision rule, :func:`training_dtype` + :func:`load_for_training`; LoRA, freezing), checkpoint restore (from the last
complete checkpoint, :func:`last_complete_checkpoint`) and DeepSpeed handling."""

from __future__ import annotations

import json
import logging
import os
import re
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from reward.core.errors import UserError
from reward.vlm.loading import ModelLoading

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)
T = TypeVar("T")

VISION_TOWERS = ("visual", "vision_tower", "vision_model")  # attribute names across VLM families
ALIGNERS = ("merger", "multi_modal_projector", "mm_projector", "aligner")


@dataclass
class LoraSettings:
    enabled: bool = field(default=False, metadata={"help": "LoRA on the language model instead of full fine-tuning"})
    r: int = field(default=16, metadata={"help": "rank"})
    alpha: int = field(default=32, metadata={"help": "scaling numerator (lora_alpha)"})
    dropout: float = 0.05
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        metadata={"help": "projections of the language model's layers (the vision tower is never adapted)"},
    )
    modules_to_save: list[str] | None = field(
        default=None, metadata={"help": "e.g. [lm_head, embed_tokens]: trained fully beside the adapter"}
    )


def find_submodule(model: torch.nn.Module, names: Sequence[str]) -> tuple[str, torch.nn.Module] | None:
    """The first module whose attribute name is one of ``names`` (searching breadth-first by path depth)."""
    candidates = [(n, m) for n, m in model.named_modules() if n.split(".")[-1] in names]
    return min(candidates, key=lambda nm: nm[0].count("."), default=None)


def freeze_vision(model: torch.nn.Module, *, vision: bool = True, aligner: bool = True) -> dict[str, int]:
    """Freeze the vision tower (without its aligner) and/or the aligner; returns trainable counts per part."""
    tower = find_submodule(model, VISION_TOWERS)
    if tower is None:
        raise ValueError(
            f"{type(model).__name__}: no vision tower found (looked for {', '.join(VISION_TOWERS)}); "
            "set model.freeze_vision=false and model.freeze_aligner=false for this architecture"
        )
    tower_name, tower_module = tower
    align = find_submodule(tower_module, ALIGNERS) or find_submodule(model, ALIGNERS)
    align_params = {id(p) for p in align[1].parameters()} if align else set()
    for p in tower_module.parameters():
        if id(p) not in align_params:
            p.requires_grad_(not vision)
    if align is not None:
        for p in align[1].parameters():
            p.requires_grad_(not aligner)
    elif aligner:
        logger.warning("no aligner/projector module found in %s; nothing to freeze there", type(model).__name__)
    counts = {
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "total": sum(p.numel() for p in model.parameters()),
    }
    logger.info(
        "vision tower %s frozen=%s, aligner frozen=%s: %d of %d parameters trainable",
        tower_name,
        vision,
        aligner,
        counts["trainable"],
        counts["total"],
    )
    return counts


def lora_config(settings: LoraSettings) -> Any:
    """A peft ``LoraConfig`` restricted to the language model (the vision tower is frozen anyway)."""
    from peft import LoraConfig

    targets = "|".join(settings.target_modules)
    return LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=rf"^(?!.*(?:{'|'.join(VISION_TOWERS)})).*\.(?:{targets})$",
        modules_to_save=settings.modules_to_save,
        task_type="CAUSAL_LM",
    )


def uses_deepspeed(args: Any) -> bool:
    """Whether training runs under DeepSpeed (``accelerate launch`` with a DeepSpeed config, or ``deepspeed=``):
    the trainer arguments' DeepSpeed plugin once they exist, else the launcher's environment."""
    if getattr(args, "deepspeed", None) or getattr(args, "deepspeed_plugin", None) is not None:
        return True
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() in ("1", "true")


def zero_stage(args: Any) -> int:
    """The DeepSpeed ZeRO stage of this launch (0 without DeepSpeed)."""
    plugin = getattr(args, "deepspeed_plugin", None)
    if plugin is not None:
        return int(getattr(plugin, "zero_stage", 0) or 0)
    return int(os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "0") or 0) if uses_deepspeed(args) else 0


def load_dtype(dtype: str, *, lora: bool, bf16: bool, deepspeed: bool) -> torch.dtype:
    """The dtype to load the weights in for training.

    ``auto``: full fine-tuning without DeepSpeed keeps fp32 master weights and lets the trainer's bf16 autocast
    do mixed precision (as trl does given a model name): pure-bf16 AdamW at lr 2e-5 rounds most updates away.
    LoRA (frozen base) and DeepSpeed (its own fp32 master copy) load in bf16 where training runs in bf16.
    """
    import torch

    from reward.vlm import resolve_dtype

    if dtype != "auto":
        chosen = resolve_dtype(dtype)
        if chosen != torch.float32 and not lora and not deepspeed:
            logger.warning(
                "model.dtype=%s with full fine-tuning and no DeepSpeed: the optimizer updates %s weights "
                "directly and small updates round away; model.dtype=auto keeps fp32 master weights",
                dtype,
                chosen,
            )
        return chosen
    if bf16 and (lora or deepspeed):
        return torch.bfloat16
    return torch.float32


def training_dtype(dtype: str, *, lora: bool, args: Any) -> torch.dtype:
    """:func:`load_dtype` with the trainer's own ``bf16`` and DeepSpeed settings (``args``: SFTConfig, GRPOConfig).

    >>> from types import SimpleNamespace
    >>> training_dtype("auto", lora=False, args=SimpleNamespace(bf16=True, deepspeed=None, deepspeed_plugin=None))
    torch.float32
    """
    return load_dtype(dtype, lora=lora, bf16=bool(getattr(args, "bf16", False)), deepspeed=uses_deepspeed(args))


def load_for_training(
    path: str, dtype: torch.dtype, loading: ModelLoading | None = None, *, vision: bool = True
) -> Any:
    """The model for training (SFT's scorer, GRPO's policy): ``dtype`` weights (choose it with
    :func:`training_dtype`), attention implementation and device_map from ``loading``; a VLM, or with
    ``vision=False`` a causal language model. ``path`` may be a LoRA adapter folder (``trl sft --use_peft``'s output,
    e.g. GRPO's stage-1 prompt expander): its base is loaded and the adapter merged in fp32, rounded once to
    ``dtype``, so training starts from the fine-tuned model."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from reward.vlm.loading import adapter_base, attach_adapter

    cls = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    base = adapter_base(path)
    model = cls.from_pretrained(base or path, **(loading or ModelLoading()).model_kwargs(dtype))
    if base is not None:
        model = attach_adapter(model, path)
        logger.info("%s: the LoRA adapter merged into its base %s (fp32, rounded once to %s)", path, base, dtype)
    return model


def load_checkpoint_weights(model: Any, checkpoint: str | Path) -> bool:
    """Load a full fine-tuning checkpoint's weights into ``model`` (before ``trainer.train(resume_from_checkpoint=)``).

    The trainer's own resume loads ``model.safetensors`` by its raw key names, but transformers 5 writes Qwen-VL
    checkpoints in the hub layout (``visual.*``, ``model.layers.*``) while the model's keys are
    ``model.visual.*``, ``model.language_model.*``: nothing matches, it only warns, and training silently goes on
    from the starting weights. ``from_pretrained`` maps the keys. Adapter (LoRA) and DeepSpeed checkpoints are
    restored by peft and DeepSpeed themselves: returns ``False`` and loads nothing for those.
    """
    folder = Path(checkpoint)
    if not (folder / "config.json").is_file() or (folder / "adapter_config.json").is_file():
        return False
    saved = type(model).from_pretrained(folder, dtype=next(model.parameters()).dtype)
    model.load_state_dict(saved.state_dict())
    logger.info("weights restored from %s", folder)
    return True


CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
WEIGHT_FILES = ("model.safetensors", "adapter_model.safetensors", "pytorch_model.bin", "adapter_model.bin")


def _safetensors_problem(file: Path) -> str | None:
    """Why ``file`` is not a whole safetensors file (its header names where every tensor ends), or ``None``."""
    try:
        with file.open("rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(size))
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, struct.error) as err:
        return f"{file.name} is unreadable ({type(err).__name__})"
    actual = file.stat().st_size
    expected = 8 + size + end
    return None if actual == expected else f"{file.name} is truncated ({actual} of {expected} bytes)"


def checkpoint_problem(folder: str | Path) -> str | None:
    """Why ``folder`` (a trainer's ``checkpoint-N``) cannot be resumed from, or ``None`` when it is complete. The
    trainer writes ``trainer_state.json`` last, after the weights, optimizer and RNG states: a save cut short by a
    kill lacks it; weights are checked too (a safetensors file shorter than its header says)."""
    folder = Path(folder)
    state = folder / "trainer_state.json"
    try:
        json.loads(state.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no trainer_state.json (its save was cut short)"
    except (OSError, ValueError) as err:
        return f"trainer_state.json is unreadable ({type(err).__name__})"
    index = folder / "model.safetensors.index.json"
    shards = []
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError):
            return f"{index.name} is unreadable"
    files = [folder / f for f in (*WEIGHT_FILES, *shards) if (folder / f).exists() or f in shards]
    deepspeed = any(p.is_dir() and p.name.startswith("global_step") for p in folder.iterdir())
    if not files and not deepspeed:
        return "no model weights"
    for file in files:
        if not file.is_file():
            return f"{file.name} is missing"
        if file.suffix == ".safetensors" and (problem := _safetensors_problem(file)):
            return problem
    return None


def last_complete_checkpoint(folder: str | Path, *, main_process: bool = True) -> str | None:
    """The newest complete ``checkpoint-N`` in ``folder`` to resume from (``None``: start anew). Newer ones that are
    incomplete (see :func:`checkpoint_problem`) are named in a warning and, by the main process, moved aside to
    ``incomplete-checkpoint-N`` (nothing is deleted), so that the run saves its step N again in a clean folder."""
    folder = Path(folder)
    found = sorted(
        ((int(m.group(1)), p) for p in folder.iterdir() if p.is_dir() and (m := CHECKPOINT.match(p.name))),
        reverse=True,
    )
    for _, path in found:
        problem = checkpoint_problem(path)
        if problem is None:
            return str(path)
        aside = path.with_name(f"incomplete-{path.name}")  # not checkpoint-*: the trainer's rotation would delete it
        n = 1
        while aside.exists():
            aside, n = path.with_name(f"incomplete-{path.name}-{n}"), n + 1
        if main_process:
            logger.warning("%s is incomplete: %s; moved aside to %s, passing over it", path, problem, aside.name)
            try:
                path.rename(aside)
            except OSError as err:  # another process of the launch moved it first, or a read-only folder
                logger.warning("could not move %s aside (%s)", path, err)
    if found:
        logger.warning("no complete checkpoint in %s: the run starts again from its first step", folder)
    return None


@contextmanager
def restored_weights_quiet() -> Iterator[None]:
    """Silence transformers' "There were missing / unexpected keys in the checkpoint model loaded" warnings while the
    trainer resumes a checkpoint whose weights :func:`load_checkpoint_weights` restored already (the trainer's own
    load matches no key of a Qwen-VL checkpoint written in the hub layout; the weights are right)."""
    trainer_logger = logging.getLogger("transformers.trainer")

    def drop(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(
            ("There were missing keys in the checkpoint", "There were unexpected keys in the checkpoint")
        )

    trainer_logger.addFilter(drop)
    try:
        yield
    finally:
        trainer_logger.removeFilter(drop)


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


def extensions_dir() -> Path:
    """Where torch builds (and DeepSpeed JIT-compiles) C++ extensions: ``TORCH_EXTENSIONS_DIR`` or the per-user
    cache."""
    from torch.utils.cpp_extension import get_default_build_root

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())


def check_build_locks(max_age_s: float = STALE_LOCK_S, now: float | None = None) -> None:
    """Refuse to start when an extension build lock is older than any build: torch's ``FileBaton`` would wait on it
    forever (an interrupted DeepSpeed op build leaves its ``lock`` behind)."""
    import time

    root = extensions_dir()
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
