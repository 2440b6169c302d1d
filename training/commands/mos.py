"""What ``python training/mos.py`` does: raw annotator ratings -> a MOS manifest (:func:`training.mos.write_mos`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from reward.core.config import parse, store_schema
from reward.core.errors import ConfigError
from training.mos import write_mos

logger = logging.getLogger(__name__)


@dataclass
class MosSettings:
    raw: str = MISSING  # raw ratings (JSONL: {"image", "dimension", "annotator", "rating"} or "ratings": [...])
    out: str | None = None  # folder of train.jsonl, test.jsonl, annotators.json (null: the raw file's folder)
    scale: list[float] = field(default_factory=lambda: [1.0, 5.0])  # the rating scale [low, high]
    z_threshold: float = 2.0  # a rating with |z| above this within its image is replaced by the mean
    ddof: int = 0  # the std's delta degrees of freedom (0: population std)
    srcc_threshold: float = 0.6  # annotators whose SRCC with the MOS is below this are flagged for review
    ratio: list[int] = field(default_factory=lambda: [4, 1])  # train:test scenes
    seed: int = 0  # the scene split's seed
    skip_bad: bool = False  # true: skip (and count) bad rows instead of failing


store_schema("mos_schema", MosSettings)


def run(cfg: Any) -> Any:
    s = parse(MosSettings, cfg, where="")
    if len(s.scale) != 2 or not s.scale[0] < s.scale[1]:
        raise ConfigError(f"scale={s.scale}: give [low, high] with low < high, e.g. scale=[1,5]")
    if len(s.ratio) != 2 or min(s.ratio) < 1:
        raise ConfigError(f"ratio={s.ratio}: give [train, test] scene shares, e.g. ratio=[4,1]")
    paths = write_mos(
        s.raw,
        s.out,
        scale=(float(s.scale[0]), float(s.scale[1])),
        z_threshold=s.z_threshold,
        ddof=s.ddof,
        srcc_threshold=s.srcc_threshold,
        ratio=(int(s.ratio[0]), int(s.ratio[1])),
        seed=s.seed,
        skip_bad=s.skip_bad,
    )
    logger.info("wrote %s, %s and %s", paths.train, paths.test, paths.report_path)
    return paths
