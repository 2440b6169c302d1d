"""The ``scene-proxy`` reward: ``training.procedural.scenes.proxy_scores`` calibrated to the 1-5 level scale,
fused by weights.

A reward whose optimum is known, for procedural scenes: each dimension's hand-made statistic is mapped linearly so
that its mean over calibration renders at level 1 reads 1 and at level 5 reads 5 (other dimensions at 3), clipped to
[1, 5]; the fused score is ``sum_d w_d s_d / sum_d w_d`` with the benchmark's preference weights. Images are
measured at the calibration size. Not a quality model: a known target for the learning proofs of ``rl/``.

Example:
    >>> from reward import get_reward
    >>> from PIL import Image
    >>> r = get_reward("scene-proxy")
    >>> out = r.score([Image.new("RGB", (64, 64), (200, 200, 200))])
    >>> sorted(out.dimensions)
    ['distortion', 'harmony', 'layout', 'lighting']
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image

from reward.core.config import parse
from reward.data.images import as_images
from reward.rewards.base import CallableReward, RewardOutput
from training.procedural.scenes import DIMENSIONS, proxy_scores, render, sample_scene
from training.procedural.synthetic import DEFAULT_WEIGHTS


@dataclass
class SceneProxyConfig:
    name: str = "scene-proxy"
    weights: dict[str, float] = field(
        default_factory=lambda: dict(DEFAULT_WEIGHTS), metadata={"help": "fusion weight per dimension"}
    )
    size: int = field(
        default=64,
        metadata={"help": "images are measured at this size (the calibration renders' size)", "range": (16, 4096)},
    )
    calibration_scenes: int = field(
        default=8, metadata={"help": "renders per (dimension, level) for the 1/5 anchors", "range": (1, 10_000)}
    )
    device: str | None = field(
        default=None, metadata={"help": "unused (CPU statistics); accepted so every reward config can name a device"}
    )


@functools.cache
def calibration(size: int, n_scenes: int) -> dict[str, tuple[float, float]]:
    """Mean proxy of each dimension at level 1 and at level 5 (others at 3) over ``n_scenes`` fixed renders."""
    anchors = {}
    for dim in DIMENSIONS:
        means = []
        for level in (1, 5):
            levels = {d: 3 for d in DIMENSIONS} | {dim: level}
            values = [
                proxy_scores(render(sample_scene(np.random.default_rng([7, k])), levels, size))[dim]
                for k in range(n_scenes)
            ]
            means.append(float(np.mean(values)))
        anchors[dim] = (means[0], means[1])
    return anchors


class SceneProxyReward(CallableReward):
    """Calibrated proxy statistics per dimension (1-5) and their weighted mean."""

    def __init__(self, cfg: SceneProxyConfig | dict[str, Any]) -> None:
        cfg = cfg if isinstance(cfg, SceneProxyConfig) else parse(SceneProxyConfig, cfg, where="reward")
        unknown = set(cfg.weights) - set(DIMENSIONS)
        if unknown or not cfg.weights or any(w < 0 for w in cfg.weights.values()) or sum(cfg.weights.values()) <= 0:
            raise ValueError(
                f"reward.weights={cfg.weights}: give non-negative weights, not all zero, for dimensions among "
                f"{list(DIMENSIONS)}"
            )
        self.cfg = cfg
        self.anchors = calibration(cfg.size, cfg.calibration_scenes)

    def score(self, images: Sequence[Image.Image] | Any, prompts: Sequence[str] | None = None) -> RewardOutput:
        import torch  # here: reward=scene-proxy's settings are read before torch loads

        images = as_images(images)  # PIL, tensors, arrays, one or a batch
        side = (self.cfg.size, self.cfg.size)
        raw = [proxy_scores(im.convert("RGB").resize(side, Image.Resampling.BILINEAR)) for im in images]
        dims = {  # each statistic mapped linearly onto the levels by its calibration anchors, clipped to [1, 5]
            d: torch.tensor([1 + 4 * (r[d] - lo) / (hi - lo) for r in raw], dtype=torch.float32).clamp(1.0, 5.0)
            for d, (lo, hi) in ((d, self.anchors[d]) for d in self.cfg.weights)
        }
        total = sum(self.cfg.weights.values())
        fused = sum(self.cfg.weights[d] * dims[d] for d in dims) / total
        return RewardOutput(scores=torch.as_tensor(fused, dtype=torch.float32).reshape(len(images)), dimensions=dims)
