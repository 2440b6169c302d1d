"""Bradley–Terry fusion: the model, its uncertainty and comparison, and the weights file."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
import torch
from davidson import outcome_probabilities, simulate
from scipy.optimize import check_grad

from fusion.bradley_terry import (
    LABEL_A,
    LABEL_B,
    LABEL_TIE,
    BTFit,
    FitOptions,
    _bt_objective,
    _davidson_objective,
    fit_bradley_terry,
    pairwise_accuracy,
)
from fusion.uncertainty import bootstrap_intervals, heldout_comparison, heldout_split
from reward.data.labels import label_codes
from reward.rewards.fusion_weights import WEIGHTS_FILENAME, FusionWeights, load_weights, save_weights

TRUE_W = np.array([1.2, 0.8, 0.5, 0.2])


def direction(w: np.ndarray) -> np.ndarray:
    return w / np.linalg.norm(w)


# ------------------------------------------------------------------------------------------------ model


@pytest.mark.parametrize("nu", [0.0, 0.5], ids=["bradley-terry", "davidson-ties"])
def test_recovers_known_weights_from_5000_simulated_pairs(nu):
    x_a, x_b, labels = simulate(5000, TRUE_W, nu, seed=1)
    fit = fit_bradley_terry(x_a, x_b, labels, l2=0.0)
    assert fit.converged
    assert np.max(np.abs(direction(fit.weights) - direction(TRUE_W))) < 0.05
    assert np.max(np.abs(fit.weights - TRUE_W)) < 0.15  # the scale is identified too
    assert fit.nu == pytest.approx(nu, abs=0.1)


def _irls_logistic_no_intercept(dx: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Reference: unregularised logistic regression of y on dx without intercept, by Newton/IRLS."""
    w = np.zeros(dx.shape[1])
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-dx @ w))
        step = np.linalg.solve(dx.T @ (dx * (p * (1 - p))[:, None]), dx.T @ (y - p))
        w += step
        if np.max(np.abs(step)) < 1e-13:
            break
    return w


@pytest.mark.parametrize("tie_model", ["davidson", "half"])
def test_tie_free_fit_equals_logistic_regression_without_intercept(tie_model):
    x_a, x_b, labels = simulate(1500, np.array([1.0, -0.4, 0.3]), 0.0, seed=2)
    reference = _irls_logistic_no_intercept(x_a - x_b, (labels == LABEL_A).astype(float))
    fit = fit_bradley_terry(x_a, x_b, labels, tie_model=tie_model, l2=0.0)
    np.testing.assert_allclose(fit.weights, reference, atol=1e-4, rtol=0)
    assert fit.nu == 0.0


def test_davidson_probabilities_match_hand_computed_example():
    # w = (1, 0.5): S_A = 3 + 1 = 4, S_B = 2 + 1 = 3; π = e^S; ν = 0.5; √(πA πB) = e^3.5.
    # P(A) = e^4 / (e^4 + e^3 + 0.5 e^3.5) = 54.598 / 91.241 = 0.598392; P(B) = 20.086 / 91.241 = 0.220136.
    fit = BTFit(np.array([1.0, 0.5]), 0.5, ("layout", "lighting"), FitOptions(), 0, 0, 0.0, True, 0)
    s = fit.score(np.array([[3.0, 2.0]])) - fit.score(np.array([[2.0, 2.0]]))
    p_a, p_b, p_tie = outcome_probabilities(s, fit.nu)
    assert p_a[0] == pytest.approx(0.598392, abs=1e-6)
    assert p_b[0] == pytest.approx(0.220136, abs=1e-6)
    assert p_tie[0] == pytest.approx(0.181472, abs=1e-6)
    assert fit.score(np.array([[3.0, 2.0]]))[0] == pytest.approx(4.0)


