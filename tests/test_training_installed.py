"""What SFT tells a user who installed the wheel without a clone: its --help, plan and scorer card name the console
command and the shipped configs (no repository file), the card's command is the one run and its base model one that
still resolves."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import training.sft
from reward.core.cli import compose
from training.commands.sft import SftSettings, parse_settings, run
from training.commands.sft_plan import sft_plan
from training.model_card import scorer_card
from training.shared.cards import settings_command
from training.shared.plan import format_plan

REPO_FILES = ("training/", "configs/", "fusion/fit.py", "reward/evaluate.py", "bench/")


def test_help_names_the_console_command_and_no_repository_file(capsys):
    from reward.core.cli import main

    main("sft", run, schema=SftSettings, doc=training.sft.__doc__, argv=["--help"])
    head = capsys.readouterr().out.split("settings (")[0]
    assert "perceptual-rewards sft model.path=PATH" in head and "perceptual-rewards --configs" in head
    lines = [line for line in head.splitlines() if "from a clone" not in line]
    assert not [f for f in REPO_FILES if any(f in line for line in lines)]


def test_a_plan_that_does_not_fit_names_the_shipped_zero3_config():
    base = ["model.path=Qwen/Qwen2.5-VL-72B-Instruct", "data.train=synthetic", "out=x", "trainer.max_steps=1"]
    text = format_plan(sft_plan(parse_settings(compose("sft", base, schema=SftSettings))))
    config = text.split("--config_file ")[1].split()[0]
    assert Path(config).is_absolute() and Path(config).is_file() and config.endswith("accelerate/zero3.yaml")
    assert not [f for f in ("bench/", " configs/") if f in text]


@pytest.mark.parametrize(
    ("argv", "begins"),
    [
        (["/venv/bin/perceptual-rewards", "sft", "out=o"], "perceptual-rewards sft "),
        (["/usr/bin/python", "-m", "reward", "sft", "out=o"], "python -m reward sft "),
        (["python", "training/sft.py", "out=o"], "python training/sft.py "),
    ],
)
def test_the_cards_command_is_the_one_run(argv, begins, monkeypatch):
    monkeypatch.setattr(sys, "orig_argv", argv)
    command = settings_command("training/sft.py", "sft", SftSettings, {"model": {"path": "m"}, "out": "o"})
    assert command.startswith(begins) and "model.path=m" in command.removeprefix(begins)


def test_the_card_names_a_local_base_model_by_its_absolute_path_and_a_hub_id_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "base").mkdir(parents=True)
    given = dict(dimensions={"q": ""}, level_words=["good"], level_values=[5.0], train_data="r.jsonl", command="c")
    local = str(scorer_card(base_model="models/base", **given))
    assert f"A fine-tune of `{tmp_path / 'models' / 'base'}`" in local and "`models/base`" not in local
    hub = str(scorer_card(base_model="Qwen/Qwen2-VL-2B-Instruct", **given))
    assert "Base model: `Qwen/Qwen2-VL-2B-Instruct`" in hub
    assert "perceptual-rewards evaluate reward=sa-iqa" in hub and "perceptual-rewards fit" in hub
    assert not [f for f in REPO_FILES if f in hub]
