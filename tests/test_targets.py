"""MOS -> rating word (equal-width bins over [1, 5]) and soft targets whose expectation is the MOS."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reward.rewards.scoring import LEVEL_VALUES, LEVEL_WORDS
from training.targets import bin_edges, mos_to_level, mos_to_word, soft_target, two_point_target

LEVELS = np.arange(1.0, 6.0)


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
