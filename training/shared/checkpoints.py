"""Checkpoints of SFT, GRPO and Flow-GRPO runs: which ``checkpoint-N`` a run resumes from (the last complete one,
:func:`last_complete_checkpoint`) and the restore of a full fine-tuning checkpoint's weights."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open

logger = logging.getLogger(__name__)


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

WEIGHT_FILES = (  # a model's, a peft adapter's, diffusers' LoRA weights (Flow-GRPO's checkpoints)
    "model.safetensors",
    "adapter_model.safetensors",
    "pytorch_model.bin",
    "adapter_model.bin",
    "pytorch_lora_weights.safetensors",
)


def checkpoint_problem(folder: str | Path) -> str | None:
    """Why ``folder`` (a trainer's ``checkpoint-N``) cannot be resumed from, or ``None`` when it is complete. The
    trainer writes ``trainer_state.json`` last, after the weights, optimizer and RNG states: a save cut short by a
    kill lacks it; weights are checked too (safetensors refuses a file shorter than its header says)."""
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
        if file.suffix == ".safetensors":
            try:
                with safe_open(file, "np"):  # its header read and checked against the file's size
                    pass
            except (OSError, SafetensorError) as err:
                return f"{file.name} is truncated or corrupt ({err})"
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
