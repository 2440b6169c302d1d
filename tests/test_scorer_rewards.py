"""The rewards of GRPO on the scorer (Q-Insight, VisualQuality-R1) against numbers computed by hand."""

from __future__ import annotations

import pytest

from reward.rewards.reasoning_iqa import from_prompt_scale, parse_score, to_prompt_scale
from training.scorer_rewards import degradation_reward, format_reward, ranking_reward, score_reward

# Phi(1) = 0.841345, Phi(-1) = 0.158655 (the normal CDF's tables)
PHI1 = 0.8413447460685429


def answers(*scores: str) -> list[list[dict[str, str]]]:
    """Conversational completions, as trl passes them for chat prompts."""
    return [[{"role": "assistant", "content": f"<think>x</think><answer>{s}</answer>"}] for s in scores]


def test_parse_score_reads_the_answer_and_fails_on_nan_inf_and_missing_tags():
    assert parse_score('<think>a</think><answer>{"rating": 3.25}</answer>') == 3.25
    assert parse_score("<answer> -1.5e0 </answer>") == -1.5
    for failed in (
        "4.2",
        "<answer>nan</answer>",
        "<answer>inf</answer>",
        "<answer>1e400</answer>",
        "<answer></answer>",
    ):
        assert parse_score(failed) is None, failed


def test_mos_scale_maps_onto_1_to_5_and_back():
    assert to_prompt_scale(0, (0, 100)) == 1.0 and to_prompt_scale(75, (0, 100)) == 4.0
    assert from_prompt_scale(4.0, (0, 100)) == 75.0


def test_q_insight_score_reward_is_one_within_the_threshold_only():
    # |3.30 - 3| = 0.30 < 0.35; |3.40 - 3| = 0.40; a failed parse earns 0; 2.70 on MOS 3: 0.30
    out = score_reward(0.35)(answers("3.30", "3.40", "oops", "2.70"), mos=[3.0, 3.0, 3.0, 3.0])
    assert out == [1.0, 0.0, 0.0, 1.0]


def test_format_reward_with_and_without_thinking():
    texts = [
        "<think>a\nb</think>\n<answer>3</answer>",
        "<answer>3</answer>",
        "<think>a</think>3",
        "x<answer>3</answer>",
    ]
    assert format_reward(think=True)(texts) == [1.0, 0.0, 0.0, 0.0]
    assert format_reward(think=False)(texts) == [0.0, 1.0, 0.0, 0.0]


def test_degradation_reward_names_the_distortion_and_skips_rows_without_one():
    out = degradation_reward(answers("Gaussian blur", "motion", "jpeg"), distortion=["blur", "blur", None])
    assert out == [1.0, 0.0, None]


def test_ranking_reward_by_hand_with_a_tie_and_a_failed_parse():
    # image a (MOS 4): answers 4, 2 -> mu 3, var 1; image b (MOS 2): 3 and a failure -> mu 3, var 0;
    # image c (MOS 4, tied with a): 3, 3 -> mu 3, var 0. fid(p*, p) = sqrt(p* p) + sqrt((1 - p*)(1 - p)).
    # a's 4: vs b (p* 1) p = Phi(1) -> sqrt(.841345) = .917248; vs c (p* .5) -> .648590 + .281654 = .930244
    # a's 2: p = Phi(-1): vs b sqrt(.158655) = .398315; vs c .930244
    # b's 3: vs a (p* 0) p = Phi(0 / 1) = .5 -> sqrt(.5); vs c p = Phi(0 / sqrt(gamma)) = .5 -> sqrt(.5)
    # c's 3: vs a (tie) p = .5 -> 1; vs b (p* 1) p = .5 -> sqrt(.5)
    out = ranking_reward(
        answers("4", "2", "3", "none", "3", "3"), mos=[4, 4, 2, 2, 4, 4], image_id=["a", "a", "b", "b", "c", "c"]
    )
    expected = [
        (0.917248 + 0.930244) / 2,
        (0.398315 + 0.930244) / 2,
        0.707107,
        0.0,
        (1 + 0.707107) / 2,
        (1 + 0.707107) / 2,
    ]
    assert out == pytest.approx(expected, abs=1e-5)
    assert PHI1**0.5 == pytest.approx(0.917248, abs=1e-6)


def test_ranking_reward_when_nothing_can_be_ranked():
    # a batch of one image: no pair -> None for parsed answers, 0 for a failed one
    assert ranking_reward(answers("3", "x"), mos=[3, 3], image_id=[0, 0]) == [None, 0.0]
    # every answer of the other image failed: it is no j -> None; its own answers 0
    assert ranking_reward(answers("3", "nan", "inf"), mos=[3, 2, 2], image_id=[0, 1, 1]) == [None, 0.0, 0.0]
