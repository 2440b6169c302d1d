"""Raw ratings to a MOS as SA-IQA's App. D.1 (and §3.1.4) does it: each image's ratings with |z| > 2 replaced by
their mean and the MOS recomputed (:func:`clean_group`, :func:`aggregate`), and each annotator's SRCC with the MOS,
below 0.6 flagged for review (:func:`annotator_reliability`). ``training/mos.py`` writes manifests with them; the
``sa-bench-cleaned`` dataset applies them to SA-BENCH's annotator columns.

Note: with ``n`` ratings no z-score can exceed ``sqrt((n - 1) (n - ddof) / n)`` (Samuelson's inequality), 2 for five
ratings, so with SA-BENCH's usual five raters the rule never fires (:func:`max_abs_z`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MosRow", "RawRating", "aggregate", "annotator_reliability", "clean_group", "max_abs_z"]


@dataclass(frozen=True)
class RawRating:
    """One rating; ``annotator`` is None for anonymous ratings, ``scene`` None when the row named none."""

    image: str
    dimension: str
    annotator: str | None
    rating: float
    scene: str | None = None


@dataclass(frozen=True)
class MosRow:
    """The cleaned MOS of one image and dimension (``std`` of the cleaned ratings, population std)."""

    image: str
    dimension: str
    mos: float
    std: float
    n_ratings: int
    n_outliers: int
    scene: str


def max_abs_z(n: int, ddof: int = 0) -> float:
    """The largest |z-score| any of ``n`` ratings can reach: ``sqrt((n - 1) (n - ddof) / n)``.

    >>> max_abs_z(5), round(max_abs_z(7), 4)
    (2.0, 2.4495)
    """
    return math.sqrt((n - 1) * (n - ddof) / n) if n > ddof else 0.0


def clean_group(ratings: Sequence[float], *, z_threshold: float = 2.0, ddof: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Replace ratings with ``|x - mean| / std > z_threshold`` by the group mean; return (ratings, outlier mask).

    The MOS is then the mean of the returned ratings. A constant group (std 0) has no outliers, and a z-score
    equal to the threshold up to rounding (``[1, 1, 1, 1, 5]`` has z = 2 exactly) is not above it.

    >>> cleaned, outlier = clean_group([3, 3, 3, 3, 3, 3, 5])  # mean 23/7, std 0.6999, z(5) = 2.449
    >>> outlier.tolist(), round(float(cleaned.mean()), 4)  # (6 * 3 + 23/7) / 7
    ([False, False, False, False, False, False, True], 3.0408)
    """
    x = np.asarray(ratings, dtype=np.float64)
    mean = x.mean()
    std = x.std(ddof=ddof) if x.size > ddof else 0.0
    if std == 0.0:
        return x.copy(), np.zeros(x.shape, dtype=bool)
    outlier = np.abs(x - mean) / std > z_threshold * (1 + 1e-9)  # |z| exactly 2, as in [1, 1, 1, 1, 5], stays
    return np.where(outlier, mean, x), outlier


def aggregate(ratings: Iterable[RawRating], *, z_threshold: float = 2.0, ddof: int = 0) -> list[MosRow]:
    """One :class:`MosRow` per (image, dimension), sorted by image then dimension."""
    groups: dict[tuple[str, str], list[RawRating]] = defaultdict(list)
    for r in ratings:
        groups[(r.image, r.dimension)].append(r)
    rows = []
    for (image, dimension), group in sorted(groups.items()):
        cleaned, outlier = clean_group([r.rating for r in group], z_threshold=z_threshold, ddof=ddof)
        scene = next((r.scene for r in group if r.scene is not None), None) or image
        rows.append(
            MosRow(
                image, dimension, float(cleaned.mean()), float(cleaned.std()), len(group), int(outlier.sum()), scene
            )
        )
    return rows


def _srcc(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation (SciPy's), or ``None`` where it is undefined (fewer than 3 items, a constant side).

    >>> round(_srcc([1, 2, 3, 4], [1, 3, 2, 4]), 6), _srcc([1, 2], [1, 2]), _srcc([1, 1, 1], [1, 2, 3])
    (0.8, None, None)
    """
    from scipy import stats  # when ratings are compared, not when a command's settings are read

    if len(x) < 3 or np.ptp(np.asarray(x, float)) == 0 or np.ptp(np.asarray(y, float)) == 0:
        return None
    value = float(stats.spearmanr(x, y).statistic)
    return None if math.isnan(value) else value


def annotator_reliability(
    ratings: Iterable[RawRating], mos: Iterable[MosRow], *, threshold: float = 0.6
) -> dict[str, dict[str, Any]]:
    """Per annotator: ``{"n", "srcc", "per_dimension", "flagged", "flagged_dimensions"}``.

    ``srcc`` pools all the annotator's (rating, MOS) pairs across dimensions; None when undefined (fewer than 3
    items or constant ratings), which also flags the annotator. Anonymous ratings are not assessed.
    """
    table = {(m.image, m.dimension): m.mos for m in mos}
    pairs: dict[str, dict[str, tuple[list[float], list[float]]]] = defaultdict(lambda: defaultdict(lambda: ([], [])))
    for r in ratings:
        if r.annotator is None:
            continue
        xs, ys = pairs[r.annotator][r.dimension]
        xs.append(r.rating)
        ys.append(table[(r.image, r.dimension)])
    report = {}
    for name in sorted(pairs):
        per_dim = {d: _srcc(xs, ys) for d, (xs, ys) in sorted(pairs[name].items())}
        all_x = [x for xs, _ in pairs[name].values() for x in xs]
        all_y = [y for _, ys in pairs[name].values() for y in ys]
        pooled = _srcc(all_x, all_y)
        report[name] = {
            "n": len(all_x),
            "srcc": pooled,
            "per_dimension": per_dim,
            "flagged": pooled is None or pooled < threshold,
            "flagged_dimensions": [d for d, settings in per_dim.items() if settings is None or settings < threshold],
        }
    return report
