"""One vocabulary across commands: ``out``, ``reward.model``, one ``seed``, ``resume=auto|never``; the old names are
aliases on the command line, in plain dicts and in recipes until the version that drops them, each warned once, read
in one place for both; hints come from the settings the command line chooses (``reward=pace``: the pace reward's)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

import reward.core.config as config_module
from pace_judge.commands.judge import JudgeSettings
from reward.commands.evaluate import EvaluateSettings
from reward.core.cli import compose
from reward.core.config import parse, resume_mode
from reward.core.errors import ConfigError
from rl.commands.grpo import GrpoSettings
from training.commands.sft import SftSettings

ROOT = Path(__file__).resolve().parents[1]
OLD_KEYS = re.compile(r"(?<![\w-])(output_dir=|reward\.path=|data\.synthetic_seed=|trainer\.seed=)")


@pytest.fixture(autouse=True)
def _fresh_notes(monkeypatch):
    monkeypatch.setattr(config_module, "_NOTED", set())


def test_old_keys_on_the_command_line_are_read_as_the_new_ones_with_one_note_each(caplog):
    with caplog.at_level(logging.INFO, logger="reward.core.config"):
        cfg = compose(
            "grpo",
            ["reward=sa-iqa", "reward.path=/s", "output_dir=/o", "trainer.seed=3", "resume=true"],
            schema=GrpoSettings,
        )
    assert (cfg.reward.model, cfg.out, cfg.seed) == ("/s", "/o", 3)
    assert "output_dir" not in cfg and "seed" not in cfg.trainer and "path" not in cfg.reward
    notes = [r.getMessage() for r in caplog.records]
    assert notes == [
        "reward.path is an alias of reward.model; the old name goes in 0.3.0",
        "output_dir is an alias of out; the old name goes in 0.3.0",
        "trainer.seed is an alias of seed; the old name goes in 0.3.0",
    ]
    assert resume_mode(cfg.resume) is True


def test_old_keys_in_plain_dicts_are_read_as_the_new_ones():
    from training.commands.sft import parse_settings

    s = parse_settings(
        {
            "output_dir": "/o",
            "model": {"path": "m"},
            "data": {"train": "synthetic", "synthetic_seed": 5},
            "trainer": {"max_steps": 2},
            "resume": "false",
        }
    )
    assert (s.out, s.seed, resume_mode(s.resume)) == ("/o", 5, False)
    assert "seed" not in s.trainer and not hasattr(s.data, "synthetic_seed")


def test_an_old_and_a_new_key_with_different_values_are_refused():
    from training.commands.sft import parse_settings

    with pytest.raises(ConfigError, match="output_dir is an alias of out"):
        parse_settings({"output_dir": "/a", "out": "/b", "model": {"path": "m"}, "data": {"train": "x"}})
    base = ["model.path=m", "data.train=x"]
    with pytest.raises(ConfigError, match=r"out='/b' and output_dir='/a' .* \(output_dir is an alias of out\)"):
        compose("sft", [*base, "output_dir=/a", "out=/b"], schema=SftSettings)  # on the command line too
    with pytest.raises(ConfigError, match=r"reward.path='/b' and reward.model='/a' .*; give only reward.model"):
        compose("grpo", ["reward=qbench", "reward.model=/a", "reward.path=/b"], schema=GrpoSettings)
    assert compose("sft", [*base, "output_dir=/a", "out=/a"], schema=SftSettings).out == "/a"  # the same value: one


def test_every_reward_names_its_model_reward_model():
    from pace_judge.config import PaceConfig
    from reward.rewards.qbench import QBenchConfig
    from reward.rewards.sa_iqa import SaIqaConfig

    assert parse(SaIqaConfig, {"path": "/scorer"}, where="reward").model == "/scorer"
    assert parse(QBenchConfig, {"path": "/vlm"}, where="reward").model == "/vlm"
    pace = parse(PaceConfig, {"model": {"path": "/vlm", "dtype": "bfloat16", "batch_size": 4}}, where="reward")
    assert (pace.model, pace.dtype, pace.batch_size) == ("/vlm", "bfloat16", 4)


def test_the_judge_has_its_loading_knobs_in_one_place():
    cfg = compose("judge", ["model=/vlm", "dtype=float32", "images=i", "out=o"], schema=JudgeSettings)
    assert cfg.model == "/vlm" and cfg.dtype == "float32" and cfg.max_pixels == 802816
    knobs = ("dtype", "device", "device_map", "attn_implementation", "min_pixels", "max_pixels", "batch_size")
    assert all(k in cfg for k in knobs)


def test_resume_has_one_spelling_with_true_false_aliases():
    assert [resume_mode(v) for v in ("auto", "never", "true", "false", True, False)] == [1, 0, 1, 0, 1, 0]
    with pytest.raises(ConfigError, match="resume='maybe': use auto"):
        resume_mode("maybe")

    cfg = compose("evaluate", ["reward=qbench", "data=d", "out=o", "resume=auto"], schema=EvaluateSettings)
    assert cfg.resume == "auto"


def test_did_you_mean_comes_from_the_settings_the_overrides_choose():
    with pytest.raises(ConfigError) as err:
        compose("grpo", ["reward=pace", "reward.thetaa=0.5"], schema=GrpoSettings)
    assert "unknown key reward.thetaa (did you mean 'theta'?)" in str(err.value)
    with pytest.raises(ConfigError) as err:
        compose("grpo", ["reward=pace", "reward.pth=/m"], schema=GrpoSettings)
    assert "(did you mean 'model'?)" in str(err.value)
    assert compose("grpo", ["reward=pace", "reward.path=/m"], schema=GrpoSettings).reward.model == "/m"


def test_parse_is_the_one_function_from_config_to_settings():
    assert not hasattr(config_module, "from_mapping")


def test_recipes_compose_with_the_new_names():
    sft = [r for r in sorted((ROOT / "configs" / "recipe").glob("*.yaml")) if "training/sft.py" in r.read_text()]
    assert len(sft) >= 5  # tiny-real-photos(-gpu), qalign-koniq, deqa-koniq, sa-iqa-bench
    for recipe in sft:
        cfg = compose("sft", [f"+recipe={recipe.stem}", "model.path=m", "out=o", "data.test=t"], schema=SftSettings)
        assert cfg.out == "o" and cfg.seed == 42


def test_configs_and_readme_use_the_new_names():
    files = [*sorted((ROOT / "configs").rglob("*.yaml")), ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [
        f"{f.relative_to(ROOT)}:{n}: {line.strip()}"
        for f in files
        for n, line in enumerate(f.read_text().splitlines(), 1)
        if OLD_KEYS.search(line)
        and "| `" not in line  # (the table of renamed keys, docs/commands.md, names them)
        and "Config(" not in line  # trl's own config classes keep their output_dir
        and not line.strip().startswith('output_dir="grpo-')  # (an argument of a GRPOConfig( a line above)
    ]
    assert not found, "\n".join(found)


def test_the_judge_sections_are_typed_and_still_take_the_plus_of_their_untyped_days():
    """server, crops and agents are typed with their dataclasses (their keys and defaults are checked and shown);
    ``+agents.retries=1``, needed when agents was an untyped dict, still sets the key."""
    cfg = compose(
        "judge", ["protocol=p", "images=i", "out=o", "+agents.retries=1", "crops.grid=[3,3]"], schema=JudgeSettings
    )
    assert (cfg.agents.retries, cfg.agents.max_rounds, list(cfg.crops.grid), cfg.server.top_logprobs) == (
        1,
        3,
        [3, 3],
        20,
    )
    with pytest.raises(ConfigError, match=r"unknown key agents.retrys \(did you mean 'retries'\?\)"):
        compose("judge", ["protocol=p", "images=i", "out=o", "agents.retrys=1"], schema=JudgeSettings)
