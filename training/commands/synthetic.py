"""``python -m training.synthetic``: write the procedural interior benchmark (:mod:`training.procedural.synthetic`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from reward.core.config import parse
from reward.core.summary import log_summary
from training.procedural.synthetic import BenchmarkPaths, write_benchmark

logger = logging.getLogger(__name__)


@dataclass
class SyntheticSettings:
    out: str = field(default=MISSING, metadata={"help": "folder to write the benchmark into"})
    n: int = field(default=200, metadata={"help": "scenes"})
    size: int = field(default=64, metadata={"help": "image side in pixels"})
    seed: int = 0
    variants: int = field(default=1, metadata={"help": "renders per scene (same levels, other furniture)"})
    annotators: int = field(default=5, metadata={"help": "simulated raters per image (one of them unreliable)"})
    pairs: int | None = field(default=None, metadata={"help": "preference pairs (null: the benchmark's default)"})


def run(cfg: Any) -> BenchmarkPaths:
    s = parse(SyntheticSettings, cfg, where="")
    paths = write_benchmark(
        s.out, s.n, size=s.size, seed=s.seed, variants_per_scene=s.variants, n_annotators=s.annotators, n_pairs=s.pairs
    )
    files = {k: v for k, v in vars(paths).items() if k not in ("root", "images", "masks")}
    log_summary("synthetic benchmark", {"images": s.n, "size": s.size, "folder": paths.root}, files)
    return paths
