"""Several rewards share one render, and an item one of them failed on gets ``None`` from every one of them (trl sums
rewards with ``nansum``, which would count the failed one as 0): through ``reward.trl_reward_funcs`` called as trl
calls it, through trl's own ``GRPOTrainer``, and through ``rl/grpo.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import initialize_config_dir
from PIL import Image

from reward import RewardOutput, images_from_column, trl_reward_funcs
from reward.core.cli import compose
from reward.core.config import parse
from reward.integrations.reward_set import named_reward
from reward.rewards.registry import REWARDS, register_reward
from rl.commands.grpo import run as run_grpo
from rl.commands.grpo_settings import GrpoSettings
from training.procedural.synthetic import write_inpainting_tasks

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


class FirstFails:
    """Scores 1.0, except the first image of each call: NaN (a reward that fails on one item of a batch)."""

    def score(self, images, prompts=None) -> RewardOutput:
        return RewardOutput(scores=torch.tensor([float("nan")] + [1.0] * (len(images) - 1)))


class FirstMarked:
    """Scores the first image of each call 1.0 and the others 0.0: with the first item's score dropped its mean is 0;
    counted as 0 by a missing ``None`` it would be 1 / batch."""

    def score(self, images, prompts=None) -> RewardOutput:
        return RewardOutput(scores=torch.tensor([1.0] + [0.0] * (len(images) - 1)))


class FailsOnDark:
    """Scores 0.5, and raises on a dark image (a bad image: the batch is retried item by item)."""

    def score(self, images, prompts=None) -> RewardOutput:
        if any(im.getpixel((0, 0))[0] < 50 for im in images):
            raise ValueError("too dark to score")
        return RewardOutput(scores=torch.full((len(images),), 0.5))


def _named(reward, name):
    return named_reward(reward, name=name, higher_is_better=True, score_range=(0.0, 1.0))


def test_an_item_one_reward_raised_on_gets_none_from_both_and_the_batch_renders_once():
    dark, light = Image.new("RGB", (8, 8), (10, 10, 10)), Image.new("RGB", (8, 8), (200, 200, 200))
    renders = []

    def render(prompts, completions, **columns):
        renders.append(list(completions))
        return images_from_column("image")(prompts, completions, **columns)

    picky, marker = trl_reward_funcs([_named(FailsOnDark(), "picky"), _named(FirstMarked(), "marker")], render)
    completions = ["a", "b", "c"]
    columns = {"image": [light, dark, light], "trainer_state": None}
    assert picky(["p"] * 3, completions, **columns) == [0.5, None, 0.5]
    assert marker(["p"] * 3, completions, **columns) == [1.0, None, 0.0]  # scored 0.0 alone: None from both
    assert renders == [completions] and picky.calls == 1  # one render and one score per reward for the batch
    assert (picky.last_failed, marker.last_failed) == (1, 0)
    assert marker.scoring.tally.as_dict() == {
        "completions": 3,
        "unusable": 1,
        "render_failed": 0,
        "failed": {"picky": 1, "marker": 0},
    }
    assert picky(["p"] * 3, ["d", "e", "f"], **columns) == [0.5, None, 0.5] and len(renders) == 2  # a new batch


@pytest.mark.slow
def test_trl_grpo_trainer_gets_none_from_every_reward_for_an_item_one_failed_on(tiny_lm_path, tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    grey = Image.new("RGB", (8, 8), (128, 128, 128))
    funcs = trl_reward_funcs(
        [_named(FirstFails(), "first-fails"), _named(FirstMarked(), "marker")],
        lambda prompts, completions, **columns: [grey] * len(completions),
        normalize=True,
    )
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        seed=0,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_lm_path),
        reward_funcs=funcs,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["a kitchen with warm light"] * 8}),
        processing_class=AutoTokenizer.from_pretrained(tiny_lm_path),
    )
    trainer.train()

    logged = [h for h in trainer.state.log_history if "rewards/marker/mean" in h]
    assert [h["rewards/marker/mean"] for h in logged] == [0.0, 0.0]  # without the shared None: 0.25 (1 of 4)
    assert [h["rewards/first-fails/mean"] for h in logged] == [1.0, 1.0]
    assert [f.last_values for f in funcs] == [[None, 1.0, 1.0, 1.0], [None, 0.0, 0.0, 0.0]]
    assert funcs[0].calls == 2 and funcs[0].scoring.tally.unusable == 2  # one render per step; one item each
    assert [h["marker/failed"] for h in logged] == [0.0, 0.0] and [h["first-fails/failed"] for h in logged] == [1, 1]


@pytest.fixture
def masking_rewards():
    for name, cls in (("test-first-fails", FirstFails), ("test-marker", FirstMarked)):
        register_reward(
            name, lambda cfg, cls=cls: cls(), higher_is_better=True, score_range=(0, 1), description="test only"
        )
    yield
    for name in ("test-first-fails", "test-marker"):
        REWARDS.unregister(name)


@pytest.mark.slow
def test_grpo_gets_none_from_every_reward_for_an_item_one_failed_on(masking_rewards, tiny_lm_path, tmp_path):
    tasks = write_inpainting_tasks(tmp_path / "tasks", 12, size=32, seed=0, mask_fraction=0.8)
    overrides = [
        f"policy.path={tiny_lm_path}",
        f"data={tasks}",
        f"out={tmp_path / 'run'}",
        "reward=scene-proxy",
        "more_rewards=[{name: test-first-fails}, {name: test-marker}]",
        "generator=procedural",
        "trainer.max_steps=2",
        "trainer.num_generations=2",
        "trainer.per_device_train_batch_size=4",
        "trainer.gradient_accumulation_steps=1",
        "trainer.max_completion_length=8",
        "trainer.save_steps=1000",
        "eval.every=0",
    ]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        result = run_grpo(parse(GrpoSettings, compose("grpo", overrides=overrides, schema=GrpoSettings)))
    curve = result["train_curve"]
    assert [mean for _, mean, _ in curve["test-marker"]] == [0.0, 0.0]  # without the shared None: 0.25 (1 of 4)
    assert [mean for _, mean, _ in curve["test-first-fails"]] == [1.0, 1.0]
    assert len(curve["scene-proxy"]) == 2  # the third reward, scored on every item but the dropped one
    failures = result["reward_failures"]
    assert (failures["completions"], failures["unusable"], failures["failure"]) == (8, 2, None)
