"""How sure are the fusion weights, and do they beat simpler fusions? Bootstrap intervals and a held-out check.

- :func:`bootstrap_intervals`: percentile confidence intervals for each weight from pairs resampled with
  replacement (as multinomial counts, so each refit starts from the full fit and is cheap); seeded.
- :func:`heldout_comparison`: a seeded split into training and held-out pairs; the Bradley–Terry fit on the
  training pairs is compared, on the held-out pairs, with uniform weights and with each single dimension. A
  baseline is a fixed direction ``u`` (all ones, or one dimension) whose scale ``α`` in ``w = α·u`` (and the tie
  parameter) is fitted on the same training pairs with the same options, so log-likelihoods compare fairly.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x_a, x_b = rng.uniform(1, 5, (400, 2)), rng.uniform(1, 5, (400, 2))
>>> labels = np.where(rng.random(400) < 1 / (1 + np.exp(-(x_a - x_b) @ [1.0, 0.2])), "a", "b")
>>> ci = bootstrap_intervals(x_a, x_b, labels, n_resamples=50, seed=0)
>>> bool(np.all(ci.low < ci.high))
True
>>> rows = heldout_comparison(x_a, x_b, labels, dimensions=["layout", "lighting"], seed=0)
>>> [row.name for row in rows]
['bradley-terry', 'uniform', 'layout', 'lighting']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fusion.bradley_terry import (
    BTFit,
    FitOptions,
    encode_labels,
    fit_bradley_terry,
    fit_differences,
    pair_log_likelihood,
    pairwise_accuracy,
)

__all__ = ["BootstrapIntervals", "ComparisonRow", "bootstrap_intervals", "heldout_comparison", "heldout_split"]


@dataclass(frozen=True, eq=False)
class BootstrapIntervals:
    """Percentile intervals ``[low, high]`` at ``level`` for each weight, from ``n_resamples`` refits."""

    low: np.ndarray
    high: np.ndarray
    level: float
    n_resamples: int
    seed: int
    samples: np.ndarray  # [n_resamples, d] bootstrap weights


@dataclass(frozen=True)
class ComparisonRow:
    """One fusion evaluated on held-out pairs: accuracy on non-tie pairs and mean log-likelihood per pair."""

    name: str
    accuracy: float
    log_likelihood: float
    n_heldout: int


def bootstrap_intervals(
    x_a: np.ndarray,
    x_b: np.ndarray,
    labels: Sequence[str] | np.ndarray,
    *,
    options: FitOptions | None = None,
    n_resamples: int = 200,
    level: float = 0.95,
    seed: int = 0,
    fit: BTFit | None = None,
) -> BootstrapIntervals:
    """Percentile bootstrap intervals for the weights of :func:`~fusion.bradley_terry.fit_bradley_terry`.

    Pairs are resampled with replacement ``n_resamples`` times from ``numpy.random.default_rng(seed)``, so the
    same inputs and seed give the same intervals. Each refit starts from ``fit`` (the full-data fit, computed
    here when not given); degenerate-data warnings come from that fit only, not once per resample.
    """
    if n_resamples < 2:
        raise ValueError(f"n_resamples={n_resamples} is too small for an interval; use at least 2 (e.g. 200).")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level} must be in (0, 1), e.g. 0.95 for a 95% interval.")
    if fit is None:
        fit = fit_bradley_terry(x_a, x_b, labels, options=options or FitOptions())
    options = fit.options
    dx = np.asarray(x_a, dtype=np.float64) - np.asarray(x_b, dtype=np.float64)
    codes = encode_labels(labels)
    n = len(codes)
    rng = np.random.default_rng(seed)
    samples = np.empty((n_resamples, dx.shape[1]))
    for k in range(n_resamples):
        counts = np.bincount(rng.integers(0, n, size=n), minlength=n).astype(np.float64)
        samples[k] = fit_differences(dx, codes, options, sample_weight=counts, init=(fit.weights, fit.nu)).weights
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(samples, [alpha, 1.0 - alpha], axis=0)
    return BootstrapIntervals(low=low, high=high, level=level, n_resamples=n_resamples, seed=seed, samples=samples)


def heldout_split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic split of ``range(n)`` into ``(train, heldout)`` index arrays (both sorted).

    >>> [a.tolist() for a in heldout_split(5, 0.4, seed=0)]
    [[0, 1, 3], [2, 4]]
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"held-out fraction {fraction} must be in (0, 1), e.g. 0.2.")
    n_heldout = min(max(1, math.ceil(fraction * n)), n - 1)
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[n_heldout:]), np.sort(order[:n_heldout])


def _evaluate(name: str, w: np.ndarray, nu: float, dx: np.ndarray, codes: np.ndarray, tie_model: str) -> ComparisonRow:
    s = dx @ w
    ll = pair_log_likelihood(s, codes, tie_model, nu)
    return ComparisonRow(name, pairwise_accuracy(s, codes), float(np.mean(ll)), len(codes))


def heldout_comparison(
    x_a: np.ndarray,
    x_b: np.ndarray,
    labels: Sequence[str] | np.ndarray,
    *,
    dimensions: Sequence[str] | None = None,
    options: FitOptions | None = None,
    fraction: float = 0.2,
    seed: int = 0,
) -> list[ComparisonRow]:
    """Held-out accuracy and mean log-likelihood of: the full Bradley–Terry fit (row ``"bradley-terry"``),
    uniform weights (``"uniform"``) and each single dimension (its name), all fitted on the same training pairs.

    The split is :func:`heldout_split` with ``fraction`` and ``seed``. Needs at least 2 pairs.
    """
    options = options or FitOptions()
    dx = np.asarray(x_a, dtype=np.float64) - np.asarray(x_b, dtype=np.float64)
    codes = encode_labels(labels)
    n, d = dx.shape
    if n < 2:
        raise ValueError(f"A held-out comparison needs at least 2 pairs; got {n}.")
    names = list(dimensions) if dimensions is not None else [f"x{j}" for j in range(d)]
    train, test = heldout_split(n, fraction, seed)
    full = fit_differences(dx[train], codes[train], options)
    rows = [_evaluate("bradley-terry", full.weights, full.nu, dx[test], codes[test], options.tie_model)]
    directions = [("uniform", np.ones(d))] + [(name, np.eye(d)[j]) for j, name in enumerate(names)]
    for name, u in directions:
        proj = (dx @ u)[:, None]  # a 1-D fit of the scale α along u
        core = fit_differences(proj[train], codes[train], options)
        rows.append(_evaluate(name, core.weights[0] * u, core.nu, dx[test], codes[test], options.tie_model))
    return rows
