"""What SFT tells a user who installed the wheel without a clone: its --help, plan and scorer card name the console
command and the shipped configs (no repository file), the card's command is the one run and its base model one that
still resolves."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import training.sft
from reward.core.cli import compose
from reward.core.config import parse
from training.commands.sft import SftSettings, run
from training.commands.sft_plan import sft_plan
from training.shared.cards import scorer_card, settings_command
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
    text = format_plan(sft_plan(parse(SftSettings, compose("sft", base, schema=SftSettings))))
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


def test_the_card_names_a_local_base_model_by_its_folder_and_architecture_and_a_hub_id_as_given(tmp_path, monkeypatch):
    """A card is made to be pushed: a local base model is the local checkpoint of its architecture by its folder's
    name, never the folder's path on this machine (it was "a fine-tune of /home/..."); a Hub id as given, in the
    front matter too; a snapshot in the Hugging Face cache by its repo."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "base").mkdir(parents=True)
    (tmp_path / "models" / "base" / "config.json").write_text('{"architectures": ["Qwen2VLForConditionalGeneration"]}')
    given = dict(dimensions={"q": ""}, level_words=["good"], level_values=[5.0], train_data="r.jsonl", command="c")
    local = str(scorer_card(base_model="models/base", **given))
    assert "A fine-tune of the local Qwen2VLForConditionalGeneration checkpoint `base` that rates" in local
    assert str(tmp_path) not in local and "models/base" not in local and "base_model:" not in local
    hub = str(scorer_card(base_model="Qwen/Qwen2-VL-2B-Instruct", **given))
    assert "Base model: `Qwen/Qwen2-VL-2B-Instruct`." in hub and "base_model: Qwen/Qwen2-VL-2B-Instruct" in hub
    assert "perceptual-rewards evaluate reward=sa-iqa" in hub and "perceptual-rewards fit" in hub
    assert not [f for f in REPO_FILES if f in hub]
    cached = tmp_path / "hub" / "models--Qwen--Qwen2-VL-2B-Instruct" / "snapshots" / "0a1b2c"
    cached.mkdir(parents=True)
    snapshot = str(scorer_card(base_model=str(cached), **given))
    assert "Base model: `Qwen/Qwen2-VL-2B-Instruct`." in snapshot and str(tmp_path) not in snapshot
    assert "base_model: Qwen/Qwen2-VL-2B-Instruct" in snapshot


def test_the_card_names_no_folder_of_this_machine_and_says_where_the_fusion_weights_are(tmp_path, monkeypatch):
    """Data, the scorer's location and the command's paths by their names; the fusion weights in fusion_weights.json
    (the card said sa_iqa.json)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "ratings.jsonl").write_text("")
    card = str(
        scorer_card(
            base_model=str(tmp_path / "vlm"),
            dimensions={"q": ""},
            level_words=["good"],
            level_values=[5.0],
            train_data=str(tmp_path / "data" / "ratings.jsonl"),
            test_data=f"hf:{tmp_path}/saved:test",
            command=settings_command(
                "training/sft.py", "sft", SftSettings, {"model": {"path": str(tmp_path / "vlm")}, "out": "runs/sft"}
            ),
            location=str(tmp_path / "runs" / "sft" / "scorer"),
        )
    )
    assert str(tmp_path) not in card and "/home/" not in card, card
    assert "- training: `ratings.jsonl`" in card and "- test: `hf:saved:test`" in card
    assert "model.path=vlm" in card and '{"model": "THIS_FOLDER_OR_REPO_ID"}' in card
    assert "`fusion_weights.json`, once" in card and "(and, once `perceptual-rewards fit`" not in card