def test_without_ties_the_model_is_the_sigmoid_of_the_score_difference():
    s = np.array([-30.0, -2.0, 0.0, 0.7, 40.0])
    p_a, p_b, p_tie = outcome_probabilities(s, 0.0)
    np.testing.assert_allclose(p_a, 1.0 / (1.0 + np.exp(-s)), rtol=1e-12)
    np.testing.assert_allclose(p_a + p_b, 1.0)
    assert np.all(p_tie == 0.0)


@pytest.mark.parametrize("with_counts", [False, True])
def test_analytic_gradients_match_finite_differences(with_counts):
    x_a, x_b, codes = simulate(300, np.array([0.6, -0.3, 0.2]), 0.8, seed=3)
    dx = x_a - x_b
    c = np.random.default_rng(0).integers(0, 3, 300).astype(float) if with_counts else None
    n_total = float(300 if c is None else c.sum())
    l2 = np.array([0.1, 0.01, 0.0])
    sgn, tie, y = np.choose(codes, [1.0, -1.0, 0.0]), (codes == LABEL_TIE) * 1.0, np.choose(codes, [1.0, 0.0, 0.5])
    point = np.array([0.4, -0.2, 0.1, -0.3])

    def dav(p):
        return _davidson_objective(p, dx, sgn, tie, c, n_total, l2)

    def bt(p):
        return _bt_objective(p, dx, y, c, n_total, l2)

    assert check_grad(lambda p: dav(p)[0], lambda p: dav(p)[1], point) < 1e-6
    assert check_grad(lambda p: bt(p)[0], lambda p: bt(p)[1], point[:3]) < 1e-6


def test_half_tie_model_counts_a_tie_as_half_a_win_for_each_side():
    x_a, x_b, codes = simulate(600, np.array([0.7, 0.2]), 1.0, seed=4)
    ties = codes == LABEL_TIE
    half = fit_bradley_terry(x_a, x_b, codes, tie_model="half", l2=1e-3)
    # Same objective: each tie becomes an A-win and a B-win of weight 1/2 each.
    xa2, xb2 = np.vstack([x_a, x_a[ties]]), np.vstack([x_b, x_b[ties]])
    codes2 = np.concatenate([np.where(ties, LABEL_A, codes), np.full(ties.sum(), LABEL_B)])
    weight = np.concatenate([np.where(ties, 0.5, 1.0), np.full(ties.sum(), 0.5)])
    expanded = fit_bradley_terry(xa2, xb2, codes2, sample_weight=weight, l2=1e-3)
    assert ties.sum() > 50
    np.testing.assert_allclose(half.weights, expanded.weights, atol=1e-6)
    assert half.nu == 0.0 and np.all(outcome_probabilities(half.score(x_a) - half.score(x_b), half.nu)[2] == 0.0)


def test_log_likelihood_is_the_sum_of_log_predicted_outcome_probabilities():
    x_a, x_b, codes = simulate(400, np.array([0.5, 0.5]), 0.6, seed=5)
    fit = fit_bradley_terry(x_a, x_b, codes)
    probs = np.stack(outcome_probabilities(fit.score(x_a) - fit.score(x_b), fit.nu), axis=1)
    expected = np.sum(np.log(probs[np.arange(400), codes]))
    assert fit.log_likelihood == pytest.approx(expected, rel=1e-10)


def test_pairwise_accuracy_counts_non_tie_pairs_and_halves_exact_ties_of_score():
    s = np.array([2.0, -1.0, 0.0, 5.0, -3.0])
    codes = np.array([LABEL_A, LABEL_A, LABEL_B, LABEL_TIE, LABEL_B])
    assert pairwise_accuracy(s, codes) == pytest.approx((1 + 0 + 0.5 + 1) / 4)
    assert math.isnan(pairwise_accuracy(s[:1], np.array([LABEL_TIE])))


def test_labels_are_case_insensitive_and_unknown_ones_are_rejected():
    assert label_codes(["A", " b", "Tie"]).tolist() == [LABEL_A, LABEL_B, LABEL_TIE]
    with pytest.raises(ValueError, match="'draw' at index 1"):
        label_codes(["a", "draw"])


