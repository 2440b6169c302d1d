"""MOS -> rating word (equal-width bins over [1, 5]) and soft targets whose expectation is the MOS; the sources'
rules: Q-Align's bins of its released KonIQ files and DeQA-Score's soft label."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from reward.rewards.scoring import LEVEL_VALUES, LEVEL_WORDS
from training.sft_labels import (
    bin_edges,
    deqa_soft_label,
    mos_to_level,
    mos_to_word,
    range_word,
    soft_target,
    two_point_target,
)

LEVELS = np.arange(1.0, 6.0)
WORDS_WORST_FIRST = list(LEVEL_WORDS)[::-1]


def test_bins_are_five_equal_widths_of_0_8_with_closed_lower_edges():
    assert bin_edges() == (1.8, 2.6, 3.4, 4.2)
    assert [mos_to_word(v) for v in LEVEL_VALUES] == list(LEVEL_WORDS)  # each level's value falls in its own bin
    cases = {
        1.0: "bad",
        1.7999: "bad",
        1.8: "poor",
        2.5999: "poor",
        2.6: "fair",
        3.3999: "fair",
        3.4: "good",
        4.1999: "good",
        4.2: "excellent",
        5.0: "excellent",
    }
    assert {m: mos_to_word(m) for m in cases} == cases
    assert [mos_to_level(m) for m in (1.0, 2.0, 3.0, 4.0, 5.0)] == [1, 2, 3, 4, 5]


def test_other_scales_and_word_lists_use_the_same_rule():
    assert bin_edges(5, (0.0, 100.0)) == (20.0, 40.0, 60.0, 80.0)
    assert mos_to_word(60.0, scale=(0.0, 100.0)) == "good"
    assert mos_to_word(0.5, words=("high", "low"), scale=(0.0, 1.0)) == "high"
    assert mos_to_word(0.49, words=("high", "low"), scale=(0.0, 1.0)) == "low"


@pytest.mark.parametrize("bad", [0.99, 5.01, math.nan, math.inf])
def test_a_mos_off_the_scale_is_an_error(bad):
    with pytest.raises(ValueError, match="outside the scale"):
        mos_to_word(bad)
    with pytest.raises(ValueError, match="outside the scale"):
        soft_target(bad)


@pytest.mark.parametrize("std", [0.0, 0.05, 0.3, 0.5, 1.0, 2.0])
def test_soft_target_sums_to_one_and_its_expectation_is_the_mos(std):
    for mos in np.linspace(1.0, 5.0, 41):
        p = soft_target(float(mos), std)
        assert p.shape == (5,) and (p >= 0).all()
        assert p.sum() == pytest.approx(1.0, abs=1e-9)
        assert p @ LEVELS == pytest.approx(mos, abs=1e-6)


def test_soft_target_is_a_shifted_discretised_gaussian_of_the_given_std():
    # log p_k = -(k - c)^2 / (2 std^2) + const, so its second difference is -1 / std^2 everywhere
    for mos, std in ((3.0, 0.5), (4.8, 0.7), (1.3, 1.0)):
        p = soft_target(mos, std)
        assert np.diff(np.log(p), 2) == pytest.approx(np.full(3, -1 / std**2), rel=1e-6)
    assert soft_target(3.0, 0.5)[2] > 0.75  # centred on "fair"
    naive = np.exp(-((LEVELS - 4.8) ** 2) / (2 * 0.7**2))
    assert naive / naive.sum() @ LEVELS == pytest.approx(4.608, abs=1e-3)  # why the centre must move


def test_two_point_target_splits_between_the_neighbours():
    assert two_point_target(3.3).tolist() == pytest.approx([0, 0, 0.7, 0.3, 0])
    assert two_point_target(5.0).tolist() == [0, 0, 0, 0, 1]
    assert two_point_target(1.0).tolist() == [1, 0, 0, 0, 0]
    assert soft_target(2.25, 0.5, method="two-point").tolist() == pytest.approx([0, 0.75, 0.25, 0, 0])
    assert soft_target(4.0, 0.0).tolist() == [0, 0, 0, 1, 0]  # std 0: the two-point limit


def test_soft_target_rejects_unknown_methods_and_negative_std():
    with pytest.raises(ValueError, match="method"):
        soft_target(3.0, method="affine")
    with pytest.raises(ValueError, match="std"):
        soft_target(3.0, -0.1)


# ------------------------------------------------------------------------------------------------ the sources' rules

EXCERPT = Path(__file__).parent / "fixtures" / "koniq_labels"
QALIGN_RANGE = (6.68487394958, 85.35625)  # configs/recipe/qalign-koniq.yaml's data.level_range


def koniq_excerpt() -> list[dict[str, str]]:
    """40 KonIQ-10k rows with Q-Align's released words and DeQA's rule recomputed (tests/fixtures/koniq_labels)."""
    with (EXCERPT / "koniq_excerpt.tsv").open(newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def vote_mean(row: dict[str, str]) -> float:
    return sum(k * float(row[f"c{k}"]) for k in range(1, 6))


def deqa_by_hand(mos: float, sd: float, low: float, high: float, density: str = "pdf") -> np.ndarray:
    """DeQA-Score's soft label from its paper's and script's formulas, best level first: scipy's Gaussian, the
    2x2 system for alpha and beta solved by numpy, clipped, the two-neighbour split when s' < 0.2 or the mean is
    off by more than 0.1."""
    from scipy.stats import norm

    m, s = 1 + 4 * (mos - low) / (high - low), 4 * sd / (high - low)
    x = np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    p = norm.pdf(x, m, s) if density == "pdf" else norm.cdf(x + 0.5, m, s) - norm.cdf(x - 0.5, m, s)
    alpha, beta = np.linalg.solve([[p.sum(), 5.0], [p @ x, 15.0]], [1.0, m])
    q = np.maximum(alpha * p + beta, 0.0)
    if s < 0.2 or abs(q @ x - m) > 0.1:
        lower = min(int(np.floor(m)), 4)
        q = np.zeros(5)
        q[5 - lower], q[4 - lower] = 1 - (m - lower), m - lower
    return q


def test_qaligns_rule_gives_its_released_words_where_its_files_own_range_does_not():
    rows = [r for r in koniq_excerpt() if r["qalign_word"]]
    released = [r["qalign_word"] for r in rows]
    assert [range_word(float(r["MOS"]), *QALIGN_RANGE) for r in rows] == released
    step = (QALIGN_RANGE[1] - QALIGN_RANGE[0]) / 5  # the paper's rule by hand: m + (i-1)(M-m)/5 < s <= m + i(M-m)/5
    by_hand = [WORDS_WORST_FIRST[sum(float(r["MOS"]) > QALIGN_RANGE[0] + i * step for i in range(1, 5))] for r in rows]
    assert by_hand == released
    own = (min(float(r["MOS"]) for r in rows), 85.0608108108)  # the training file's own lowest and highest MOS
    assert sum(range_word(float(r["MOS"]), *own) != w for r, w in zip(rows, released, strict=True)) >= 10
    assert range_word(QALIGN_RANGE[0], *QALIGN_RANGE) == "bad" and range_word(85.35625, *QALIGN_RANGE) == "excellent"
    with pytest.raises(ValueError, match="outside the level range"):
        range_word(5.16025641026, *QALIGN_RANGE)


def test_deqa_label_is_its_released_entry():
    entry = json.loads((EXCERPT / "deqa_released_entry.json").read_text())["entry"]
    label = deqa_soft_label(entry["gt_score"], entry["std"], 1.09615384615385, 4.31)
    assert label.mos_norm == pytest.approx(entry["gt_score_norm"], rel=1e-12)
    assert label.std_norm == pytest.approx(entry["std_norm"], rel=1e-12)
    assert label.raw.tolist() == pytest.approx(entry["level_probs_org"], rel=1e-9, abs=1e-15)
    assert label.probs.tolist() == pytest.approx(entry["level_probs"], rel=1e-9, abs=1e-15)
    assert label.probs.sum() == pytest.approx(1.02589, abs=1e-5) and not label.fallback  # clipped, not renormalised


def test_deqa_labels_of_koniq_rows_follow_its_formula_and_the_recomputed_rule():
    rows = koniq_excerpt()
    means = [vote_mean(r) for r in rows]
    low, high = min(means), max(means)  # the excerpt holds KonIQ's lowest and highest vote mean
    assert (low, high) == pytest.approx((1.09615384615385, 4.31), abs=1e-11)
    fallbacks = 0
    for row, mean in zip(rows, means, strict=True):
        label = deqa_soft_label(mean, float(row["SD"]), low, high)
        recomputed = [float(row[f"p_{w}"]) for w in LEVEL_WORDS]
        assert label.probs == pytest.approx(deqa_by_hand(mean, float(row["SD"]), low, high), abs=1e-7), row
        assert label.probs == pytest.approx(recomputed, abs=1e-9), row["image_name"]
        assert label.fallback == (row["deqa_fallback"] == "1")
        assert range_word(mean, low, high) == row["deqa_word"]
        fallbacks += label.fallback
    assert fallbacks >= 3  # the excerpt holds rows of both branches


def test_deqa_cdf_and_small_std_branches_by_hand():
    for mos, sd in ((3.1, 0.3), (4.6, 0.25), (1.4, 0.9), (2.2, 0.6)):
        cdf = deqa_soft_label(mos, sd, 1.0, 5.0, density="cdf")
        assert cdf.probs == pytest.approx(deqa_by_hand(mos, sd, 1.0, 5.0, "cdf"), abs=1e-7)
    assert deqa_soft_label(3.0, 0.5, 1.0, 5.0).probs.tolist() == pytest.approx([0.2] * 5)  # m' = 3: alpha = 0
    narrow = deqa_soft_label(3.3, 0.15, 1.0, 5.0)  # s' = 0.15 < 0.2: the two neighbours of 3.3
    assert narrow.fallback and narrow.probs.tolist() == pytest.approx([0, 0.3, 0.7, 0, 0], abs=1e-7)  # best first
    with pytest.raises(ValueError, match="density"):
        deqa_soft_label(3.0, 0.5, 1.0, 5.0, density="gauss")
