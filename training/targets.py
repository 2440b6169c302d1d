"""Training targets from a MOS: the rating word (hard target) and a soft distribution over the levels.

Words and bins (ours): the scale [1, 5] cut into equal bins closed on the left, the top one closed on both sides:
bad [1.0, 1.8), poor [1.8, 2.6), fair [2.6, 3.4), good [3.4, 4.2), excellent [4.2, 5.0]; other scales and word counts
alike. Q-Align and DeQA-Score cut a low-high range into bins closed on the right (:func:`range_level`).

Soft targets, ours (``data.soft_targets=gaussian``): a Gaussian of std ``std`` at the level values, normalised, whose
expectation equals the MOS exactly: a Gaussian centred on the MOS misses it (MOS 4.8 gives 4.61 with std 0.7), so
:func:`soft_target` shifts the centre, found by bisection (the expectation is strictly increasing in it). Below
``min_std`` (or ``method="two-point"``) the two-neighbour split it tends to: MOS 3.3 -> 0.7 fair, 0.3 good.
:func:`deqa_soft_label` is DeQA-Score's label as its released code computes it (rescaled affinely to keep the mean,
negatives clipped, not renormalised, a two-neighbour fallback).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from reward.rewards.levels import LEVEL_WORDS


def bin_edges(n_levels: int = 5, scale: tuple[float, float] = (1.0, 5.0)) -> tuple[float, ...]:
    """The inner edges of ``n_levels`` equal-width bins over ``scale``.

    >>> bin_edges()
    (1.8, 2.6, 3.4, 4.2)
    """
    low, high = scale
    if n_levels < 2 or not high > low:
        raise ValueError(f"need n_levels >= 2 and scale (low, high) with high > low, got {n_levels}, {scale}")
    return tuple(round(low + (high - low) * k / n_levels, 12) for k in range(1, n_levels))


def _check_mos(mos: float, scale: tuple[float, float]) -> float:
    value = float(mos)
    if not math.isfinite(value) or not scale[0] <= value <= scale[1]:
        raise ValueError(f"MOS {mos!r} is outside the scale {scale}; rescale it or pass the right scale=(low, high)")
    return value


def mos_to_level(mos: float, n_levels: int = 5, scale: tuple[float, float] = (1.0, 5.0)) -> int:
    """The level 1..n_levels whose bin contains ``mos`` (see the table in the module docstring).

    >>> [mos_to_level(m) for m in (1.0, 1.79, 1.8, 3.4, 4.2, 5.0)]
    [1, 1, 2, 4, 5, 5]
    """
    value = _check_mos(mos, scale)
    return 1 + sum(value >= edge for edge in bin_edges(n_levels, scale))


def mos_to_word(mos: float, words: Sequence[str] = LEVEL_WORDS, scale: tuple[float, float] = (1.0, 5.0)) -> str:
    """The rating word of ``mos``, with ``words`` ordered best first like :data:`~reward.rewards.scoring.LEVEL_WORDS`
    (level ``k`` of ``n`` is ``words[n - k]``).

    >>> mos_to_word(3.39), mos_to_word(3.4)
    ('fair', 'good')
    """
    return words[len(words) - mos_to_level(mos, len(words), scale)]


def _level_values(n_levels: int, scale: tuple[float, float]) -> np.ndarray:
    return np.linspace(scale[0], scale[1], n_levels)


def two_point_target(mos: float, n_levels: int = 5, scale: tuple[float, float] = (1.0, 5.0)) -> np.ndarray:
    """Probability split linearly between the two level values around ``mos`` (expectation = ``mos``).

    >>> two_point_target(3.3).round(6).tolist()
    [0.0, 0.0, 0.7, 0.3, 0.0]
    """
    value = _check_mos(mos, scale)
    values = _level_values(n_levels, scale)
    position = (value - scale[0]) / (values[1] - values[0])
    lower = min(int(math.floor(position)), n_levels - 2)
    frac = position - lower
    target = np.zeros(n_levels)
    target[lower], target[lower + 1] = 1.0 - frac, frac
    return target


def _gaussian(values: np.ndarray, centre: float, std: float) -> np.ndarray:
    # -(v - c)^2 without its constant -c^2 (normalised away): exact for a centre far outside the scale too
    logits = (values * (2.0 * centre) - values**2) / (2.0 * std**2)
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


MAX_STD_WIDTHS = 1000.0  # a wider std changes the target by less than 1e-6: it is taken as this many scale widths


def soft_target(
    mos: float,
    std: float = 0.5,
    *,
    n_levels: int = 5,
    scale: tuple[float, float] = (1.0, 5.0),
    method: str = "shift",
    min_std: float = 1e-3,
) -> np.ndarray:
    """A distribution over the levels (worst first) with expectation exactly ``mos`` (see module docstring).

    ``std`` is in MOS units (for DeQA-Score, the std of the image's ratings). ``method`` is ``"shift"`` (the
    discretised Gaussian with its centre solved for) or ``"two-point"``. The work is bounded whatever the std: the
    centre is bracketed by doubling steps and bisected at most 200 times, and a std above ``MAX_STD_WIDTHS`` scale
    widths (the flat limit, the maximum-entropy distribution of that mean) is taken as that many.

    >>> p = soft_target(4.8, 0.7)
    >>> round(float(p.sum()), 9), round(float(p @ [1, 2, 3, 4, 5]), 9)
    (1.0, 4.8)
    >>> round(float(soft_target(4.8, 1e6) @ [1, 2, 3, 4, 5]), 9)  # a std of 1e6: as fast, the same expectation
    4.8
    """
    value = _check_mos(mos, scale)
    if method not in ("shift", "two-point"):
        raise ValueError(f"method must be 'shift' or 'two-point', got {method!r}")
    if not math.isfinite(std) or std < 0:
        raise ValueError(f"std must be a finite number >= 0, got {std!r}")
    values = _level_values(n_levels, scale)
    if method == "two-point" or std < min_std or value in (scale[0], scale[1]):
        return two_point_target(value, n_levels, scale)
    width = scale[1] - scale[0]
    std = min(std, MAX_STD_WIDTHS * width)
    low, high = scale[0] - width, scale[1] + width
    step = width
    while _gaussian(values, low, std) @ values > value:  # widen until the expectation brackets the MOS
        low, step = low - step, 2 * step
    step = width
    while _gaussian(values, high, std) @ values < value:
        high, step = high + step, 2 * step
    for _ in range(200):
        mid = 0.5 * (low + high)
        if _gaussian(values, mid, std) @ values < value:
            low = mid
        else:
            high = mid
        if high - low < 1e-13 * max(1.0, abs(mid)):
            break
    return _gaussian(values, 0.5 * (low + high), std)


def votes_to_levels(votes: Sequence[float], n_levels: int = 5, scale: tuple[float, float] = (1.0, 5.0)) -> np.ndarray:
    """The annotators' own distribution as a target over the levels (worst first): ``votes`` are the shares (or
    counts) of the ratings ``1..len(votes)``, spread evenly over ``scale``; each rating value goes to its level's
    bin (:func:`mos_to_level`). KonIQ-10k's ``c1..c5`` on 1-5 map one to one; AVA's ten votes on 1-10 merge in
    pairs (1-2, 3-4, ...).

    >>> votes_to_levels([0, 0, 0.25, 0.75, 0]).tolist()
    [0.0, 0.0, 0.25, 0.75, 0.0]
    >>> votes_to_levels([0, 1, 2, 3, 4, 0, 0, 0, 0, 0], scale=(1.0, 10.0)).round(3).tolist()
    [0.1, 0.5, 0.4, 0.0, 0.0]
    """
    counts = np.asarray(votes, dtype=float)
    if counts.ndim != 1 or counts.size < 2 or (counts < 0).any() or not counts.sum() > 0:
        raise ValueError(f"votes must be >= 0 over at least two ratings with a positive sum, got {list(votes)}")
    out = np.zeros(n_levels)
    for value, count in zip(_level_values(counts.size, scale), counts, strict=True):
        out[mos_to_level(float(np.clip(value, *scale)), n_levels, scale) - 1] += count
    return out / out.sum()


# ------------------------------------------------------------------------------------------------ the sources' rules

# DeQA-Score's tolerance at the bin edges (build_soft_labels/gen_soft_label.py, get_level and get_binary_probs)
RANGE_EPS = 1e-8

#: DeQA-Score's density per dataset (``build_soft_labels/config.json``, github.com/zhiyuanyou/DeQA-Score @ 8e4abc8):
#: the Gaussian's cdf over each level's unit interval for SPAQ ("better for smaller std"), its pdf at the level for
#: KonIQ-10k and KADID-10k ("better for larger std"); other datasets take the pdf, its code's default branch.
DEQA_DENSITY = MappingProxyType({"koniq10k": "pdf", "spaq": "cdf", "kadid10k": "pdf"})


def range_level(score: float, low: float, high: float, n_levels: int = 5, eps: float = RANGE_EPS) -> int:
    """The level 1..n_levels of ``score`` among ``n_levels`` equal bins between ``low`` and ``high``, each closed on
    the right and ``low`` itself in the lowest: level ``i`` holds ``low + (i-1)/n (high-low) - eps < score <=
    low + i/n (high-low) + eps``. This is DeQA-Score's ``get_level`` (build_soft_labels/gen_soft_label.py) and
    Q-Align's level rule (its paper's ``m + (i-1)(M-m)/5 < s <= m + i(M-m)/5``), which reproduces all 9,056 labels
    of its released KonIQ files with ``m, M = 6.68487394958, 85.35625`` on the 0-100 MOS. (:func:`mos_to_level`,
    ours, closes each bin on the left instead.)

    >>> [range_level(s, 6.68487394958, 85.35625) for s in (6.68487394958, 22.41914, 22.41916, 85.35625)]
    [1, 1, 2, 5]
    """
    value = float(score)
    if n_levels < 2 or not high > low:
        raise ValueError(f"need n_levels >= 2 and low < high, got {n_levels}, ({low}, {high})")
    if not (math.isfinite(value) and low - eps < value <= high + eps):
        raise ValueError(f"score {score!r} is outside the level range [{low}, {high}]")
    for level in range(1, n_levels):
        if value <= low + level / n_levels * (high - low) + eps:
            return level
    return n_levels


def range_word(score: float, low: float, high: float, words: Sequence[str] = LEVEL_WORDS) -> str:
    """The word of :func:`range_level` with ``words`` best first.

    >>> range_word(77.3836206897, 6.68487394958, 85.35625), range_word(53.8874172185, 6.68487394958, 85.35625)
    ('excellent', 'fair')
    """
    return words[len(words) - range_level(score, low, high, len(words))]


@dataclass(frozen=True)
class DeqaLabel:
    """DeQA-Score's soft label of one image: ``probs`` best level first (its ``level_probs``: excellent ... bad),
    the raw masses before the adjustment (``level_probs_org``), the MOS and std on the levels' scale 1..n and whether
    the two-neighbour fallback replaced the adjusted Gaussian."""

    probs: np.ndarray
    raw: np.ndarray
    mos_norm: float
    std_norm: float
    fallback: bool


def deqa_soft_label(
    mos: float,
    std: float,
    low: float,
    high: float,
    *,
    density: str = "pdf",
    n_levels: int = 5,
    thre_std: float = 0.2,
    thre_diff: float = 0.1,
) -> DeqaLabel:
    """DeQA-Score's soft label (``build_soft_labels/gen_soft_label.py``, zhiyuanyou/DeQA-Score @ 8e4abc8, l.118-148):

    1. ``m' = (n-1)(mos - low)/(high - low) + 1`` and ``s' = (n-1) std/(high - low)`` (``low, high``: the dataset's
       lowest and highest MOS);
    2. ``p_x`` for the levels ``x = n..1``: the Gaussian N(m', s'^2) density at ``x`` (``density="pdf"``) or its mass
       on ``[x - 0.5, x + 0.5]`` (``"cdf"``), not normalised;
    3. ``q_x = max(alpha p_x + beta, 0)`` with ``alpha A + n beta = 1`` and ``alpha B + beta sum(x) = m'`` (``A = sum
       p``, ``B = sum x p``; ``alpha = (m' - mean x)/(B - mean x A + 1e-9)``): the mean kept, clipped at 0 and **not
       renormalised** (the sum can exceed 1, up to 1.073 on KonIQ-10k), as DeQA trains on it;
    4. if ``s' < thre_std`` or ``|sum x q_x - m'| > thre_diff``: the two-neighbour linear split of ``m'`` instead.

    >>> label = deqa_soft_label(3.92660550458716, 0.556217750098803, 1.09615384615385, 4.31)  # its released example
    >>> [round(float(p), 6) for p in label.probs], label.fallback
    ([0.502519, 0.478528, 0.044838, 0.0, 0.0], False)
    """
    if density not in ("pdf", "cdf"):
        raise ValueError(f"density must be 'pdf' or 'cdf' (DeQA-Score's config.json), got {density!r}")
    if not high > low:
        raise ValueError(f"need low < high, got ({low}, {high})")
    if not (math.isfinite(std) and std >= 0):
        raise ValueError(f"std must be a finite number >= 0, got {std!r}")
    range_level(mos, low, high, n_levels)  # inside the range, or a clear error
    mean_norm = (n_levels - 1) * (float(mos) - low) / (high - low) + 1
    std_norm = (n_levels - 1) * float(std) / (high - low)
    xs = np.arange(n_levels, 0, -1, dtype=float)  # n .. 1: best first
    if std_norm > 0:
        if density == "pdf":
            raw = np.exp(-((xs - mean_norm) ** 2) / (2 * std_norm**2)) / (std_norm * math.sqrt(2 * math.pi))
        else:
            cdf = np.vectorize(lambda v: 0.5 * (1 + math.erf((v - mean_norm) / (std_norm * math.sqrt(2)))))
            raw = cdf(xs + 0.5) - cdf(xs - 0.5)
        total, moment, centre = raw.sum(), raw @ xs, xs.mean()
        alpha = (mean_norm - centre) / (moment - centre * total + 1e-9)
        beta = (1.0 - alpha * total) / n_levels
        probs = np.maximum(alpha * raw + beta, 0.0)
        diff = abs(float(probs @ xs) - mean_norm)
    else:  # a zero std: the density is undefined and the threshold on s' applies (DeQA's nan compares false)
        raw, probs, diff = np.full(n_levels, np.nan), np.full(n_levels, np.nan), math.inf
    fallback = std_norm < thre_std or diff > thre_diff
    if fallback:
        probs = _two_neighbours(mean_norm, n_levels)
    return DeqaLabel(probs, raw, mean_norm, std_norm, bool(fallback))


def _two_neighbours(mean_norm: float, n_levels: int, eps: float = RANGE_EPS) -> np.ndarray:
    """DeQA-Score's ``get_binary_probs``: ``m'`` split linearly between the two levels around it (best first)."""
    probs = np.zeros(n_levels)
    for i in range(1, n_levels):
        left, right = i - eps, i + 1 + eps
        if left < mean_norm <= right:
            probs[i - 1] = (right - mean_norm) / (right - left)
            probs[i] = (mean_norm - left) / (right - left)
            break
    return probs[::-1].copy()


SOFT_MODES = ("votes", "gaussian", "deqa")


def soft_mode(value: Any) -> str | None:
    """``data.soft_targets`` as None (hard targets), ``votes`` (true), ``gaussian`` or ``deqa``; ``?`` for anything
    else.

    >>> [soft_mode(v) for v in (False, "false", True, "True", "votes", "gaussian", "deqa", "soft")]
    [None, None, 'votes', 'votes', 'votes', 'gaussian', 'deqa', '?']
    """
    text = str(value).strip().lower()
    if text in ("false", "none", "0", ""):
        return None
    if text in ("true", "1", "votes"):
        return "votes"
    return text if text in ("gaussian", "deqa") else "?"


def words_best_first(words: Sequence[str], values: Sequence[float]) -> list[str]:
    """The level words ordered best first by their values (the MOS bins map onto them in that order).

    >>> words_best_first(["bad", "good", "fair"], [1, 3, 2])
    ['good', 'fair', 'bad']
    """
    return [w for _, w in sorted(zip(values, words, strict=True), reverse=True)]
