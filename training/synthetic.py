"""Write the procedural interior benchmark (images, MOS, raw ratings, preference pairs, inpainting tasks).

    perceptual-rewards synthetic out=DIR n=200 [size=64 seed=0 variants=1 annotators=5 pairs=N]

The benchmark is :mod:`training.procedural.synthetic` (also the ``data.train=synthetic`` stream of
``perceptual-rewards sft``); the settings are :class:`SyntheticSettings` below.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from omegaconf import MISSING

from reward.core.config import COUNT, SIDE
from reward.core.summary import log_summary
from training.procedural.synthetic import BenchmarkPaths, write_benchmark

logger = logging.getLogger(__name__)


@dataclass
class SyntheticSettings:
    out: str = field(default=MISSING, metadata={"help": "folder to write the benchmark into"})
    n: int = field(default=200, metadata={"help": "scenes", "range": COUNT})
    size: int = field(default=64, metadata={"help": "image side in pixels", "range": SIDE})
    seed: int = 0
    variants: int = field(
        default=1, metadata={"help": "renders per scene (same levels, other furniture)", "range": (1, 1000)}
    )
    annotators: int = field(
        default=5, metadata={"help": "simulated raters per image (one of them unreliable)", "range": (1, 1000)}
    )
    pairs: int | None = field(
        default=None, metadata={"help": "preference pairs (null: the benchmark's default)", "range": (0, 10_000_000)}
    )


def run(settings: SyntheticSettings) -> BenchmarkPaths:
    paths = write_benchmark(
        settings.out,
        settings.n,
        size=settings.size,
        seed=settings.seed,
        variants_per_scene=settings.variants,
        n_annotators=settings.annotators,
        n_pairs=settings.pairs,
    )
    files = {k: v for k, v in vars(paths).items() if k not in ("root", "images", "masks")}
    log_summary("synthetic benchmark", {"images": settings.n, "size": settings.size, "folder": paths.root}, files)
    return paths


if __name__ == "__main__":
    from reward.core.cli import main

    main("synthetic", run, schema=SyntheticSettings, doc=__doc__)
