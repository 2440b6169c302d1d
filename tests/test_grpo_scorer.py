"""GRPO on the scorer (``training/grpo_scorer.py``): the recipes' plans, a tiny run's scorer folder and card, and the
folder read by ``reward=reasoning-iqa`` both ways."""

from __future__ import annotations

import json
import math

import pytest
import torch

from reward.core.cli import compose
from reward.core.errors import ConfigError
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
    with pytest.raises(ConfigError, match=r"rewards: 'rank' is none of .*prompt='r1' is none of"):
        bad = ["out=x", "model.path=m", "data.train=synthetic", "rewards=[rank]", "prompt=r1"]
        parse_settings(compose("grpo_scorer", bad, schema=GrpoScorerSettings))


@pytest.mark.slow
def test_a_tiny_run_from_an_sft_scorer_writes_a_scorer_folder_read_both_ways(tiny_scorer_path, tmp_path):
    from reward import get_reward
    from training.procedural.synthetic import example_at

    out = tmp_path / "run"
    warm = [f"model.path={tiny_scorer_path}", f"out={out}", *TINY]  # a warm start: an SFT scorer's folder
    result = run(compose("grpo_scorer", warm, schema=GrpoScorerSettings))
    assert result["global_step"] == 2 and -1 <= result["test_srcc"] <= 1
    meta = json.loads((out / "scorer" / "sa_iqa.json").read_text())
    assert meta["reasoning"]["prompt"] == "visualquality-r1" and meta["level_words"] == ["1", "2", "3", "4", "5"]
    card = (out / "scorer" / "README.md").read_text()
    assert "trained by GRPO" in card and "reward=reasoning-iqa" in card
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


def _answer_format_start(src, out, steps: int = 30, seed: int = 5):
    """The tiny VLM with ``<answer>``/``</answer>`` as tokens, taught the answer format on random digits (no quality
    information: each image's digit is drawn uniformly), and written as a scorer folder of the no-thinking prompt."""
    import numpy as np
    from transformers import AutoModelForImageTextToText

    from reward.rewards.reasoning_iqa import PROMPTS, scorer_meta
    from reward.rewards.scorer_folder import write_metadata
    from reward.vlm import load_processor
    from training.procedural.synthetic import example_at

    proc = load_processor(str(src))
    proc.tokenizer.add_tokens(["<answer>", "</answer>"])
    model = AutoModelForImageTextToText.from_pretrained(str(src), dtype=torch.float32)
    model.resize_token_embeddings(len(proc.tokenizer))
    opt, rng = torch.optim.AdamW(model.parameters(), lr=5e-3), np.random.default_rng(seed)
    user = [{"type": "image"}, {"type": "text", "text": PROMPTS["visualquality-r1-fast"]}]
    for step in range(steps):
        images = [example_at(seed, step * 8 + i, 32).image for i in range(8)]
        texts = [
            proc.apply_chat_template(
                [{"role": "user", "content": user}, {"role": "assistant", "content": f"<answer>{d}</answer>"}],
                tokenize=False,
            )
            for d in rng.integers(1, 6, len(images))
        ]
        batch = proc(text=texts, images=images, padding=True, return_tensors="pt")  # left padding: answers last
        labels = torch.full_like(batch["input_ids"], -100)
        labels[:, -5:] = batch["input_ids"][:, -5:]  # <answer> d </answer> <|im_end|> \n
        model(**batch, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(out)
    proc.save_pretrained(out)
    write_metadata(out, scorer_meta("visualquality-r1-fast"))
    return out


def _held_out_srcc(scorer) -> float:
    from reward import get_reward
    from reward.eval.metrics import srcc
    from training.procedural.synthetic import example_at

    examples = [example_at(999, i, 32) for i in range(64)]
    scores = get_reward("reasoning-iqa", {"model": str(scorer), "dtype": "float32"}).score([e.image for e in examples])
    return srcc(scores.scores.numpy(), [e.mos["lighting"] for e in examples])


@pytest.mark.slow
def test_grpo_on_the_scorer_raises_held_out_srcc_on_procedural_lighting(tiny_vlm_path, tmp_path):
    """From an answer-format start (random digits: no quality learnt), 60 GRPO steps of the three rewards raise the
    expected-value SRCC on 64 unseen scenes across 0.3 (measured: -0.52 before, 0.56 after)."""
    start = _answer_format_start(tiny_vlm_path, tmp_path / "start")
    before = _held_out_srcc(start)
    settings = [
        f"model.path={start}",
        f"out={tmp_path / 'run'}",
        "data.train=synthetic",
        "data.dimension=lighting",
        "data.synthetic_size=32",
        "prompt=visualquality-r1-fast",
        "rewards=[score,ranking,format]",
        "trainer.max_steps=60",
        "trainer.per_device_train_batch_size=16",
        "trainer.num_generations=4",
        "trainer.max_completion_length=4",
        "trainer.learning_rate=5e-3",
        "trainer.beta=0",
        "trainer.save_strategy=no",
        "model.dtype=float32",
    ]
    result = run(compose("grpo_scorer", settings, schema=GrpoScorerSettings))
    after = _held_out_srcc(tmp_path / "run" / "scorer")
    assert result["reward_last"] > result["reward_first"]
    assert after > 0.3 and after - before > 0.5, (before, after)
