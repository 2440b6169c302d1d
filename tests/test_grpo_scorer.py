"""GRPO on the scorer (``training/grpo_scorer.py``): the recipes' plans, a tiny run's scorer folder and card, and the
folder read by ``reward=reasoning-iqa`` both ways."""

from __future__ import annotations

import json
import logging
import math
import re

import pytest
import torch

from reward.core.cli import compose
from reward.core.config import parse
from reward.core.errors import UserError
from reward.rewards.reasoning_prompts import PROMPTS
from training.commands.grpo_scorer import GrpoScorerSettings, run
from training.commands.grpo_scorer_plan import grpo_scorer_plan
from training.shared.plan import format_plan

TINY = [
    "data.train=synthetic",
    "data.test=synthetic",
    "data.test_rows=8",
    "data.synthetic_size=32",
    "trainer.max_steps=2",
    "trainer.per_device_train_batch_size=8",
    "trainer.num_generations=4",
    "trainer.max_completion_length=8",
    "trainer.save_strategy=no",
    "model.dtype=float32",
]


@pytest.mark.parametrize(
    ("recipe", "images", "group", "steps"),
    [  # 10 epochs x 7058 x 8 / (8 x 8 x 2 accumulated); 10 x 7058 x 6 / (48 x 8)
        ("q-insight-koniq", 16, 8, 4412),
        ("visualquality-r1-koniq", 64, 6, 1103),
    ],
)
def test_the_recipes_plan_memory_and_time_without_weights(recipe, images, group, steps):
    settings = parse(
        GrpoScorerSettings, compose("grpo_scorer", [f"+recipe={recipe}", "plan=true"], schema=GrpoScorerSettings)
    )
    plan = grpo_scorer_plan(settings)
    text = format_plan(plan)
    assert f"({images} images x group {group})" in text and f"steps: {steps}" in text and "ZeRO-3" in text
    assert "1003 visual tokens per image (assumed: a 1024x768 image)" in text  # not 12.8 megapixels' 16384
    assert plan.fits and [p.name.split()[0] for p in plan.parts] == ["policy", "reference"]


def test_bad_rewards_and_prompts_are_refused_together():
    with pytest.raises(UserError, match=r"(?s)rewards: 'rank' is none of .*prompt='r1' is none of"):
        bad = ["out=x", "model.path=m", "data.train=synthetic", "rewards=[rank]", "prompt=r1"]
        parse(GrpoScorerSettings, compose("grpo_scorer", bad, schema=GrpoScorerSettings))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("recipe", "prompt", "rewards"),
    [
        ("visualquality-r1-koniq", "visualquality-r1", "ranking, format"),
        ("q-insight-koniq", "q-insight", "score, format"),
    ],
)
def test_a_tiny_run_of_each_recipe_from_an_sft_scorer_writes_a_scorer_folder_read_both_ways(
    recipe, prompt, rewards, tiny_scorer_path, tmp_path
):
    from reward import get_reward
    from training.procedural.synthetic import example_at

    out = tmp_path / "run"
    tiny = [f"+recipe={recipe}", f"model.path={tiny_scorer_path}", f"out={out}", *TINY, "trainer.bf16=false"]
    result = run(
        parse(GrpoScorerSettings, compose("grpo_scorer", tiny, schema=GrpoScorerSettings))
    )  # a warm start: an SFT scorer's folder
    assert result["global_step"] == 2 and -1 <= result["test_srcc"] <= 1
    meta = json.loads((out / "scorer" / "sa_iqa.json").read_text())
    assert meta["reasoning"]["prompt"] == prompt and meta["level_words"] == ["1", "2", "3", "4", "5"]
    card = (out / "scorer" / "README.md").read_text()
    assert "trained by GRPO" in card and "reward=reasoning-iqa" in card and f"rewards {rewards};" in card
    # an untrained model's answers do not parse: every answer of every group rewarded alike, said at the end
    assert result["spread_steps"] == 0 and result["warning"].startswith("no reward spread in any of 2 logged steps")
    images = [example_at(3, i, 32).image for i in range(3)]
    expected = get_reward("reasoning-iqa", {"model": str(out / "scorer"), "dtype": "float32"}).score(images).scores
    assert torch.isfinite(expected).all() and ((expected >= 1) & (expected <= 5)).all()
    again = get_reward("reasoning-iqa", {"model": str(out / "scorer"), "dtype": "float32"}).score(images).scores
    assert torch.equal(expected, again)  # one forward: deterministic
    sampled = get_reward(
        "reasoning-iqa", {"model": str(out / "scorer"), "mode": "sample", "samples": 2, "max_new_tokens": 8}
    ).score(images)
    # an untrained model's answers do not parse: failures (NaN), never made-up numbers
    assert all(math.isnan(s) or 1 <= s <= 5 for s in sampled.scores.tolist())


