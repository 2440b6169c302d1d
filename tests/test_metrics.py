"""Metrics against scipy and hand-computed numbers (arithmetic in the comments)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from scipy import stats

from reward.eval.metrics import (
    bootstrap_ci,
    hor,
    krcc,
    logistic_4,
    pairwise_accuracy,
    plcc,
    plcc_logistic,
    srcc,
    summarize,
)

PRED = np.array([0.3, 1.2, 2.5, 2.0, 4.1, 3.3, 4.8, 0.9, 3.9, 2.2])
MOS = np.array([1.1, 1.5, 2.9, 2.4, 4.6, 3.0, 4.4, 1.9, 3.7, 3.1])


def test_correlations_by_hand():
    # pred [1, 2, 3], mos [1, 3, 2]: deviations [-1, 0, 1], [-1, 1, 0] -> PLCC = 1 / sqrt(2 * 2) = 0.5
    assert plcc([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    # ranks equal the values -> SRCC = 0.5 as well
    assert srcc([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    # pairs (1,2):+ (1,3):+ (2,3):- -> (2 - 1) / 3
    assert krcc([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)


def test_correlations_match_scipy():
    assert plcc(PRED, MOS) == pytest.approx(stats.pearsonr(PRED, MOS)[0])
    assert srcc(PRED, MOS) == pytest.approx(stats.spearmanr(PRED, MOS)[0])
    assert krcc(PRED, MOS) == pytest.approx(stats.kendalltau(PRED, MOS)[0])


def test_correlations_accept_tensors_and_column_vectors():
    assert plcc(torch.tensor(PRED, dtype=torch.float32), MOS[:, None]) == pytest.approx(plcc(PRED, MOS), abs=1e-6)


@pytest.mark.parametrize("fn", [plcc, plcc_logistic, srcc, krcc])
def test_constant_input_gives_nan_with_a_warning(fn):
    with pytest.warns(RuntimeWarning, match="constant"):
        assert math.isnan(fn([3.0, 3.0, 3.0, 3.0, 3.0], [1.0, 2.0, 3.0, 4.0, 5.0]))
    with pytest.warns(RuntimeWarning, match="mos is constant"):
        assert math.isnan(fn([1.0, 2.0, 3.0, 4.0, 5.0], [2.0] * 5))


def test_single_item_gives_nan_with_a_warning():
    with pytest.warns(RuntimeWarning, match="at least 2"):
        assert math.isnan(plcc([1.0], [2.0]))


def test_mismatched_lengths_and_nan_are_rejected():
    with pytest.raises(ValueError, match="pred has 3 scores but mos has 2"):
        plcc([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="NaN or inf at index 1"):
        srcc([1, float("nan"), 3], [1, 2, 3])


def test_logistic_plcc_beats_raw_plcc_on_monotone_nonlinear_relation():
    x = np.linspace(0.0, 1.0, 40)
    mos = 1.0 + 4.0 / (1.0 + np.exp(-(x - 0.6) * 10.0)) + 0.02 * np.sin(7 * x)
    raw, fitted = plcc(x, mos), plcc_logistic(x, mos)
    assert fitted > raw + 0.01
    assert fitted == pytest.approx(1.0, abs=1e-2)


def test_logistic_plcc_keeps_the_sign_of_a_decreasing_relation():
    x = np.linspace(0.0, 1.0, 40)
    mos = 5.0 - 4.0 / (1.0 + np.exp(-(x - 0.5) * 10.0))
    assert plcc(x, mos) < 0
    assert plcc_logistic(x, mos) == pytest.approx(-1.0, abs=1e-2)


def test_logistic_plcc_falls_back_to_raw_with_a_warning_when_fit_impossible():
    # 3 points, 4 parameters: no fit -> raw PLCC 0.5
    with pytest.warns(RuntimeWarning, match="logistic fit failed"):
        assert plcc_logistic([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)


def test_logistic_4_formula_by_hand():
    # b1=5, b2=1, b3=0, b4=-2 (|b4| = 2): x=0 -> 4/2 + 1 = 3; x=2 ln 3 -> 4 / (1 + 1/3) + 1 = 4
    out = logistic_4(np.array([0.0, 2 * math.log(3.0)]), 5.0, 1.0, 0.0, -2.0)
    np.testing.assert_allclose(out, [3.0, 4.0])


def test_hor_hand_example_on_the_mos_scale():
    # low images (mos <= 3): indices 0, 1, 2, 3 -> predictions 4.5, 4.0, 3.9, 2.0 -> two are >= 4 -> 2/4
    pred = [4.5, 4.0, 3.9, 2.0, 5.0]
    mos = [1.0, 3.0, 2.5, 2.0, 4.5]
    assert hor(pred, mos) == pytest.approx(0.5)


def test_hor_maps_predictions_from_pred_range_first():
    # pred in [0, 1] -> 1 + 4 p: 0.75 -> 4.0 (counts, exactly at tau_high), 0.7 -> 3.8, 1.0 -> 5.0, 0.1 -> 1.4
    pred = [0.75, 0.7, 1.0, 0.1, 0.9]
    mos = [3.0, 1.0, 2.0, 2.9, 3.5]  # low: first four; overrides: 0.75 and 1.0 -> 2/4
    assert hor(pred, mos, pred_range=(0.0, 1.0)) == pytest.approx(0.5)
    # unmapped, every prediction would be < 4 on the MOS scale -> 0
    assert hor(pred, mos) == 0.0


def test_hor_custom_thresholds_and_mos_range():
    # mos on [0, 10], tau_low 5, tau_high 8; pred on [1, 5] -> 10 (p - 1) / 4: 4.2 -> 8.0, 3.0 -> 5.0
    assert hor([4.2, 3.0, 5.0], [5.0, 4.0, 9.0], tau_low=5.0, tau_high=8.0, mos_range=(0.0, 10.0)) == 0.5


def test_hor_without_low_images_is_nan_with_a_warning():
    with pytest.warns(RuntimeWarning, match="no image has mos <= tau_low"):
        assert math.isnan(hor([1.0, 5.0], [4.0, 5.0]))


def test_hor_rejects_empty_range():
    with pytest.raises(ValueError, match="low < high"):
        hor([1.0], [1.0], pred_range=(1.0, 1.0))


def test_pairwise_accuracy_excluding_ties():
    # (3>2, a) 1; (1<2, a) 0; (2=2, b) 0.5; (5>1, tie) excluded; (1<4, b) 1 -> 2.5 / 4
    labels = ["a", "a", "b", "tie", "B"]
    assert pairwise_accuracy([3, 1, 2, 5, 1], [2, 2, 2, 1, 4], labels) == pytest.approx(0.625)


def test_pairwise_accuracy_counting_ties_with_a_margin():
    # margin 0.5: (3 vs 2.8, a) close -> 0.5; (1 vs 2, b) 1; (2 vs 2.4, tie) close -> 1; (5 vs 1, tie) -> 0
    acc = pairwise_accuracy([3, 1, 2, 5], [2.8, 2, 2.4, 1], ["a", "b", "tie", "tie"], ties="margin", tie_margin=0.5)
    assert acc == pytest.approx(2.5 / 4)


def test_pairwise_accuracy_rejects_unknown_labels_and_options():
    with pytest.raises(ValueError, match="'left' at index 1"):
        pairwise_accuracy([1, 2], [2, 1], ["a", "left"])
    with pytest.raises(ValueError, match="ties must be"):
        pairwise_accuracy([1], [2], ["a"], ties="count")


def test_pairwise_accuracy_only_ties_is_nan_with_a_warning():
    with pytest.warns(RuntimeWarning, match="no pair"):
        assert math.isnan(pairwise_accuracy([1], [2], ["tie"]))


def test_bootstrap_ci_contains_estimate_and_is_reproducible():
    point = plcc(PRED, MOS)
    lo, hi = bootstrap_ci(plcc, PRED, MOS, n=300, seed=3)
    assert lo <= point <= hi
    assert lo < hi
    assert bootstrap_ci(plcc, PRED, MOS, n=300, seed=3) == (lo, hi)
    assert bootstrap_ci(plcc, PRED, MOS, n=300, seed=4) != (lo, hi)


def test_bootstrap_ci_narrower_at_lower_confidence_and_accepts_partial():
    lo95, hi95 = bootstrap_ci(srcc, PRED, MOS, n=300)
    lo50, hi50 = bootstrap_ci(srcc, PRED, MOS, n=300, alpha=0.5)
    assert lo95 <= lo50 <= hi50 <= hi95
    lo, hi = bootstrap_ci(functools.partial(hor, tau_low=3.0), PRED, MOS, n=100)
    assert 0.0 <= lo <= hi <= 1.0


def test_bootstrap_ci_rejects_mismatched_arrays():
    with pytest.raises(ValueError, match="same length"):
        bootstrap_ci(plcc, [1, 2, 3], [1, 2])


def test_summarize_has_all_keys_and_matches_the_single_metrics():
    s = summarize(PRED, MOS, tau_high=3.5)
    assert set(s) == {"plcc", "plcc_logistic", "srcc", "krcc", "hor", "n"}
    assert s["n"] == 10
    assert s["plcc"] == pytest.approx(plcc(PRED, MOS))
    assert s["srcc"] == pytest.approx(srcc(PRED, MOS))
    assert s["krcc"] == pytest.approx(krcc(PRED, MOS))
    assert s["hor"] == pytest.approx(hor(PRED, MOS, tau_high=3.5))


def test_summarize_constant_predictions_do_not_crash():
    with pytest.warns(RuntimeWarning):
        s = summarize([3.0] * 4, [1.0, 2.0, 3.0, 4.0])
    assert all(math.isnan(s[k]) for k in ("plcc", "plcc_logistic", "srcc", "krcc"))
    assert s["hor"] == 0.0  # low images mos 1, 2, 3 all predicted 3.0 < 4.0
