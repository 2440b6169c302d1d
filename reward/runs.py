"""What every training entry point (``training/sft.py``, ``rl/grpo.py``) does with its config and output folder.

Parse a config of named sections into typed settings with every problem reported at once, and decide whether
a run continues from its last checkpoint: only when the saved run config agrees on the keys that make it the
same run (``run_config.json`` in the output folder).

Example:
    >>> from dataclasses import dataclass, field
    >>> @dataclass
    ... class Lr:
    ...     value: float = 1e-3
    >>> @dataclass
    ... class Top:
    ...     out: str
    ...     lr: Lr = field(default_factory=Lr)
    >>> top, parts = parse_sections({"out": "o", "lr": {"value": 0.1}}, Top, {"lr": Lr}, where="demo")
    >>> Top(**{**vars(top), **parts})
    Top(out='o', lr=Lr(value=0.1))
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from reward.core.config import from_mapping, to_plain
from reward.data.files import atomic_write_json

logger = logging.getLogger(__name__)

RUN_CONFIG = "run_config.json"
T = TypeVar("T")


def parse_sections(
    cfg: Any, top_cls: type[T], sections: Mapping[str, type], *, where: str
) -> tuple[T, dict[str, Any]]:
    """``(top-level settings, {section: settings})``; unknown or missing keys of every section fail together."""
    c = to_plain(cfg)
    problems: list[str] = []
    parsed: dict[str, Any] = {}
    for name, cls in sections.items():
        try:
            parsed[name] = from_mapping(cls, c.pop(name, {}) or {}, where=name, ignore=())
        except ValueError as err:
            problems.append(str(err))
    try:
        top = from_mapping(top_cls, c, where=where, ignore=())
    except ValueError as err:
        problems.append(str(err))
    if problems:
        raise ValueError("\n".join(problems))
    return top, parsed


def resume_checkpoint(out: Path, resume: str, current: Mapping[str, Any]) -> str | None:
    """The checkpoint to resume from (``None``: a fresh start); a different earlier run in ``out`` is an error.

    ``current`` holds the keys that make two runs the same run, as :func:`save_run_config` wrote them.
    """
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(str(out)) if out.is_dir() else None
    if not last or resume != "auto":
        return None
    saved_path = out / RUN_CONFIG
    if saved_path.is_file():
        saved = json.loads(saved_path.read_text())
        diff = [f"{k}: {saved.get(k)!r} -> {v!r}" for k, v in current.items() if saved.get(k) != v]
        if diff:
            raise ValueError(
                f"cannot resume in {out}: its checkpoints come from a different config:\n  - "
                + "\n  - ".join(diff)
                + "\nUse a new output_dir, or resume=never to start over there."
            )
    logger.info("resuming from %s", last)
    return last


def save_run_config(out: Path, current: Mapping[str, Any]) -> Path:
    """Write the run's identity keys (atomically) for the next resume's check."""
    return atomic_write_json(out / RUN_CONFIG, dict(current))