def test_nonneg_clamps_a_harmful_dimension_at_zero():
    w = np.array([1.0, -0.6, 0.4])
    x_a, x_b, codes = simulate(2000, w, 0.3, seed=6)
    free = fit_bradley_terry(x_a, x_b, codes)
    clamped = fit_bradley_terry(x_a, x_b, codes, nonneg=True)
    assert free.weights[1] < -0.4
    assert clamped.weights[1] == 0.0 and np.all(clamped.weights >= 0) and clamped.weights[0] > 0.5


def test_l2_shrinks_the_weights_and_fits_are_deterministic():
    x_a, x_b, codes = simulate(800, TRUE_W, 0.4, seed=7)
    norms = [np.linalg.norm(fit_bradley_terry(x_a, x_b, codes, l2=l2).weights) for l2 in (0.0, 0.01, 0.1, 1.0)]
    assert all(a > b for a, b in zip(norms, norms[1:], strict=False))
    again = [fit_bradley_terry(x_a, x_b, codes, l2=0.01) for _ in range(2)]
    assert np.array_equal(again[0].weights, again[1].weights) and again[0].nu == again[1].nu


def test_bad_arrays_are_rejected_with_a_clear_error():
    x = np.ones((3, 2))
    with pytest.raises(ValueError, match="shape"):
        fit_bradley_terry(x, np.ones((3, 3)), ["a", "b", "a"])
    with pytest.raises(ValueError, match="one label per pair"):
        fit_bradley_terry(x, x, ["a", "b"])
    bad = x.copy()
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="pair 1, dimension 'x1'"):
        fit_bradley_terry(bad, x, ["a", "b", "a"])
    with pytest.raises(ValueError, match="tie_model='bt'"):
        fit_bradley_terry(x, x, ["a", "b", "a"], tie_model="bt")


# ------------------------------------------------------------------------------------------- degenerate


