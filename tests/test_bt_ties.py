"""Bradley–Terry ties under each tie model, against hand-computed maximum-likelihood fits.

One dimension whose difference is 1 in every pair; labels a, a, tie, b. The maximum-likelihood weight and the
log-likelihood follow from the counts by hand:

- zero (eq. 2 literally, a tie is y = 0): y = 1, 1, 0, 0, so sigmoid(w) = 1/2, w = 0, ll = 4 log 1/2.
- half (a tie is y = 1/2): sigmoid(w) = mean y = 5/8, w = log 5/3, ll = 2.5 log 5/8 + 1.5 log 3/8.
- drop (ties left out): y = 1, 1, 0, sigmoid(w) = 2/3, w = log 2, ll = 2 log 2/3 + log 1/3.
- davidson: P(A), P(B), P(tie) = 1/2, 1/4, 1/4 at the optimum: e^w = P(A)/P(B) = 2, ν e^{w/2} = P(tie)/P(B) = 1,
  so w = log 2, ν = 2^{-1/2}, ll = 2 log 1/2 + 2 log 1/4.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fusion.bradley_terry import TIE_MODELS, FitOptions, fit_bradley_terry

X_A = np.array([[1.0], [1.0], [1.0], [1.0]])
X_B = np.zeros((4, 1))
LABELS = ["a", "a", "tie", "b"]

EXPECTED = {  # tie model: (w, nu, log-likelihood)
    "zero": (0.0, 0.0, 4 * math.log(0.5)),
    "half": (math.log(5 / 3), 0.0, 2.5 * math.log(5 / 8) + 1.5 * math.log(3 / 8)),
    "drop": (math.log(2), 0.0, 2 * math.log(2 / 3) + math.log(1 / 3)),
    "davidson": (math.log(2), 2**-0.5, 2 * math.log(0.5) + 2 * math.log(0.25)),
}


@pytest.mark.parametrize("tie_model", sorted(EXPECTED))
def test_each_tie_model_fits_the_hand_computed_maximum_likelihood(tie_model: str) -> None:
    fit = fit_bradley_terry(X_A, X_B, LABELS, tie_model=tie_model, l2=0.0)
    w, nu, ll = EXPECTED[tie_model]
    assert fit.weights[0] == pytest.approx(w, abs=1e-5)
    assert fit.nu == pytest.approx(nu, abs=1e-5)
    assert fit.log_likelihood == pytest.approx(ll, abs=1e-8)
    assert fit.log_likelihood_of(X_A, X_B, LABELS) == pytest.approx(ll, abs=1e-8)


def test_the_literal_reading_counts_a_tie_as_a_loss_of_a() -> None:
    """Under zero a tie weighs like a win of B: swapping the tie for 'b' gives the same fit."""
    tie = fit_bradley_terry(X_A, X_B, LABELS, tie_model="zero", l2=0.0)
    as_b = fit_bradley_terry(X_A, X_B, ["a", "a", "b", "b"], tie_model="zero", l2=0.0)
    assert tie.weights[0] == pytest.approx(as_b.weights[0], abs=1e-8)
    assert tie.log_likelihood == pytest.approx(as_b.log_likelihood, abs=1e-10)


def test_drop_with_nothing_but_ties_keeps_the_weights_at_zero() -> None:
    fit = fit_bradley_terry(X_A, X_B, ["tie"] * 4, tie_model="drop", l2=0.0)
    assert fit.weights.tolist() == [0.0] and fit.log_likelihood == 0.0


def test_davidson_stays_the_default_and_all_four_models_are_offered() -> None:
    assert FitOptions().tie_model == "davidson"
    assert set(TIE_MODELS) == {"davidson", "zero", "half", "drop"}
    with pytest.raises(ValueError, match="tie_model='third'"):
        FitOptions(tie_model="third")
