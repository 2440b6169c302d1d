"""Scoring rules against hand-computed numbers (arithmetic in the comments)."""

from __future__ import annotations

import math

import pytest
import torch

from reward.rewards.scoring import (
    LEVEL_VALUES,
    LEVEL_WORDS,
    expected_value,
    synonym_ensemble,
)


def test_a_sure_answer_scores_its_word_s_value_and_the_words_run_best_first():
    for k, value in enumerate(LEVEL_VALUES):
        one_hot = torch.full((1, len(LEVEL_WORDS)), -50.0)
        one_hot[0, k] = 50.0
        assert expected_value(one_hot).item() == pytest.approx(value)
    assert list(LEVEL_VALUES) == sorted(LEVEL_VALUES, reverse=True)  # best first, like the words


def test_expected_value_two_candidates_hand_computed():
    # logits [0, ln 3] -> p = [1/4, 3/4]; values [1, 2] -> 1*1/4 + 2*3/4 = 1.75
    out = expected_value(torch.tensor([[0.0, math.log(3.0)]]), [1.0, 2.0])
    assert out.dtype == torch.float32
    assert out.tolist() == pytest.approx([1.75])


def test_expected_value_default_level_values_hand_computed():
    # logits ln[1, 2, 1, 0+, 0+] -> p = [1/4, 1/2, 1/4, 0, 0]; EV = 5/4 + 4/2 + 3/4 = 4.0
    logits = torch.log(torch.tensor([[1.0, 2.0, 1.0, 1e-30, 1e-30]]))
    assert expected_value(logits).tolist() == pytest.approx([4.0], abs=1e-6)


def test_expected_value_same_for_logits_and_log_probs_and_bf16():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, -3.0], [0.0, 0.0, 0.0, 0.0, 9.0]])
    log_probs = torch.log_softmax(logits, dim=-1)
    torch.testing.assert_close(expected_value(logits), expected_value(log_probs))
    out_bf16 = expected_value(logits.to(torch.bfloat16))
    assert out_bf16.dtype == torch.float32
    torch.testing.assert_close(out_bf16, expected_value(logits), atol=2e-2, rtol=0)


def test_expected_value_temperature_sharpens():
    # logits [0, ln 3], T = 0.5 -> z/T = [0, 2 ln 3] -> p = [1/10, 9/10]; values [1, 2] -> 0.1 + 1.8 = 1.9
    out = expected_value(torch.tensor([[0.0, math.log(3.0)]]), [1.0, 2.0], temperature=0.5)
    assert out.tolist() == pytest.approx([1.9])


def test_expected_value_rejects_wrong_number_of_values():
    with pytest.raises(ValueError, match="one value per candidate"):
        expected_value(torch.zeros(2, 5), [1.0, 2.0])


def test_expected_value_rejects_nan():
    with pytest.raises(ValueError, match="NaN"):
        expected_value(torch.tensor([[0.0, float("nan")]]), [1.0, 2.0])


def eq_1(good: torch.Tensor, poor: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Q-Bench+ eq. 1 (one word a side) as the library computes it: the synonym ensemble of one word each."""
    return synonym_ensemble(good[:, None], poor[:, None], temperature)


def test_eq_1_hand_computed():
    # e^ln3 / (e^ln3 + e^0) = 3/4;  e^1 / (e^1 + e^1) = 1/2;  e^0 / (e^0 + e^ln4) = 1/5
    good = torch.tensor([math.log(3.0), 1.0, 0.0])
    poor = torch.tensor([0.0, 1.0, math.log(4.0)])
    assert eq_1(good, poor).tolist() == pytest.approx([0.75, 0.5, 0.2])


def test_eq_1_temperature():
    # T = 2: e^(ln9/2) / (e^(ln9/2) + 1) = 3 / 4
    assert eq_1(torch.tensor([math.log(9.0)]), torch.tensor([0.0]), 2.0).tolist() == pytest.approx([0.75])


def test_eq_1_is_stable_for_huge_logits():
    out = eq_1(torch.tensor([1e4, -1e4, 1e4]), torch.tensor([-1e4, 1e4, 1e4]))
    assert torch.isfinite(out).all()
    assert out.tolist() == pytest.approx([1.0, 0.0, 0.5])


def test_synonym_ensemble_sums_logits_inside_the_softmax():
    # P sums: 1 + 0.5 + 0.5 = 2; N sums: 0 + 1 + 0 = 1 -> e^2 / (e^2 + e^1) = 1 / (1 + e^-1) = 0.731059
    pos = torch.tensor([[1.0, 0.5, 0.5]])
    neg = torch.tensor([[0.0, 1.0, 0.0]])
    assert synonym_ensemble(pos, neg).tolist() == pytest.approx([1.0 / (1.0 + math.exp(-1.0))])
    # a mean (2/3 vs 1/3) would give 1 / (1 + e^(-1/3)) = 0.5826 instead: the rule is a sum
    assert synonym_ensemble(pos, neg).item() != pytest.approx(1.0 / (1.0 + math.exp(-1.0 / 3.0)))


def test_synonym_ensemble_unequal_set_sizes():
    # P = [ln 2] (sum ln 2), N = [0, 0] (sum 0) -> 2 / (2 + 1) = 2/3
    out = synonym_ensemble(torch.tensor([[math.log(2.0)]]), torch.tensor([[0.0, 0.0]]))
    assert out.tolist() == pytest.approx([2.0 / 3.0])


def test_non_positive_temperature_is_rejected():
    with pytest.raises(ValueError, match="temperature"):
        synonym_ensemble(torch.zeros(1, 1), torch.zeros(1, 1), 0.0)
