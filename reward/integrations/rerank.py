"""Best-of-N for any pipeline's images: ``reward.rerank(images, reward, prompts=None, k=1)``: one ``Reward.score``
call, the ``k`` best first by the reward's registered direction; ties keep their order (a stable sort), and an image
not scored (NaN or ±inf) ranks after every scored one.

Example:
    >>> from reward import get_reward, rerank
    >>> from PIL import Image
    >>> scorer = get_reward("scene-proxy", calibration_scenes=1)
    >>> images = [Image.new("RGB", (64, 64), (v, v, v)) for v in (20, 128, 128)]
    >>> best = rerank(images, scorer, k=2)
    >>> best.indices  # the two equal grey images tie: the first of them ranks first
    [1, 2]
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reward.data.images import as_images
from reward.rewards.registry import spec_of

__all__ = ["Reranked", "rerank"]


@dataclass(frozen=True)
class Reranked:
    """The ``k`` best images, best first: their ``indices`` in the input, the ``images`` (as scored: RGB PIL) and
    their ``scores``; ``all_scores`` holds every input image's score in input order (NaN: not scored)."""

    indices: list[int]
    images: list[Any]
    scores: list[float]
    all_scores: list[float]
    higher_is_better: bool

    @property
    def best(self) -> Any:
        """The best image."""
        return self.images[0]


def rerank(
    images: Any,
    reward: Any,
    prompts: Sequence[str] | None = None,
    k: int = 1,
    *,
    higher_is_better: bool | None = None,
) -> Reranked:
    """The ``k`` best of ``images`` (PIL images, tensors or arrays, one or a batch; see
    :func:`reward.data.images.as_images`) by ``reward`` (built by ``reward.get_reward``; for a reward constructed
    otherwise give ``higher_is_better``). ``prompts``: one per image, passed to ``Reward.score``."""
    spec = spec_of(reward)
    higher = higher_is_better if higher_is_better is not None else (spec.higher_is_better if spec else None)
    if higher is None:
        raise ValueError(
            f"{type(reward).__name__} was not built by reward.get_reward, so its direction is unknown: pass "
            "rerank(..., higher_is_better=True) or build it with reward.get_reward"
        )
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise ValueError(f"rerank: k={k!r} must be a whole number of images to keep (an int, e.g. k=2)")
    if prompts is not None and (isinstance(prompts, str | bytes) or not isinstance(prompts, Sequence)):
        raise ValueError(
            f"rerank: prompts={prompts!r} must be a list of strings, one per image (e.g. prompts=[prompt] * n), not "
            f"a {type(prompts).__name__}"
        )
    if prompts is not None and not all(isinstance(p, str) for p in prompts):
        raise ValueError("rerank: prompts must be strings, one per image")
    pil = as_images(images)
    if not pil:
        raise ValueError("rerank needs at least one image")
    if prompts is not None and len(prompts) != len(pil):
        raise ValueError(f"rerank: {len(prompts)} prompts for {len(pil)} images; give one prompt per image")
    if not 1 <= k <= len(pil):
        raise ValueError(f"rerank: k={k} must be between 1 and the number of images ({len(pil)})")
    out = reward.score(pil, None if prompts is None else list(prompts)).scores
    if getattr(out, "ndim", 1) != 1 or len(out) != len(pil):
        raise ValueError(f"{type(reward).__name__}.score returned {len(out)} scores for {len(pil)} images")
    scores = [float(v) if math.isfinite(float(v)) else math.nan for v in out.tolist()]  # ±inf: not scored

    def key(i: int) -> tuple[bool, float]:  # unscored last; then best first; sorted() is stable: ties keep order
        s = scores[i]
        return (math.isnan(s), 0.0 if math.isnan(s) else (-s if higher else s))

    order = sorted(range(len(pil)), key=key)[:k]
    return Reranked(order, [pil[i] for i in order], [scores[i] for i in order], scores, higher)
