"""The rewards of GRPO on the scorer (Q-Insight, VisualQuality-R1) against numbers computed by hand, and the answers
read as each release reads them."""

from __future__ import annotations

import pytest

from reward.rewards.reasoning_iqa import to_prompt_scale
from reward.rewards.reasoning_prompts import parse_score
from training.scorer_rewards import degradation_reward, format_reward, ranking_reward, score_reward

# Phi(1 / sqrt(2)) = 0.760250, Phi(-1 / sqrt(2)) = 0.239750 (the normal CDF's tables); EPS = 1e-6 in each square root
PHI_HALF_SQRT2 = 0.7602498839826293


def answers(*scores: str) -> list[list[dict[str, str]]]:
    """Conversational completions, as trl passes them for chat prompts."""
    return [[{"role": "assistant", "content": f"<think>x</think><answer>{s}</answer>"}] for s in scores]


def test_parse_score_reads_the_last_answer_and_fails_on_nan_inf_and_missing_tags():
    assert parse_score('<think>a</think><answer>{"rating": 3.25}</answer>') == 3.25
    assert parse_score("<answer> -1.5e0 </answer>") == -1.5
    assert parse_score("<answer>2</answer> on second thought <answer>4.5</answer>") == 4.5  # VisualQuality-R1: last
    for failed in (
        "4.2",
        "<answer>nan</answer>",
        "<answer>inf</answer>",
        "<answer>1e400</answer>",
        "<answer></answer>",
    ):
        assert parse_score(failed) is None, failed


def test_q_insight_answers_are_read_by_their_rating_key_in_the_first_answer():
    assert parse_score('<answer>\n{"rating": 3.45}\n</answer>', "q-insight") == 3.45
    assert parse_score('<answer>{"rating":2}</answer><answer>{"rating": 5}</answer>', "q-insight") == 2.0
    for failed in ("<answer>3.45</answer>", '<answer>{"score": 3}</answer>', '{"rating": 3}'):
        assert parse_score(failed, "q-insight") is None, failed


def test_mos_scale_maps_onto_1_to_5_and_back():
    assert to_prompt_scale(0, (0, 100)) == 1.0 and to_prompt_scale(75, (0, 100)) == 4.0
    assert to_prompt_scale(100, (0, 100)) == 5.0 and to_prompt_scale(3, (1, 5)) == 3.0


def test_q_insight_score_reward_is_one_within_the_threshold_only():
    # |3.30 - 3| = 0.30 < 0.35; |3.40 - 3| = 0.40; a failed parse earns 0; 2.70 on MOS 3: 0.30
    rated = [[{"role": "assistant", "content": f'<answer>{{"rating": {s}}}</answer>'}] for s in ("3.30", "3.40")]
    out = score_reward(0.35)([*rated, *answers("3.30")], mos=[3.0, 3.0, 3.0])
    assert out == [1.0, 0.0, 0.0]  # Q-Insight's prompt: a bare number is no rating
    out = score_reward(0.35, "visualquality-r1")(answers("3.30", "3.40", "oops", "2.70"), mos=[3.0] * 4)
    assert out == [1.0, 0.0, 0.0, 1.0]


def test_format_rewards_are_each_releases_own():
    texts = [
        "<think>a\nb</think>\n<answer>3</answer>",
        "<answer>3</answer>",
        "<think>a</think>3",
        "x<answer>3</answer>",
        " <think>a</think><answer>3</answer>",
    ]
    assert format_reward("visualquality-r1")(texts) == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert format_reward("visualquality-r1-fast")(texts) == [0.0, 1.0, 0.0, 0.0, 0.0]
    strict = [  # Q-Insight: newlines around the thinking, a JSON object alone on its lines in the answer
        '<think>\nsharp\n</think>\n<answer>\n{"rating": 4.1}\n</answer>',
        '<think>\nsharp\n</think>\n<answer>{"rating": 4.1}</answer>',
        "<think>\nsharp\n</think>\n<answer>\n4.1\n</answer>",
        '<think>sharp</think>\n<answer>\n{"rating": 4.1}\n</answer>',
        '<think>\nsharp\n</think>\n<answer>\n{"a": {"rating": 4.1}}\n</answer>',
    ]
    assert format_reward("q-insight")(strict) == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_degradation_reward_names_the_distortion_and_skips_rows_without_one():
    out = degradation_reward(answers("Gaussian blur", "motion", "jpeg"), distortion=["blur", "blur", None])
    assert out == [1.0, 0.0, None]


def test_ranking_reward_by_hand_with_a_tie_and_a_failed_parse():
    # image a (MOS 4): answers 4, 2 -> mu 3, unbiased var 2; image b (MOS 2): 3 and a failure -> mu 3, var 0 (one
    # answer); image c (MOS 4, tied with a): 3, 3 -> mu 3, var 0. fid(p*, p) = sqrt(p* p + e) + sqrt((1-p*)(1-p) + e).
    # a's 4: p = Phi(1 / sqrt(2)) = .760250; vs b (p* 1) sqrt(.760251) + .001 = .872924; vs c (p* .5) .962775
    # a's 2: p = Phi(-1 / sqrt(2)) = .239750; vs b sqrt(.239751) + .001 = .490644; vs c .962775
    # b's 3: vs a (p* 0) p = Phi(0) = .5 -> .001 + sqrt(.500001) = .708107; vs c the same
    # c's 3: vs a (tie) p = .5 -> 2 sqrt(.250001) = 1.000002; vs b (p* 1) .708107
    out = ranking_reward()(
        answers("4", "2", "3", "none", "3", "3"), mos=[4, 4, 2, 2, 4, 4], image_id=["a", "a", "b", "b", "c", "c"]
    )
    expected = [
        (0.872924 + 0.962775) / 2,
        (0.490644 + 0.962775) / 2,
        0.708107,
        0.0,
        (1.000002 + 0.708107) / 2,
        (1.000002 + 0.708107) / 2,
    ]
    assert out == pytest.approx(expected, abs=1e-5)
    assert (PHI_HALF_SQRT2 + 1e-6) ** 0.5 + 1e-3 == pytest.approx(0.872924, abs=1e-6)


def test_ranking_reward_when_nothing_can_be_ranked():
    # a batch of one image: no pair -> None for parsed answers, 0 for a failed one
    assert ranking_reward()(answers("3", "x"), mos=[3, 3], image_id=[0, 0]) == [None, 0.0]
    # every answer of the other image failed: it is no j -> None; its own answers 0
    assert ranking_reward()(answers("3", "nan", "inf"), mos=[3, 2, 2], image_id=[0, 1, 1]) == [None, 0.0, 0.0]
