"""A1-format multiple-choice questions with known answers over procedural scenes and distorted photos.

    perceptual-rewards perception-questions out=DIR n=200 seed=1 photos=heldout [size=64 fmt=json families=[...]]

The questions are :mod:`training.procedural.perception_questions`; the settings are :class:`QuestionsSettings` below.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import MISSING

from reward.core.config import COUNT, SIDE
from reward.core.summary import log_summary
from training.procedural.perception_questions import write_questions

logger = logging.getLogger(__name__)


@dataclass
class QuestionsSettings:
    out: str = field(default=MISSING, metadata={"help": "folder for the question file and its images"})
    n: int = field(default=200, metadata={"help": "questions", "range": COUNT})
    seed: int = 0
    size: int = field(default=64, metadata={"help": "image side in pixels", "range": SIDE})
    photos: str = field(
        default="train", metadata={"help": "train | heldout | all: which photos the photo families draw from"}
    )
    fmt: str = field(default="json", metadata={"help": "json (LLVisionQA list) | jsonl"})
    families: list[str] | None = field(
        default=None, metadata={"help": "question families (default: all), e.g. [pair-brighter,photo-distortion]"}
    )


def run(settings: QuestionsSettings) -> Path:
    path = write_questions(**vars(settings))  # the settings are its arguments
    log_summary("perception_questions", {"questions": settings.n}, {"questions": path})
    return path


if __name__ == "__main__":
    from reward.core.cli import main

    main("perception_questions", run, schema=QuestionsSettings, doc=__doc__)
