"""The reward registry: names, metadata, errors, and every registered reward builds and scores."""

from __future__ import annotations

import json
import subprocess
import sys

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
        get_reward("sa-iqa", {"modl": "x", "temprature": 2.0})
    msg = str(err.value)
    assert "unknown key reward.modl (did you mean 'model'?)" in msg and "missing required key reward.model" in msg
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


def test_every_registered_reward_s_settings_are_read_without_torch():
    """A command checks its reward's settings before torch loads: each registered reward's settings dataclass, wherever
    it lives (settings.py, a torch-free reward module, a package above), imports none of torch or transformers."""
    code = (
        "import json, sys\n"
        "from reward.rewards.registry import list_rewards, reward_config\n"
        "configs = {n: reward_config(n).__name__ for n in list_rewards()}\n"
        "print(json.dumps([configs, [m for m in ('torch', 'transformers') if m in sys.modules]]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    configs, heavy = json.loads(done.stdout.splitlines()[-1])
    assert configs["reasoning-iqa"] == "ReasoningIqaConfig" and configs["sa-iqa"] == "SaIqaConfig"
    assert heavy == []


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


# ------------------------------------------------------------------------- rewards that other packages register

FAKE_REWARD = {  # what a package's entry point names: register_reward's arguments
    "factory": f"{__name__}:brightness",
    "higher_is_better": False,
    "score_range": (0.0, 255.0),
    "description": "mean brightness, registered by an entry point (test only)",
}


def test_the_rewards_of_the_packages_above_come_from_their_entry_points_read_on_first_use():
    """reward names neither pace_judge nor rl: their rewards are listed from pyproject.toml's entry points, and
    listing them imports only the dicts that declare them, not the rewards' modules."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, reward\n"
        "names = reward.list_rewards()\n"
        "print(names, [m for m in ('pace_judge.pace', 'rl.scene_proxy') if m in sys.modules])\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert "['chat-judge', 'pace', 'qbench', 'reasoning-iqa', 'sa-iqa', 'scene-proxy'] []" in done.stdout, (
        done.stdout + done.stderr
    )
    assert reward_info("pace").score_range == (1.0, 5.0) and reward_info("scene-proxy").higher_is_better


def test_a_reward_declared_by_entry_point_builds_and_a_broken_one_is_named_not_fatal(monkeypatch, caplog):
    import logging
    from importlib import metadata

    from reward.core.registry import Registry
    from reward.rewards import registry

    group = registry.ENTRY_POINTS
    points = [
        metadata.EntryPoint("fake-brightness", f"{__name__}:FAKE_REWARD", group),
        metadata.EntryPoint("broken", "no_such_package_anywhere:REWARD", group),
    ]
    monkeypatch.setattr(metadata, "entry_points", lambda group=None: points if group == registry.ENTRY_POINTS else [])
    fresh = Registry("reward", required=("higher_is_better", "score_range"), discover=registry._register_entry_points)
    monkeypatch.setattr(registry, "REWARDS", fresh)
    with caplog.at_level(logging.WARNING, logger="reward.rewards.registry"):
        assert list_rewards() == ["fake-brightness"]
    assert "reward 'broken' (entry point no_such_package_anywhere:REWARD) could not be loaded" in caplog.text
    assert reward_info("fake-brightness").higher_is_better is False
    dark, bright = np.zeros((8, 8, 3), np.uint8), np.full((8, 8, 3), 200, np.uint8)
    assert get_reward("fake-brightness").score([dark, bright]).scores.tolist() == [0.0, 200.0]


def test_a_registry_reads_its_other_packages_once_and_only_when_its_names_are_read():
    from reward.core.registry import Registry

    calls = []

    def discover() -> None:
        calls.append(1)
        things.register("found", "builtins:dict")

    things = Registry("thing", discover=discover)
    things.register("mine", "builtins:dict")  # registering reads nothing
    assert calls == []
    assert things.names() == ["found", "mine"] and "found" in things and things.get("found").target == "builtins:dict"
    assert calls == [1]


def test_an_install_older_than_the_entry_points_is_named_with_the_fix(monkeypatch):
    from importlib import metadata
    from types import SimpleNamespace

    from reward.core.registry import Registry
    from reward.rewards import registry

    def stale(name: str) -> object:  # the metadata of an install made before pyproject.toml declared entry points
        return SimpleNamespace(entry_points=metadata.EntryPoints([]))

    monkeypatch.setattr(metadata, "distribution", stale)
    assert "has no perceptual_rewards.rewards entry points" in registry.install_note()
    assert "pip install -e ." in registry.install_note()
    monkeypatch.setattr(registry, "REWARDS", Registry("reward", required=("higher_is_better",)))
    with pytest.raises(ValueError, match=r"unknown reward 'pace'.* Note: the installed metadata .* pip install -e \."):
        get_reward("pace")

    def missing(name: str) -> object:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    assert "perceptual-rewards is not installed" in registry.install_note()
