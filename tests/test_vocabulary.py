"""One vocabulary across commands: ``out``, ``reward.model``, one ``seed``, ``resume=auto|never``; before a release
nothing is renamed with an alias: an old name is an unknown key with the close-match hint every unknown key gets, from
the settings the command line chooses (``reward=pace``: the pace reward's)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pace_judge.commands.judge import JudgeSettings
from reward.commands.evaluate import EvaluateSettings
from reward.core.cli import compose
from reward.core.config import parse, resume_mode
from reward.core.errors import UserError
from rl.commands.grpo_settings import GrpoSettings
from training.commands.sft import SftSettings

ROOT = Path(__file__).resolve().parents[1]
OLD_KEYS = re.compile(r"(?<![\w-])(output_dir=|reward\.path=|data\.synthetic_seed=|trainer\.seed=)")


def test_every_reward_names_its_model_reward_model():
    from pace_judge.config import PaceConfig
    from reward.rewards.qbench import QBenchConfig
    from reward.rewards.sa_iqa import SaIqaConfig

    assert parse(SaIqaConfig, {"model": "/scorer"}, where="reward").model == "/scorer"
    assert parse(QBenchConfig, {"model": "/vlm"}, where="reward").model == "/vlm"
    pace = parse(PaceConfig, {"model": "/vlm", "dtype": "bfloat16", "batch_size": 4, "protocol": "p"}, where="reward")
    assert (pace.model, pace.dtype, pace.batch_size) == ("/vlm", "bfloat16", 4)
    with pytest.raises(UserError, match=r"unknown key reward.path"):  # no alias: an unknown key
        parse(SaIqaConfig, {"path": "/scorer"}, where="reward")


def test_the_judge_has_its_loading_knobs_in_one_place():
    cfg = compose("judge", ["model=/vlm", "dtype=float32", "protocol=p", "images=i", "out=o"], schema=JudgeSettings)
    assert cfg.model == "/vlm" and cfg.dtype == "float32" and cfg.max_pixels == 802816
    knobs = ("dtype", "device", "device_map", "attn_implementation", "min_pixels", "max_pixels", "batch_size")
    assert all(k in cfg for k in knobs)


def test_resume_has_one_spelling_with_true_false_aliases():
    assert [resume_mode(v) for v in ("auto", "never", "true", "false", True, False)] == [1, 0, 1, 0, 1, 0]
    for value in ("auto", "true", "false", "never"):  # true/false reach the str field as 'True'/'False'
        cfg = compose("evaluate", ["reward=qbench", "data=d", "out=o", f"resume={value}"], schema=EvaluateSettings)
        assert resume_mode(cfg.resume) == (value in ("auto", "true"))
    with pytest.raises(
        UserError, match=r"^resume='nevr': choose one of auto, never, true, false \(did you mean 'never'"
    ):
        compose("evaluate", ["reward=qbench", "data=d", "out=o", "resume=nevr"], schema=EvaluateSettings)


def test_a_choice_is_checked_once_by_parse_exactly_as_typed_with_null_among_them():
    from dataclasses import dataclass, field

    @dataclass
    class C:
        mode: str = field(default="logprob", metadata={"choices": ("logprob", "generate")})
        density: str | None = field(default=None, metadata={"choices": ("pdf", "cdf", None)})

    assert parse(C, {"density": None}).density is None and parse(C, {"density": "cdf"}).density == "cdf"
    with pytest.raises(UserError) as err:
        parse(C, {"mode": "LogProb", "density": "pfd"})  # case matters: the code compares the exact word
    assert str(err.value).splitlines()[1:] == [
        "  - mode='LogProb': choose one of logprob, generate (did you mean 'logprob'?)",
        "  - density='pfd': choose one of pdf, cdf, null (did you mean 'pdf'?)",
    ]


def test_did_you_mean_comes_from_the_settings_the_overrides_choose():
    with pytest.raises(UserError) as err:
        compose("grpo", ["reward=pace", "reward.thetaa=0.5"], schema=GrpoSettings)
    assert "unknown key reward.thetaa (did you mean 'theta'?)" in str(err.value)
    with pytest.raises(UserError) as err:
        compose("grpo", ["reward=pace", "reward.modle=/m"], schema=GrpoSettings)
    assert "unknown key reward.modle (did you mean 'model'?)" in str(err.value)


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
        "judge",
        ["model=m", "protocol=p", "images=i", "out=o", "+agents.retries=1", "crops.grid=[3,3]"],
        schema=JudgeSettings,
    )
    assert (cfg.agents.retries, cfg.agents.max_rounds, list(cfg.crops.grid), cfg.server.top_logprobs) == (
        1,
        3,
        [3, 3],
        20,
    )
    with pytest.raises(UserError, match=r"unknown key agents.retrys \(did you mean 'retries'\?\)"):
        compose("judge", ["protocol=p", "images=i", "out=o", "agents.retrys=1"], schema=JudgeSettings)
