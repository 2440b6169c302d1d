"""``reward=chat-judge``: SA-IQA's App. B.2 prompt asked of a chat model behind an OpenAI-compatible server (the
loopback one here), its ``{"score": N}`` read; an answer that is not that JSON is a failed item, counted, never a
score."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from PIL import Image
from server_doubles import serve_scripted

from reward.commands.evaluate import EvaluateSettings
from reward.core.config import parse
from reward.core.errors import UserError
from reward.rewards.registry import get_reward

SAMPLES = Path(__file__).resolve().parents[1] / "reward" / "assets" / "samples"
LAYOUT_B2 = (  # App. B.2, Prompt 1 (Layout), as printed
    "You are an interior spatial aesthetics evaluation assistant. The input is an image of an interior space. Please "
    "evaluate the spatial aesthetic layout quality level of this image. The layout dimension describes the spatial "
    "distribution, positional relationships, and quantity of major elements within the space. Consider how the "
    "layout supports the overall visual order, maintains balance, and enhances the functional aesthetics of the "
    "image. Output only one score from [1,2,3,4,5], where a higher score indicates higher quality. Return in the "
    'format {"score": score}.'
)
SCORES = ['{"score": 5}', '{"score": 4}', '{"score": 3}', '{"score": 2}', '{"score": 1}']  # brightest first


def test_the_samples_are_scored_from_the_servers_json_answers(tmp_path):
    """The scripted server answers the i-th option of SCORES for an image of brightness 1 - i/4 (its top token)."""
    from reward.commands.evaluate import run as run_evaluate

    stats: dict = {}
    with serve_scripted(SCORES, stats=stats) as url:
        cfg = {"name": "chat-judge", "server": {"base_url": url}}
        judge = get_reward("chat-judge", cfg)
        assert judge.prompts["layout"] == LAYOUT_B2 and list(judge.prompts) == [
            "layout",
            "harmony",
            "lighting",
            "distortion",
        ]
        bright, dark = Image.new("RGB", (32, 32), (255, 255, 255)), Image.new("RGB", (32, 32), (0, 0, 0))
        out = judge.score([bright, dark])
        assert out.dimensions["lighting"].tolist() == [5.0, 1.0] and out.scores.tolist() == [5.0, 1.0]
        run_evaluate(
            parse(
                EvaluateSettings,
                {"reward": cfg, "data": str(SAMPLES / "ratings.jsonl"), "out": str(tmp_path / "e"), "bootstrap": 0},
            )
        )
    metrics = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert (
        metrics["meta"]["server"]["failed"] == 0 and stats["requests"] == 2 * 4 + 12 * 4
    )  # each image once per dimension
    scores = [json.loads(line) for line in (tmp_path / "e" / "scores.jsonl").open()]
    assert len(scores) == 12 and all(s["layout"] in (1.0, 2.0, 3.0, 4.0, 5.0) for s in scores)


def test_an_answer_that_is_not_score_json_is_a_counted_failure_never_a_score():
    with serve_scripted([*SCORES[:2], "It looks rather good to me."]) as url:
        judge = get_reward("chat-judge", {"server": {"base_url": url}, "dimensions": ["layout", "harmony"]})
        out = judge.score([Image.new("RGB", (32, 32), (255, 255, 255)), Image.new("RGB", (32, 32), (0, 0, 0))])
    assert out.dimensions["layout"][0] == 5.0 and math.isnan(out.dimensions["layout"][1])
    assert out.scores[0] == 5.0 and math.isnan(out.scores[1])  # an image with a failed dimension has no score
    stats = judge.backend.stats
    assert stats["failed"] == 2 and dict(stats["failed_reasons"]) == {"not_score_json": 2} and stats["answers"] == 2


def test_a_dimension_without_a_prompt_is_refused_and_own_prompts_are_taken():
    with serve_scripted(SCORES) as url:
        with pytest.raises(UserError, match=r"no prompt for \['clutter'\]; App. B.2 has"):
            get_reward("chat-judge", {"server": {"base_url": url}, "dimensions": ["clutter"]})
        own = {"clutter": 'Rate the clutter of this room 1-5. Return {"score": score}.'}
        judge = get_reward("chat-judge", {"server": {"base_url": url}, "dimensions": ["clutter"], "prompts": own})
        assert judge.score([Image.new("RGB", (32, 32), (128, 128, 128))]).dimensions["clutter"].tolist() == [3.0]


def test_an_answer_or_a_body_nested_100000_deep_is_a_failed_item_never_the_end_of_the_run():
    deep = "[" * 100_000 + "]" * 100_000  # json.loads raises RecursionError on it
    image = [Image.new("RGB", (32, 32), (255, 255, 255))]
    with serve_scripted([deep]) as url:  # the model's answer, as text in a well-formed completion
        judge = get_reward("chat-judge", {"server": {"base_url": url}, "dimensions": ["layout"]})
        assert math.isnan(judge.score(image).scores[0])
    assert dict(judge.backend.stats["failed_reasons"]) == {"not_score_json": 1}
    with serve_scripted(SCORES, fault="deep_json") as url:  # the HTTP body itself
        judge = get_reward("chat-judge", {"server": {"base_url": url}, "dimensions": ["layout", "harmony"]})
        assert torch.isnan(judge.score(image).scores).all()
    assert dict(judge.backend.stats["failed_reasons"]) == {"not_json": 2} and judge.backend.stats["answers"] == 0
