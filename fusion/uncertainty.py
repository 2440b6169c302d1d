"""How sure are the fusion weights, and do they beat simpler fusions? Seeded bootstrap intervals (pairs resampled as
multinomial counts, each refit started from the full fit) and a held-out check against uniform weights and each
single dimension: a baseline is a direction ``u`` whose scale ``α`` in ``w = α·u`` (and ``ν``) is fitted on the same
training pairs with the same options, so log-likelihoods compare fairly."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fusion.bradley_terry import (
    BTFit,
    FitOptions,
    fit_bradley_terry,
    fit_differences,
    pair_log_likelihood,
    pairwise_accuracy,
)
from reward.data.labels import label_codes


@dataclass(frozen=True)
class ComparisonRow:
    """One fusion on held-out pairs: accuracy on the non-tie pairs and mean log-likelihood per pair."""

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
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Percentile bootstrap intervals of the weights, ``(low, high, the refits' weights [n_resamples, d])``: pairs
    resampled ``n_resamples`` times from ``default_rng(seed)``, each refit started from ``fit`` (the full fit, made
    here when not given; its warnings are the only ones logged)."""
    if fit is None:
        fit = fit_bradley_terry(x_a, x_b, labels, options=options or FitOptions())
    options = fit.options
    dx = np.asarray(x_a, dtype=np.float64) - np.asarray(x_b, dtype=np.float64)
    codes = label_codes(labels)
    n = len(codes)
    rng = np.random.default_rng(seed)
    samples = np.empty((n_resamples, dx.shape[1]))
    for k in range(n_resamples):
        counts = np.bincount(rng.integers(0, n, size=n), minlength=n).astype(np.float64)
        samples[k] = fit_differences(dx, codes, options, sample_weight=counts, init=(fit.weights, fit.nu))[0]
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(samples, [alpha, 1.0 - alpha], axis=0)
    return low, high, samples


def heldout_split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic split of ``range(n)`` into ``(train, heldout)`` index arrays (both sorted)."""
    n_heldout = min(max(1, math.ceil(fraction * n)), n - 1)
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[n_heldout:]), np.sort(order[:n_heldout])


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
    """Held-out accuracy and mean log-likelihood of the Bradley–Terry fit (``"bradley-terry"``), uniform weights
    (``"uniform"``) and each single dimension (its name), all fitted on the same training pairs
    (:func:`heldout_split`; at least 2 pairs)."""
    options = options or FitOptions()
    dx = np.asarray(x_a, dtype=np.float64) - np.asarray(x_b, dtype=np.float64)
    codes = label_codes(labels)
    n, d = dx.shape
    names = list(dimensions) if dimensions is not None else [f"x{j}" for j in range(d)]
    train, test = heldout_split(n, fraction, seed)
    w, nu, _ = fit_differences(dx[train], codes[train], options)
    fits = [("bradley-terry", w, nu)]
    for name, u in [("uniform", np.ones(d))] + [(name, np.eye(d)[j]) for j, name in enumerate(names)]:
        alpha, nu, _ = fit_differences((dx @ u)[train, None], codes[train], options)  # the scale α along u
        fits.append((name, alpha[0] * u, nu))
    rows = []
    for name, w, nu in fits:
        s = dx[test] @ w
        ll = pair_log_likelihood(s, codes[test], options.tie_model, nu)
        rows.append(ComparisonRow(name, pairwise_accuracy(s, codes[test]), float(np.mean(ll)), len(test)))
    return rows
