"""qbench: the score is eq. 1 / eq. 2 of Q-Bench+ applied to the model's own logits."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import random_images
from reward import get_reward
from reward.vlm import OptionQuery


def test_score_is_softmax_of_good_vs_poor_from_the_full_vocabulary(tiny_vlm_path, tiny_vlm):
    r = get_reward("qbench", {"model": str(tiny_vlm_path)})
    images = random_images(3, seed=11)
    scores = r.score(images).scores
    q = OptionQuery("Rate the quality of the image.", ("good", "poor"), "The quality of the image is")
    res = tiny_vlm.option_logprobs([[im] for im in images], [q], return_vocab=True)
    good, poor = tiny_vlm.candidate_ids(q)
    vocab = res.vocab[:, 0]
    expected = [math.exp(v[good]) / (math.exp(v[good]) + math.exp(v[poor])) for v in vocab.tolist()]
    assert scores.tolist() == pytest.approx(expected, abs=1e-5)


def test_temperature_flattens_towards_one_half(tiny_vlm_path):
    images = random_images(4, seed=12)
    sharp = get_reward("qbench", {"model": str(tiny_vlm_path)}).score(images).scores
    flat = get_reward("qbench", {"model": str(tiny_vlm_path), "temperature": 100.0}).score(images).scores
    assert (flat - 0.5).abs().max() < (sharp - 0.5).abs().max()
    assert (flat - 0.5).abs().max() < 0.01


def test_synonym_ensemble_sums_the_three_words_per_side(tiny_vlm_path, tiny_vlm):
    images = random_images(2, seed=13)
    out = get_reward("qbench", {"model": str(tiny_vlm_path), "ensemble": True}).score(images).scores
    words = ("good", "high", "fine", "poor", "low", "bad")
    q = OptionQuery("Rate the quality of the image.", words, "The quality of the image is")
    lp = tiny_vlm.option_logprobs([[im] for im in images], [q]).logprobs[:, 0]
    expected = torch.sigmoid(lp[:, :3].sum(-1) - lp[:, 3:].sum(-1))
    assert torch.allclose(out, expected, atol=1e-5)


def test_unequal_synonym_sets_are_refused(tiny_vlm_path):
    with pytest.raises(ValueError, match="same number of words"):
        get_reward("qbench", {"model": str(tiny_vlm_path), "positive": ["good", "fine"], "negative": ["poor"]})


def test_multi_token_answer_word_fails_at_build_time(tiny_vlm_path):
    with pytest.raises(ValueError, match="not one token"):
        get_reward("qbench", {"model": str(tiny_vlm_path), "positive": ["marvellous"]})