def _settings(*argv: str) -> GrpoScorerSettings:
    return parse(
        GrpoScorerSettings,
        compose("grpo_scorer", ["out=unused", "model.path=unused", *argv], schema=GrpoScorerSettings),
    )


@pytest.mark.parametrize(
    ("scope", "message"),
    [
        ("step", "a step holds 1 image(s) of 6 answers (1 process(es))"),
        ("process", "each of the 1 process(es) ranks its own 6 answers, 1 image(s) of 6 answers"),
    ],
)
def test_a_share_of_one_image_is_refused_before_any_model_loads(scope, message, tiny_vlm_path, tmp_path):
    """The ranking reward of one image has nothing to rank: refused, never trained on with a reward that is None."""
    argv = [f"out={tmp_path / 'run'}", f"model.path={tiny_vlm_path}", "data.train=synthetic", f"ranking_scope={scope}"]
    argv += ["trainer.per_device_train_batch_size=6", "trainer.num_generations=6"]
    with pytest.raises(UserError, match=re.escape(message)):
        run(parse(GrpoScorerSettings, compose("grpo_scorer", argv, schema=GrpoScorerSettings)))
    assert not (tmp_path / "run").exists()  # refused before the output folder, before the model


def _manifest(folder, rows: list[dict]) -> str:
    from PIL import Image

    for name in {r["image"] for r in rows if not r["image"].startswith("missing")}:
        Image.new("RGB", (8, 8), (90, 90, 90)).save(folder / name)
    (folder / "ratings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(folder / "ratings.jsonl")


def test_the_data_is_checked_before_loading_and_says_which_dimension_trains(tmp_path, caplog):
    from training.commands.grpo_scorer import read_data

    good = [{"image": f"{i}.png", "dimension": "sharpness", "mos": 1.5 + i / 2} for i in range(4)]
    manifest = _manifest(
        tmp_path, [*good[:2], {"image": "missing.png", "dimension": "sharpness", "mos": 3}, *good[2:]]
    )
    with pytest.raises(UserError, match=r"data.train: .*ratings.jsonl:3: 'image' image 'missing.png' not found.*"):
        read_data(_settings(f"data.train={manifest}"))
    with pytest.raises(UserError, match=r"data.skip_bad=true"):
        read_data(_settings(f"data.train={manifest}"))
    caplog.set_level(logging.INFO, logger="training.commands.grpo_scorer_data")
    train, test = read_data(_settings(f"data.train={manifest}", "data.skip_bad=true"))
    assert (train.n, train.skipped, train.dim, test) == (4, 1, "sharpness", None)
    assert "data.train: 4 rows rated on 'sharpness'" in caplog.text and "1 bad row(s) skipped" in caplog.text
    assert [train[i]["mos"] for i in range(4)] == [1.5, 2.0, 2.5, 3.0]  # on 1-5 already: a manifest's scale


def test_a_mos_outside_the_scale_and_two_dimensions_are_refused_never_merged(tmp_path):
    from training.commands.grpo_scorer import read_data

    rows = [{"image": f"{i}.png", "dimension": d, "mos": 3.0} for i, d in enumerate(["a", "a", "b"])]
    manifest = _manifest(tmp_path, rows)
    with pytest.raises(UserError, match=r"rows rated on 2 dimensions \['a', 'b'\]; .*set data.dimension="):
        read_data(_settings(f"data.train={manifest}"))
    (a,) = [read_data(_settings(f"data.train={manifest}", "data.dimension=a"))[0]]
    assert (a.n, a.dim) == (2, "a")
    with pytest.raises(
        UserError, match=r"data.dimension='c': no row of data.train=.* is rated on it; its: \['a', 'b'\]"
    ):
        read_data(_settings(f"data.train={manifest}", "data.dimension=c"))
    (tmp_path / "ratings.jsonl").write_text(json.dumps({"image": "0.png", "dimension": "a", "mos": 70}) + "\n")
    with pytest.raises(UserError, match=r"ratings.jsonl:1: mos 70 is outside mos_range \(1.0, 5.0\).*data.mos_range="):
        read_data(_settings(f"data.train={manifest}"))
    scaled = read_data(_settings(f"data.train={manifest}", "data.mos_range=[0,100]"))[0]
    assert scaled[0]["mos"] == pytest.approx(1 + 4 * 0.7)


@pytest.mark.parametrize(
    ("prompt", "sampling"),
    [  # VisualQuality-R1's README (its vLLM script); Q-Insight's src/eval/demo_score.py
        ("visualquality-r1", {"temperature": 0.1, "top_k": 50, "top_p": 1.0, "max_new_tokens": 512, "seed": 1}),
        ("q-insight", {"temperature": 1.0, "top_k": 50, "top_p": 0.95, "max_new_tokens": 1024, "seed": 42}),
    ],
)
def test_mode_release_samples_one_answer_as_the_prompts_release_does(prompt, sampling):
    from reward.core.config import parse
    from reward.rewards.reasoning_iqa import ReasoningIqaConfig, ReasoningIqaReward, scorer_meta

    config = parse(ReasoningIqaConfig, {"model": "unused", "mode": "release", "samples": 8}, where="reward")
    reward = ReasoningIqaReward(None, scorer_meta(prompt), config)  # type: ignore[arg-type]  # no model needed
    assert reward.sampling() == {"samples": 1, **sampling}  # one answer, whatever reward.samples says
    assert reward.system == (None if prompt == "visualquality-r1" else PROMPTS[prompt].system)
    assert reward.query.response_prefix.endswith('<answer>\n{"rating": ' if prompt == "q-insight" else "<answer>")


@pytest.mark.slow
def test_the_expected_value_reads_the_digit_where_a_model_taught_the_format_writes_it(format_taught_vlm_path):
    """mode=expected reads the digits after the prompt's answer prefix: for a model taught each release's format
    (random digits) nearly all the probability there is on the five digits; after a bare "<answer>" Q-Insight's
    model writes its JSON object instead, and a read there would be of tokens it never answers with."""
    from reward.rewards.reasoning_iqa import SCORE_WORDS
    from reward.vlm import OptionQuery, load_vlm
    from training.procedural.synthetic import example_at

    vlm = load_vlm(format_taught_vlm_path, dtype="float32")
    images = [[example_at(9, i, 32).image] for i in range(4)]

    def digit_mass(prompt: str, prefix: str) -> torch.Tensor:
        query = OptionQuery(PROMPTS[prompt].question, SCORE_WORDS, prefix, sep="")
        return vlm.option_logprobs(images, [query], system=PROMPTS[prompt].system).logprobs[:, 0].exp().sum(-1)

    for prompt in ("visualquality-r1", "q-insight"):
        assert (digit_mass(prompt, PROMPTS[prompt].answer_prefix) > 0.9).all(), prompt
    assert (digit_mass("q-insight", "<think>\n\n</think>\n<answer>") < 0.1).all()
