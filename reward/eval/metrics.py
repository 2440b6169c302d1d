"""Agreement metrics between predicted scores and human opinion (MOS): PLCC, SRCC, KRCC, HOR, pair accuracy.

Inputs are 1-D sequences, numpy arrays or (CPU or GPU) tensors. Degenerate inputs (constant arrays, fewer
than two items, no low-MOS images for HOR) never raise: the metric is ``nan`` and a ``RuntimeWarning`` says
why. Mismatched lengths, NaN/inf values and bad labels are caller errors and raise ``ValueError``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
from scipy import optimize, special, stats

from reward.data.labels import LABEL_A, LABEL_TIE, label_codes


def _pair(pred: Any, mos: Any) -> tuple[np.ndarray, np.ndarray]:
    """Both as 1-D float arrays ([N, 1] and tensors accepted) of one length, finite."""
    arrays = []
    for x, name in ((pred, "pred"), (mos, "mos")):
        arr = np.asarray(x.detach().float().cpu() if hasattr(x, "detach") else x, dtype=np.float64)
        arr = arr.reshape(-1) if arr.ndim > 1 and arr.size == max(arr.shape) else arr
        if arr.ndim != 1:
            raise ValueError(f"{name} must be 1-D (one score per image), got shape {arr.shape}.")
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} contains NaN or inf at index {int(np.flatnonzero(~np.isfinite(arr))[0])}.")
        arrays.append(arr)
    p, m = arrays
    if p.shape != m.shape:
        raise ValueError(f"pred has {p.size} scores but mos has {m.size}; pass one prediction per rated image.")
    return p, m


def _correlation(name: str, pred: Any, mos: Any) -> tuple[np.ndarray, np.ndarray, float]:
    """The arrays and the correlation (scipy's kendalltau for krcc: tau-b, spearmanr for srcc, else pearsonr), or
    nan with a warning when it is undefined (fewer than 2 items, a constant array)."""
    p, m = _pair(pred, mos)
    why = f"needs at least 2 items, got {p.size}" if p.size < 2 else None
    for arr, side in ((p, "pred"), (m, "mos")):
        if why is None and np.ptp(arr) == 0:
            why = f"{side} is constant (all {arr[0]:g}), correlation is undefined"
    if why:
        warnings.warn(f"{name}: {why}; returning nan.", RuntimeWarning, stacklevel=3)
        return p, m, math.nan
    return p, m, float({"srcc": stats.spearmanr, "krcc": stats.kendalltau}.get(name, stats.pearsonr)(p, m)[0])


def plcc(pred: Any, mos: Any) -> float:
    """Pearson linear correlation coefficient.

    >>> round(plcc([1, 2, 3], [1, 3, 2]), 6)  # deviations [-1, 0, 1] and [-1, 1, 0]: 1 / sqrt(2 * 2)
    0.5
    """
    return _correlation("plcc", pred, mos)[2]


def srcc(pred: Any, mos: Any) -> float:
    """Spearman rank correlation coefficient.

    >>> srcc([0.1, 0.5, 0.2, 0.9], [1, 3, 2, 4])
    1.0
    """
    return _correlation("srcc", pred, mos)[2]


def krcc(pred: Any, mos: Any) -> float:
    """Kendall rank correlation coefficient (tau-b, which accounts for ties).

    >>> round(krcc([1, 2, 3, 4], [1, 3, 2, 4]), 6)  # 5 concordant, 1 discordant pair -> (5 - 1) / 6
    0.666667
    """
    return _correlation("krcc", pred, mos)[2]


def logistic_4(x: np.ndarray, b1: float, b2: float, b3: float, b4: float) -> np.ndarray:
    """VQEG 4-parameter logistic ``(b1 - b2) / (1 + exp(-(x - b3) / |b4|)) + b2`` (computed without overflow)."""
    return (b1 - b2) * special.expit((np.asarray(x) - b3) / max(abs(b4), 1e-12)) + b2


def plcc_logistic(pred: Any, mos: Any) -> float:
    """PLCC after mapping ``pred`` onto the MOS scale with the VQEG logistic (:func:`logistic_4`), started from
    ``b1, b2 = max(mos), min(mos)`` (swapped for a decreasing relation), ``b3 = mean(pred)``, ``b4 = std(pred)``. A
    failed fit (also with fewer than 4 points) warns and gives the raw PLCC. The sign is the fitted curve's slope's,
    so predictions that run against the MOS stay negative.

    >>> x = [1, 2, 3, 4, 5, 6]
    >>> plcc_logistic(x, [1, 1.1, 1.5, 3.5, 3.9, 4.0]) > plcc(x, [1, 1.1, 1.5, 3.5, 3.9, 4.0])
    True
    """
    p, m, raw = _correlation("plcc_logistic", pred, mos)
    if math.isnan(raw):
        return raw
    p0 = [*((m.max(), m.min()) if raw >= 0 else (m.min(), m.max())), float(p.mean()), float(p.std())]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optimize.OptimizeWarning)  # "covariance not estimated": fit is fine
            beta, _ = optimize.curve_fit(logistic_4, p, m, p0=p0, maxfev=10_000)
        fitted = logistic_4(p, *beta)
        if not np.isfinite(fitted).all() or np.ptp(fitted) == 0:
            raise RuntimeError("the fitted curve is flat or not finite")
    except (RuntimeError, TypeError, ValueError) as err:  # TypeError: fewer points than parameters
        warnings.warn(f"plcc_logistic: logistic fit failed ({err}); returning the raw PLCC.", RuntimeWarning, 2)
        return raw
    direction = 1.0 if beta[0] >= beta[1] else -1.0  # b1 > b2: increasing curve
    return direction * float(stats.pearsonr(fitted, m)[0])


def to_mos_scale(pred: np.ndarray, pred_range: tuple[float, float], mos_range: tuple[float, float]) -> np.ndarray:
    """Map predictions linearly from ``pred_range`` onto ``mos_range``.

    >>> to_mos_scale(np.array([0.0, 0.5, 1.0]), (0, 1), (1, 5)).tolist()
    [1.0, 3.0, 5.0]
    """
    (p_lo, p_hi), (m_lo, m_hi) = pred_range, mos_range
    return (np.asarray(pred, dtype=float) - p_lo) / (p_hi - p_lo) * (m_hi - m_lo) + m_lo


def hor(
    pred: Any,
    mos: Any,
    *,
    tau_low: float = 3.0,
    tau_high: float = 4.0,
    pred_range: tuple[float, float] = (1.0, 5.0),
    mos_range: tuple[float, float] = (1.0, 5.0),
) -> float:
    """Holistic Override Rate (PACE eq. 1): ``#(y_i <= tau_low and yhat_i >= tau_high) / #(y_i <= tau_low)``, the
    predictions mapped linearly from ``pred_range`` onto ``mos_range`` first (thresholds on the MOS scale, with a
    1e-9 tolerance). Lower is better; ``nan`` with a warning when no image has ``mos <= tau_low``.

    >>> hor([0.9, 0.8, 0.2, 0.9], [2.0, 3.0, 1.0, 5.0], pred_range=(0, 1))  # mapped 4.6, 4.2, 1.8, 4.6 -> 2/3
    0.6666666666666666
    """
    p, m = _pair(pred, mos)
    if not pred_range[1] > pred_range[0] or not mos_range[1] > mos_range[0]:
        raise ValueError(
            f"pred_range {pred_range} and mos_range {mos_range} must each be (low, high) with low < high."
        )
    low = m <= tau_low + 1e-9
    if not low.any():
        warnings.warn(
            f"hor: no image has mos <= tau_low={tau_low}; HOR is undefined, returning nan.", RuntimeWarning, 2
        )
        return math.nan
    return float((to_mos_scale(p, pred_range, mos_range)[low] >= tau_high - 1e-9).sum() / low.sum())


def pairwise_accuracy(
    pred_a: Any,
    pred_b: Any,
    labels: Sequence[str],
    *,
    ties: Literal["exclude", "margin"] = "exclude",
    tie_margin: float = 0.0,
) -> float:
    """Fraction of pairs whose preferred image (label ``"a"``/``"b"``) the scores agree with: 1 if they prefer it by
    more than ``tie_margin``, 0.5 within it, else 0. ``"tie"`` pairs are left out (``ties="exclude"``) or count 1
    within ``tie_margin`` (``ties="margin"``). ``nan`` with a warning when no pair is counted.

    >>> pairwise_accuracy([3, 1, 2, 5], [2, 2, 2, 1], ["a", "a", "b", "tie"])  # 1 + 0 + 0.5 over 3 pairs
    0.5
    """
    a, b = _pair(pred_a, pred_b)
    codes = label_codes(labels)
    if codes.size != a.size:
        raise ValueError(f"labels has {codes.size} entries but there are {a.size} score pairs.")
    if ties not in ("exclude", "margin"):
        raise ValueError(f"ties must be 'exclude' or 'margin', got {ties!r}.")
    diff = a - b
    close = np.abs(diff) <= tie_margin
    credit = np.where(close, 0.5, np.where(codes == LABEL_A, diff > 0, diff < 0).astype(float))
    credit = np.where(codes == LABEL_TIE, close.astype(float), credit)
    keep = codes != LABEL_TIE if ties == "exclude" else np.ones_like(close)
    if not keep.any():
        warnings.warn("pairwise_accuracy: no pair left to count; returning nan.", RuntimeWarning, 2)
        return math.nan
    return float(credit[keep].mean())


def bootstrap_ci(
    metric_fn: Callable[..., float], *arrays: Any, n: int = 1000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap ``(low, high)`` confidence interval of ``metric_fn(*arrays)`` at level ``1 - alpha``.

    The arrays are resampled jointly, ``n`` times, seeded (``scipy.stats.bootstrap``, paired); resamples where the
    metric is nan are ignored, their warnings silenced. ``functools.partial`` passes keywords (HOR's thresholds).

    >>> lo, hi = bootstrap_ci(plcc, [1, 2, 3, 4, 5, 6], [1.2, 1.9, 3.4, 3.8, 5.1, 6.3], n=200)
    >>> lo <= plcc([1, 2, 3, 4, 5, 6], [1.2, 1.9, 3.4, 3.8, 5.1, 6.3]) <= hi
    True
    """
    if not arrays:
        raise ValueError("bootstrap_ci needs at least one array to resample.")
    if n < 1 or not 0 < alpha < 1:
        raise ValueError(f"need n >= 1 and 0 < alpha < 1, got n={n}, alpha={alpha}.")
    data = [np.asarray(x.detach().cpu() if hasattr(x, "detach") else x) for x in arrays]
    if any(len(x) != len(data[0]) for x in data):
        raise ValueError(f"all arrays must have the same length, got {[len(x) for x in data]}.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rng = np.random.default_rng(seed)
        res = stats.bootstrap(
            data, metric_fn, paired=True, vectorized=False, n_resamples=n, method="percentile", random_state=rng
        )
    values = np.asarray(res.bootstrap_distribution, dtype=float)  # scipy's percentile gives nan if any one is nan
    if np.isnan(values).all():
        warnings.warn("bootstrap_ci: the metric is nan on every resample; returning (nan, nan).", RuntimeWarning, 2)
        return math.nan, math.nan
    low, high = np.nanpercentile(values, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(low), float(high)


def summarize(pred: Any, mos: Any, **hor_kwargs: Any) -> dict[str, float | int]:
    """plcc, plcc_logistic, srcc, krcc, hor (``hor_kwargs`` go to :func:`hor`) and n in one dict.

    >>> s = summarize([1, 2, 3, 4.5], [1, 2, 3, 4])
    >>> sorted(s), s["n"], s["srcc"], s["hor"]
    (['hor', 'krcc', 'n', 'plcc', 'plcc_logistic', 'srcc'], 4, 1.0, 0.0)
    """
    p, m = _pair(pred, mos)
    return {
        "plcc": _correlation("plcc", p, m)[2],
        "plcc_logistic": plcc_logistic(p, m),
        "srcc": _correlation("srcc", p, m)[2],
        "krcc": _correlation("krcc", p, m)[2],
        "hor": hor(p, m, **hor_kwargs),
        "n": int(p.size),
    }
