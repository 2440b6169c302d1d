"""Training targets from a MOS: the rating word (hard target) and a soft distribution over the five levels.

Rating words, level values and bins (as in Q-Align and DeQA-Score, scale [1, 5] cut into five equal bins):

========= ===== ==============
word      level MOS bin
========= ===== ==============
bad       1     [1.0, 1.8)
poor      2     [1.8, 2.6)
fair      3     [2.6, 3.4)
good      4     [3.4, 4.2)
excellent 5     [4.2, 5.0]
========= ===== ==============

Each bin contains its lower edge (1.8 is "poor"); the top bin also contains 5.0. Other scales ``(low, high)``
are cut the same way into ``len(words)`` equal bins.

Soft targets (DeQA-Score style): a Gaussian of std ``std`` evaluated at the level values 1..5 and normalised,
whose expectation must equal the MOS exactly. A Gaussian centred on the MOS misses it (the edges truncate it:
MOS 4.8 gives 4.61 with std 0.7), so :func:`soft_target` *shifts the centre*: the distribution
``p_k ∝ exp(-(k - c)^2 / (2 std^2))`` has an expectation strictly increasing in ``c``, from 1 to 5, so exactly one
centre ``c`` gives the MOS; it is found by bisection (expectation error below 1e-9). As ``std -> 0`` this tends
to the two-neighbour linear split, used directly for ``std`` below ``min_std`` (``method="two-point"`` forces
it): MOS 3.3 -> 0.7 on "fair", 0.3 on "good". A MOS at an end of the scale gives a one-hot target. DeQA-Score's
released code instead rescales the distribution affinely (``alpha * p + beta``) and clips negatives, falling back
to the two-neighbour split; the shift keeps every probability positive and needs no fallback.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from reward.rewards.scoring import LEVEL_WORDS

__all__ = ["bin_edges", "mos_to_level", "mos_to_word", "soft_target", "two_point_target", "votes_to_levels"]


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
