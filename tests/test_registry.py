"""The reward registry: names, metadata, errors, and every registered reward builds and scores."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import reward
from conftest import random_images, tiny_reward_config
from reward import RewardOutput, declare_reward, get_reward, list_rewards, register_reward, reward_info


def test_unknown_reward_lists_known_names_and_a_close_match():
    with pytest.raises(ValueError, match=r"unknown reward 'qbnch'\. Did you mean 'qbench'\? Known rewards: .*qbench"):
        get_reward("qbnch")


def test_unknown_and_missing_config_keys_are_reported_together():
    with pytest.raises(ValueError) as err:
        get_reward("qbench", {"modle": "x", "temprature": 2.0})
    msg = str(err.value)
    assert "unknown key reward.modle (did you mean 'model'?)" in msg
    assert "unknown key reward.temprature (did you mean 'temperature'?)" in msg
    with pytest.raises(ValueError) as err:
        get_reward("sa-iqa", {"pth": "x", "temprature": 2.0})
    msg = str(err.value)
    assert "unknown key reward.pth (did you mean 'model'?)" in msg and "missing required key reward.model" in msg
    # qbench's model is required only in-process (a served reward may name none): said after the keys are read
    with pytest.raises(ValueError, match=r"reward=qbench needs reward.model=PATH .*or reward.backend=openai"):
        get_reward("qbench", {"temperature": 2.0})


def test_registration_requires_kebab_case_and_a_valid_range():
    with pytest.raises(ValueError, match="kebab-case"):
        register_reward("My_Reward", "x:y", higher_is_better=True, score_range=(0, 1), description="")
    with pytest.raises(ValueError, match="low < high"):
        register_reward("backwards", "x:y", higher_is_better=True, score_range=(1, 0), description="")
    with pytest.raises(ValueError, match="already registered"):
        register_reward("qbench", "x:y", higher_is_better=True, score_range=(0, 1), description="")


@declare_reward(higher_is_better=False, score_range=(0.0, 255.0), description="mean brightness (test only)")
def brightness(cfg: dict) -> object:
    class Mean:
        def score(self, images, prompts=None) -> RewardOutput:
            return RewardOutput(scores=torch.tensor([float(np.asarray(im).mean()) for im in images]))

    return Mean()


def undeclared(cfg: dict) -> object:
    return brightness(cfg)


def test_dotted_import_path_builds_a_declared_custom_reward_and_reads_its_metadata():
    spec = reward_info(f"{__name__}:brightness")
    assert (spec.higher_is_better, spec.score_range) == (False, (0.0, 255.0))
    images = random_images(2)
    out = get_reward(f"{__name__}:brightness").score(images)
    assert out.scores.tolist() == pytest.approx([float(np.asarray(im).mean()) for im in images])
    with pytest.raises(ValueError, match="does not declare its direction and score range"):
        get_reward(f"{__name__}:undeclared")


def test_bad_import_path_is_a_clear_error():
    with pytest.raises(ValueError, match="cannot import reward factory module 'no_such_mod'"):
        get_reward("no_such_mod:build")


@pytest.mark.parametrize("name", list_rewards())
def test_every_registered_reward_scores_within_its_range(name, request):
    r = get_reward(name, tiny_reward_config(name, request))
    out = r.score(random_images(3, seed=7))
    low, high = reward_info(name).score_range
    assert out.scores.dtype == torch.float32 and out.scores.shape == (3,)
    assert ((out.scores >= low) & (out.scores <= high)).all()
    for values in out.dimensions.values():
        assert values.shape == (3,)


def test_public_api_is_small():
    assert set(reward.__all__) == {
        "Reward",
        "RewardOutput",
        "declare_reward",
        "get_reward",
        "list_rewards",
        "register_reward",
        "reward_info",
        "as_images",
        "trl_reward_func",
        "trl_reward_funcs",
        "images_from_column",
        "render_from_pipeline",
        "rerank",
        "Reranked",
    }
