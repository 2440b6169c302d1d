"""The option log-prob primitive on tiny real-architecture models: plain, batched and shared-prefix paths agree."""

from __future__ import annotations

import pytest
import torch

from conftest import next_token_logprobs, random_images, word_id
from reward.testing import ANSWER_WORDS
from reward.vlm import OptionQuery, load_vlm
from reward.vlm.tokens import CandidateTokenError, resolve_candidates

QUERIES = [
    OptionQuery("Rate the quality of the image.", ("good", "poor"), "The quality of the image is"),
    OptionQuery(
        "How would you rate the lighting of this image?",
        ("excellent", "good", "fair", "poor", "bad"),
        "The spatial aesthetic lighting quality level of this image is",
    ),
    OptionQuery("Answer with the option's letter from the given choices directly.", ("A", "B", "C")),
]


def test_tiny_vocabulary_has_every_answer_word_as_one_token_in_context(tiny_vlm):
    for word in ANSWER_WORDS:
        ids = resolve_candidates(tiny_vlm.tokenizer, "The quality of the image is", [word])
        assert tiny_vlm.tokenizer.decode(ids) == " " + word
        ids = resolve_candidates(tiny_vlm.tokenizer, "<|im_start|>assistant\n", [word])
        assert tiny_vlm.tokenizer.decode(ids) == word


def test_multi_token_word_is_refused_with_alternatives(tiny_vlm):
    with pytest.raises(CandidateTokenError, match=r"' superb' after .* is not one token") as err:
        resolve_candidates(tiny_vlm.tokenizer, "The quality of the image is", ["good", "superb"])
    assert "choose another word" in str(err.value) or "alternatives" in str(err.value)


def test_word_that_only_exists_capitalised_gets_a_suggestion(tiny_vlm):
    # "MEDIUM" is not one token, but " Medium" and " medium" are: the error suggests them.
    with pytest.raises(CandidateTokenError, match=r"single-token alternatives: .*' medium'"):
        resolve_candidates(tiny_vlm.tokenizer, "The answer is", ["MEDIUM"])


def test_candidates_sharing_a_token_are_refused(tiny_vlm):
    with pytest.raises(CandidateTokenError, match="same token id"):
        resolve_candidates(tiny_vlm.tokenizer, "The quality of the image is", ["good", "good"])


def test_trailing_space_in_response_prefix_is_detected(tiny_vlm):
    # "is " + "good" tokenizes as "is" + " good": the word would change the context's own tokens.
    with pytest.raises(CandidateTokenError, match="changes the context"):
        resolve_candidates(tiny_vlm.tokenizer, "The quality of the image is ", ["good"], sep="")


def test_shared_prefix_path_equals_plain_path(tiny_vlm):
    images = [[im] for im in random_images(3, sizes=(56, 84))]
    plain = tiny_vlm.option_logprobs(images, QUERIES, reuse_prefix=False).logprobs
    cached = tiny_vlm.option_logprobs(images, QUERIES, reuse_prefix=True).logprobs
    assert plain.shape == (3, 3, 5)
    assert torch.isinf(plain[:, 0, 2:]).all() and torch.isfinite(plain[:, 1]).all()
    finite = torch.isfinite(plain)
    assert torch.allclose(plain[finite], cached[finite], atol=1e-4)
    # the images matter: different images give different answers (the test could fail)
    assert (plain[0] - plain[1])[finite[0]].abs().max() > 1e-3


def test_shared_prefix_with_three_images_per_group_equals_plain(tiny_vlm):
    a, b, c = random_images(3, seed=1, sizes=(56, 70))
    groups = [[a, b, c], [c, a, b]]
    plain = tiny_vlm.option_logprobs(groups, QUERIES[:2], reuse_prefix=False).logprobs
    cached = tiny_vlm.option_logprobs(groups, QUERIES[:2], reuse_prefix=True).logprobs
    finite = torch.isfinite(plain)
    assert torch.allclose(plain[finite], cached[finite], atol=1e-4)


def test_batched_equals_one_at_a_time(tiny_vlm):
    images = [[im] for im in random_images(5, seed=2, sizes=(56, 112))]
    batched = tiny_vlm.option_logprobs(images, QUERIES).logprobs
    single = torch.cat([tiny_vlm.option_logprobs([g], QUERIES).logprobs for g in images])
    finite = torch.isfinite(batched)
    assert torch.allclose(batched[finite], single[finite], atol=1e-4)


def test_per_group_queries_and_vocab_distribution(tiny_vlm):
    images = [[im] for im in random_images(2, seed=3)]
    result = tiny_vlm.option_logprobs(images, [[QUERIES[0]], [QUERIES[2]]], return_vocab=True)
    assert result.options == [[("good", "poor")], [("A", "B", "C")]]
    assert result.vocab is not None and result.vocab.shape[:2] == (2, 1)
    assert torch.allclose(result.vocab.exp().sum(-1), torch.ones(2, 1), atol=1e-4)
    good = tiny_vlm.candidate_ids(QUERIES[0])[0]
    assert result.logprobs[0, 0, 0] == pytest.approx(result.vocab[0, 0, good].item(), abs=1e-6)


def test_generate_is_deterministic_greedy_and_batched(tiny_vlm):
    images = [[im] for im in random_images(3, seed=5)]
    prompts = ["Describe the image.", "Expand the prompt.", "Describe the image."]
    batched = tiny_vlm.generate(images, prompts, max_new_tokens=6)
    single = [tiny_vlm.generate([g], [p], max_new_tokens=6)[0] for g, p in zip(images, prompts, strict=True)]
    assert batched == single
    assert all(isinstance(t, str) and t for t in batched)


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_vlm(tmp_path / "nope")


def test_text_only_queries_equal_a_direct_forward_pass(tiny_vlm):
    out = tiny_vlm.option_logprobs([[], []], [[QUERIES[0]], [QUERIES[1]]]).logprobs  # a different query per group
    for g, query in enumerate(QUERIES[:2]):
        oracle = next_token_logprobs(tiny_vlm, [], query.question, query.response_prefix)
        ids = [word_id(tiny_vlm.tokenizer, query.response_prefix, " " + w) for w in query.options]
        assert torch.allclose(out[g, 0, : len(ids)], oracle[ids], atol=1e-4)
    assert not torch.allclose(out[0, 0, :2], out[1, 0, :2])  # the two questions are answered differently
