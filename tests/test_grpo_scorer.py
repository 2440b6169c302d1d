"""GRPO on the scorer (``training/grpo_scorer.py``): the recipes' plans, a tiny run's scorer folder and card, and the
folder read by ``reward=reasoning-iqa`` both ways."""

from __future__ import annotations

import json
import math

import pytest
import torch

from reward.core.cli import compose
from reward.core.errors import UserError
from training.commands.grpo_scorer import GrpoScorerSettings, parse_settings, run
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
    ("recipe", "group", "steps"),
    [("q-insight-koniq", 8, 2647), ("visualquality-r1-koniq", 6, 8823)],  # 3 x 7058 x 8 / 64; 10 x 7058 x 6 / 48
)
def test_the_recipes_plan_memory_and_time_without_weights(recipe, group, steps):
    settings = parse_settings(compose("grpo_scorer", [f"+recipe={recipe}", "plan=true"], schema=GrpoScorerSettings))
    plan = grpo_scorer_plan(settings)
    text = format_plan(plan)
    assert f"(8 images x group {group})" in text and f"steps: {steps}" in text and "ZeRO-3" in text
    assert plan.fits and [p.name.split()[0] for p in plan.parts] == ["policy", "reference"]


def test_bad_rewards_and_prompts_are_refused_together():
    with pytest.raises(UserError, match=r"rewards: 'rank' is none of .*prompt='r1' is none of"):
        bad = ["out=x", "model.path=m", "data.train=synthetic", "rewards=[rank]", "prompt=r1"]
        parse_settings(compose("grpo_scorer", bad, schema=GrpoScorerSettings))


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
    result = run(compose("grpo_scorer", tiny, schema=GrpoScorerSettings))  # a warm start: an SFT scorer's folder
    assert result["global_step"] == 2 and -1 <= result["test_srcc"] <= 1
    meta = json.loads((out / "scorer" / "sa_iqa.json").read_text())
    assert meta["reasoning"]["prompt"] == prompt and meta["level_words"] == ["1", "2", "3", "4", "5"]
    card = (out / "scorer" / "README.md").read_text()
    assert "trained by GRPO" in card and "reward=reasoning-iqa" in card and f"rewards {rewards})" in card
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
