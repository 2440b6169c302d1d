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


# --- the order of a tied pair ---------------------------------------------------------------------------------------

RNG = np.random.default_rng(3)
PAIRS_A = RNG.uniform(1, 5, (14, 3)).round(2)  # 14 pairs, 3 dimensions; the 4 closest pairs are ties
PAIRS_B = RNG.uniform(1, 5, (14, 3)).round(2)
_S = (PAIRS_A - PAIRS_B) @ np.array([1.0, 0.5, -0.3])
TIES = np.sort(np.argsort(np.abs(_S))[:4])
PAIR_LABELS = ["tie" if i in TIES else ("a" if s > 0 else "b") for i, s in enumerate(_S)]


def _swapped(which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same pairs with A and B exchanged in the rows ``which`` (ties only: their label stays "tie")."""
    x_a, x_b = PAIRS_A.copy(), PAIRS_B.copy()
    x_a[which], x_b[which] = PAIRS_B[which], PAIRS_A[which]
    return x_a, x_b


def test_the_recipes_tie_model_does_not_depend_on_which_image_of_a_tied_pair_is_listed_first() -> None:
    from fusion.commands.fit import FusionSettings
    from reward.core.cli import compose

    recipe = compose("fit", ["+recipe=sa-iqa-bench-fusion"], schema=FusionSettings)
    listed = fit_bradley_terry(PAIRS_A, PAIRS_B, PAIR_LABELS, tie_model=recipe.tie_model, l2=recipe.l2)
    x_a, x_b = _swapped(TIES[:2])
    swapped = fit_bradley_terry(x_a, x_b, PAIR_LABELS, tie_model=recipe.tie_model, l2=recipe.l2)
    assert swapped.weights == pytest.approx(listed.weights, abs=1e-6)
    literal = [
        fit_bradley_terry(a, b, PAIR_LABELS, tie_model="zero", l2=recipe.l2).weights
        for a, b in ((PAIRS_A, PAIRS_B), (x_a, x_b))
    ]
    assert np.abs(literal[0] - literal[1]).max() > 0.5  # eq. 2 read literally moves with the order: the data can tell


def test_half_is_eq_2_averaged_over_both_orders_of_each_tied_pair() -> None:
    """Each tie listed both ways, each way weighing 1/2, under eq. 2's literal y = 0: the same fit as y = 1/2."""
    x_a = np.concatenate([PAIRS_A, PAIRS_B[TIES]])
    x_b = np.concatenate([PAIRS_B, PAIRS_A[TIES]])
    labels = PAIR_LABELS + ["tie"] * len(TIES)
    weight = np.array([0.5 if label == "tie" else 1.0 for label in labels])
    both_orders = fit_bradley_terry(x_a, x_b, labels, tie_model="zero", l2=0.0, sample_weight=weight)
    half = fit_bradley_terry(PAIRS_A, PAIRS_B, PAIR_LABELS, tie_model="half", l2=0.0)
    assert both_orders.weights == pytest.approx(half.weights, abs=1e-5)


def test_tie_model_zero_warns_with_the_number_of_ties(caplog) -> None:
    import logging

    with caplog.at_level(logging.WARNING, logger="fusion"):
        fit = fit_bradley_terry(PAIRS_A, PAIRS_B, PAIR_LABELS, tie_model="zero")
    said = [w for w in fit.warnings if "tie_model=zero" in w]
    assert len(said) == 1 and "4 ties" in said[0] and "listed first" in said[0]
    assert any(said[0] in r.getMessage() for r in caplog.records)
    clean = fit_bradley_terry(PAIRS_A, PAIRS_B, ["b" if x == "tie" else x for x in PAIR_LABELS], tie_model="zero")
    assert not [w for w in clean.warnings if "tie_model=zero" in w]  # no tie, nothing to say


def _hand_bradley_terry_of_ties(x_a: np.ndarray, x_b: np.ndarray, y: float, l2: float) -> np.ndarray:
    """Eq. 2's penalised mean negative log-likelihood written out, every pair a tie read as ``y``, minimised by
    scipy's BFGS (no bounds, no scaling, no analytic gradient): an independent fit."""
    from scipy.optimize import minimize

    dx = x_a - x_b

    def loss(w: np.ndarray) -> float:
        s = dx @ w
        return float(np.mean(np.logaddexp(0.0, s) - y * s) + 0.5 * l2 * w @ w)

    return minimize(loss, np.zeros(dx.shape[1]), method="BFGS", options={"gtol": 1e-10}).x


@pytest.mark.parametrize(("tie_model", "y"), [("zero", 0.0), ("half", 0.5)])
def test_the_all_ties_message_says_what_the_fit_did(tie_model: str, y: float) -> None:
    labels = ["tie"] * len(PAIRS_A)
    fit = fit_bradley_terry(PAIRS_A, PAIRS_B, labels, tie_model=tie_model, l2=1e-2)
    hand = _hand_bradley_terry_of_ties(PAIRS_A, PAIRS_B, y, 1e-2)
    assert fit.weights == pytest.approx(hand, abs=1e-4)
    (said,) = [w for w in fit.warnings if "are ties" in w]
    if np.abs(hand).max() > 0.05:  # zero: every tie is a win of b, so the weights make every a lose
        assert "stay at 0" not in said and str([round(float(w), 2) for w in hand]) in said
    else:  # half: the likelihood is highest where every pair is even, w = 0
        assert np.abs(hand).max() < 1e-6 and "stay at 0" in said
