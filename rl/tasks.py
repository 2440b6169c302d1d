"""Procedural inpainting tasks (image, centred mask, base prompt) for GRPO and Best-of-N runs on CPU.

    python rl/tasks.py out=DIR n=16 [size=64 seed=0 mask_fraction=0.6]      # writes DIR/tasks.jsonl

The tasks are drawn by :func:`training.procedural.synthetic.write_inpainting_tasks`; the settings are
:class:`TasksSettings` below.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import MISSING

from reward.core.config import COUNT, SIDE
from reward.core.summary import log_summary
from training.procedural.synthetic import write_inpainting_tasks

logger = logging.getLogger(__name__)


@dataclass
class TasksSettings:
    out: str = field(default=MISSING, metadata={"help": "folder to write into (tasks.jsonl, images/, masks/)"})
    n: int = field(default=16, metadata={"help": "tasks", "range": COUNT})
    size: int = field(default=64, metadata={"help": "image side in pixels", "range": SIDE})
    seed: int = 0
    mask_fraction: float = field(
        default=0.6, metadata={"help": "the centred mask covers this fraction of each side", "range": (0, 1, True)}
    )


def run(settings: TasksSettings) -> Path:
    path = write_inpainting_tasks(
        settings.out, settings.n, size=settings.size, seed=settings.seed, mask_fraction=settings.mask_fraction
    )
    log_summary("tasks", {"tasks": settings.n, "size": settings.size}, {"tasks": path})
    return path


if __name__ == "__main__":
    from reward.core.cli import main

    main("tasks", run, schema=TasksSettings, doc=__doc__)
