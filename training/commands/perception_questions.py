"""``python training/perception_questions.py``: A1-format questions with known answers
(:mod:`training.procedural.perception_questions`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from reward.core.config import parse
from reward.core.errors import ConfigError
from reward.core.summary import log_summary
from training.procedural.perception_questions import check_families, write_questions

logger = logging.getLogger(__name__)


@dataclass
class QuestionsSettings:
    out: str = field(default=MISSING, metadata={"help": "folder for the question file and its images"})
    n: int = field(default=200, metadata={"help": "questions"})
    seed: int = 0
    size: int = field(default=64, metadata={"help": "image side in pixels"})
    photos: str = field(
        default="train", metadata={"help": "train | heldout | all: which photos the photo families draw from"}
    )
    fmt: str = field(default="json", metadata={"help": "json (LLVisionQA list) | jsonl"})
    families: list[str] | None = field(
        default=None, metadata={"help": "question families (default: all), e.g. [pair-brighter,photo-distortion]"}
    )


def run(cfg: Any) -> Path:
    s = parse(QuestionsSettings, cfg, where="")
    check_families(s.families)  # fail before writing anything
    if s.fmt not in ("json", "jsonl"):
        raise ConfigError(f"fmt={s.fmt!r}: use json or jsonl")
    path = write_questions(s.out, s.n, seed=s.seed, size=s.size, families=s.families, photos=s.photos, fmt=s.fmt)
    log_summary("perception_questions", {"questions": s.n}, {"questions": path})
    return path
