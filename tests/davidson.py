"""Pairs drawn from the Davidson model with known weights (tests only): each outcome's probability is the
exponential of the library's per-pair log-likelihood (:func:`fusion.bradley_terry.pair_log_likelihood`)."""

from __future__ import annotations

import numpy as np

from fusion.bradley_terry import LABEL_A, LABEL_B, LABEL_TIE, pair_log_likelihood


def outcome_probabilities(s: np.ndarray, nu: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(P(A), P(B), P(tie))`` for score differences ``s = S_A - S_B``; ``nu = 0``: no ties, ``P(A) = sigmoid(s)``."""
    s = np.asarray(s, dtype=np.float64)

    def p(label: int) -> np.ndarray:
        return np.exp(pair_log_likelihood(s, np.full(s.shape, label), "davidson", nu))

    return p(LABEL_A), p(LABEL_B), p(LABEL_TIE) if nu > 0 else np.zeros_like(s)


def simulate(n: int, w: np.ndarray, nu: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs of images with uniform [1, 5] dimension scores, labels drawn from the Davidson model (BT if nu=0)."""
    rng = np.random.default_rng(seed)
    x_a, x_b = rng.uniform(1, 5, (n, len(w))), rng.uniform(1, 5, (n, len(w)))
    p_a, p_b, _ = outcome_probabilities((x_a - x_b) @ w, nu)
    u = rng.random(n)
    return x_a, x_b, np.where(u < p_a, LABEL_A, np.where(u < p_a + p_b, LABEL_B, LABEL_TIE))
