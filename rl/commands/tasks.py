"""``python rl/tasks.py``: procedural inpainting tasks for CPU runs
(:func:`rl.inpaint_tasks.write_procedural_tasks`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from reward.core.config import parse
from reward.core.summary import log_summary
from rl.inpaint_tasks import write_procedural_tasks

logger = logging.getLogger(__name__)


@dataclass
class TasksSettings:
    out: str = field(default=MISSING, metadata={"help": "folder to write into (tasks.jsonl, images/, masks/)"})
    n: int = field(default=16, metadata={"help": "tasks"})
    size: int = field(default=64, metadata={"help": "image side in pixels"})
    seed: int = 0
    mask_fraction: float = field(default=0.6, metadata={"help": "the centred mask covers this fraction of each side"})


def run(cfg: Any) -> Path:
    s = parse(TasksSettings, cfg, where="")
    path = write_procedural_tasks(s.out, s.n, size=s.size, seed=s.seed, mask_fraction=s.mask_fraction)
    log_summary("tasks", {"tasks": s.n, "size": s.size}, {"tasks": path})
    return path