def _degenerate(case: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x_a, x_b, codes = simulate(500, np.array([1.0, 0.5, -0.3]), 0.3, seed=8)
    if case == "all ties":
        codes = np.full_like(codes, LABEL_TIE)
    elif case == "constant dimension":
        x_a[:, 1] = x_b[:, 1] = 3.0
    elif case == "separable":
        codes = np.where((x_a - x_b) @ np.array([1.0, 0.5, -0.3]) > 0, LABEL_A, LABEL_B)
    elif case == "identical dimensions":
        x_a[:, 2], x_b[:, 2] = x_a[:, 0], x_b[:, 0]
    return x_a, x_b, codes


@pytest.mark.parametrize(
    ("case", "warning"),
    [
        ("all ties", "all 500 pairs are ties"),
        ("constant dimension", "dimension 'x1' does not differ"),
        ("separable", "perfectly separable"),
        ("identical dimensions", "dimensions 'x0' and 'x2' are identical"),
    ],
)
@pytest.mark.parametrize("tie_model", ["davidson", "half"])
@pytest.mark.parametrize("l2", [0.0, 1e-4])
def test_degenerate_data_gives_finite_weights_and_a_warning(case, warning, tie_model, l2, caplog):
    x_a, x_b, codes = _degenerate(case)
    with caplog.at_level(logging.WARNING, logger="fusion"):
        fit = fit_bradley_terry(x_a, x_b, codes, tie_model=tie_model, l2=l2)
    assert np.all(np.isfinite(fit.weights)) and math.isfinite(fit.nu) and math.isfinite(fit.log_likelihood)
    assert np.all(np.abs(fit.weights) <= fit.options.max_abs_weight)
    assert any(warning in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert any(warning in w for w in fit.warnings)
    if case == "all ties":
        assert np.all(fit.weights == 0.0)
    elif case == "constant dimension":
        assert fit.weights[1] == 0.0
    elif case == "identical dimensions":
        assert fit.weights[0] == pytest.approx(fit.weights[2], rel=1e-3)  # the penalty (or symmetry) splits it


def test_clean_data_logs_no_warning(caplog):
    x_a, x_b, codes = simulate(500, TRUE_W, 0.3, seed=9)
    with caplog.at_level(logging.WARNING, logger="fusion"):
        fit = fit_bradley_terry(x_a, x_b, codes)
    assert fit.warnings == () and not caplog.records


# ------------------------------------------------------------------------------ uncertainty, comparison


def test_bootstrap_intervals_cover_the_true_weights_in_most_simulated_runs():
    w = np.array([1.0, 0.5, -0.5])
    covered = []
    for run in range(8):
        x_a, x_b, codes = simulate(400, w, 0.3, seed=100 + run)
        low, high, _ = bootstrap_intervals(
            x_a, x_b, codes, options=FitOptions(l2=0.0), n_resamples=30, level=0.9, seed=run
        )
        covered.extend((low <= w) & (w <= high))
    # nominal 90% (measured: 23 of 24); intervals a fifth as wide cover 7 of 24, zero-width ones none
    assert np.mean(covered) >= 0.75


def test_bootstrap_intervals_are_reproducible_from_the_seed():
    x_a, x_b, codes = simulate(300, TRUE_W, 0.3, seed=10)
    first = bootstrap_intervals(x_a, x_b, codes, n_resamples=20, seed=3)
    second = bootstrap_intervals(x_a, x_b, codes, n_resamples=20, seed=3)
    other = bootstrap_intervals(x_a, x_b, codes, n_resamples=20, seed=4)
    assert np.array_equal(first[0], second[0]) and np.array_equal(first[1], second[1])
    assert not np.array_equal(first[2], other[2])
    assert np.all(first[0] < first[1])


def test_heldout_split_is_seeded_disjoint_and_sized():
    train, test = heldout_split(103, 0.2, seed=5)
    assert len(test) == 21 and len(train) == 82
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(103))
    assert np.array_equal(test, heldout_split(103, 0.2, seed=5)[1])
    assert not np.array_equal(test, heldout_split(103, 0.2, seed=6)[1])


def test_heldout_comparison_ranks_fused_weights_above_uniform_and_single_dimensions():
    w = np.array([1.5, 0.0, 0.8])
    x_a, x_b, codes = simulate(3000, w, 0.3, seed=11)
    rows = {r.name: r for r in heldout_comparison(x_a, x_b, codes, dimensions=["layout", "harmony", "lighting"])}
    assert list(rows) == ["bradley-terry", "uniform", "layout", "harmony", "lighting"]
    assert all(r.n_heldout == 600 for r in rows.values())
    best = rows["bradley-terry"]
    for name in ("uniform", "layout", "harmony", "lighting"):
        assert best.log_likelihood > rows[name].log_likelihood
        assert best.accuracy >= rows[name].accuracy
    assert rows["harmony"].accuracy == pytest.approx(0.5, abs=0.06)  # a useless dimension is at chance
    assert rows["layout"].accuracy > rows["lighting"].accuracy > rows["harmony"].accuracy


# ---------------------------------------------------------------------------------------- weights file


def _weights() -> FusionWeights:
    return FusionWeights(
        dimensions=("layout", "harmony"),
        weights=(0.9, 0.3),
        ci_low=(0.7, 0.1),
        ci_high=(1.1, 0.5),
        meta={"n_pairs": 750, "tie_model": "davidson", "heldout_accuracy": np.float64(0.7), "nan": float("nan")},
    )


def test_weights_file_round_trip(tmp_path):
    path = save_weights(tmp_path / "sub" / WEIGHTS_FILENAME, _weights())
    raw = json.loads(path.read_text())
    assert list(raw) == ["dimensions", "weights", "ci_low", "ci_high", "meta"]
    loaded = load_weights(path)
    assert loaded.dimensions == ("layout", "harmony") and loaded.weights == (0.9, 0.3)
    assert loaded.ci_low == (0.7, 0.1) and loaded.ci_high == (1.1, 0.5)
    assert loaded.meta == {"n_pairs": 750, "tie_model": "davidson", "heldout_accuracy": 0.7, "nan": None}
    assert load_weights(path.parent) == loaded  # a scorer directory
    assert [p.name for p in path.parent.iterdir()] == [WEIGHTS_FILENAME]  # no temporary file left


def test_save_weights_is_atomic_when_the_write_fails(tmp_path, monkeypatch):
    path = save_weights(tmp_path / "w.json", _weights())
    before = path.read_text()

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr("reward.rewards.fusion_weights.os.replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        save_weights(path, FusionWeights(("layout",), (5.0,)))
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["w.json"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"dimensions": ["a"], "weights": [1.0],\n "meta": {', r"w\.json:2: not valid JSON"),
        ('{"weights": [1.0]}', r"missing key\(s\) \['dimensions'\]"),
        ('{"dimensions": ["a", "b"], "weights": [1.0]}', r"'weights' has 1 entries for 2 dimensions"),
        ('{"dimensions": ["a"], "weights": ["x"]}', "'weights' must be a list of finite numbers"),
        ('{"dimensions": ["a"], "weights": [1], "scale": 2}', r"unknown key\(s\) \['scale'\]"),
        ('{"dimensions": ["a", "a"], "weights": [1, 2]}', "duplicates"),
        ('{"dimensions": ["a"], "weights": [1], "ci_low": [2], "ci_high": [1]}', "above their 'ci_high'"),
        ('{"dimensions": ["a"], "weights": [1], "ci_low": [0]}', "both be lists or both be null"),
        ("[1, 2]", "top level must be a JSON object"),
    ],
)
def test_load_weights_explains_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "w.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        load_weights(path)
    assert str(path) in str(info.value)


def test_load_weights_missing_file_says_how_to_make_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="perceptual-rewards fit"):
        load_weights(tmp_path / "nope.json")
    with pytest.raises(FileNotFoundError, match=WEIGHTS_FILENAME):
        load_weights(tmp_path)  # a scorer directory without weights


def test_fuse_works_on_numpy_arrays_and_torch_tensors():
    fw = FusionWeights(("layout", "lighting"), (0.75, -0.5))
    scores = {"layout": [4.0, 2.0, 1.0], "lighting": [2.0, 2.0, 5.0], "mos": [9.0, 9.0, 9.0]}
    expected = np.array([2.0, 0.5, -1.75])
    fused = fw.fuse({k: np.array(v) for k, v in scores.items()})
    assert isinstance(fused, np.ndarray)
    np.testing.assert_allclose(fused, expected)
    layout = torch.tensor(scores["layout"], dtype=torch.float32, requires_grad=True)
    fused_t = fw.fuse({"layout": layout, "lighting": np.array(scores["lighting"])})
    assert isinstance(fused_t, torch.Tensor) and fused_t.dtype == torch.float32
    np.testing.assert_allclose(fused_t.detach().numpy(), expected)
    fused_t.sum().backward()
    np.testing.assert_allclose(layout.grad.numpy(), 0.75)
    np.testing.assert_allclose(fw.fuse({"layout": torch.tensor([2, 4]), "lighting": torch.tensor([1, 1])}), [1.0, 2.5])


def test_fuse_names_missing_dimensions_and_shape_mismatches():
    fw = FusionWeights(("layout", "lighting"), (1.0, 1.0))
    with pytest.raises(ValueError, match=r"no scores for dimension\(s\) \['lighting'\]"):
        fw.fuse({"layout": np.ones(2)})
    with pytest.raises(ValueError, match="different shapes"):
        fw.fuse({"layout": np.ones(2), "lighting": np.ones(3)})
