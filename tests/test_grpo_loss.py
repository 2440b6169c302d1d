"""GRPO's objective as SA-IQA eq. 8 (App. D.3): each completion's token losses averaged by its own length, then over
the group, which is trl's loss_type "grpo" (trl's own default, "dapo", averages over all the batch's tokens)."""

from __future__ import annotations

import json
from pathlib import Path

from hydra import initialize_config_dir

from reward.core.cli import compose
from rl.commands.grpo import GrpoSettings
from training.procedural.synthetic import write_inpainting_tasks

ROOT = Path(__file__).resolve().parents[1]


def _settings(tmp_path, *extra: str):
    from rl.commands.grpo import parse_settings

    tasks = write_inpainting_tasks(tmp_path / "tasks", 16, size=32, seed=0)
    base = [f"policy.path={tmp_path}", f"data={tasks}", f"out={tmp_path / 'run'}", "reward=scene-proxy"]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return parse_settings(compose("grpo", overrides=[*base, *extra], schema=GrpoSettings))


def test_the_default_loss_is_eq_8_and_is_recorded_in_run_json(tmp_path):
    from rl.commands.grpo import grpo_args, prepare

    s = _settings(tmp_path)
    assert grpo_args(s, tmp_path / "run").loss_type == "grpo"
    prepare(s, tmp_path / "run")
    assert json.loads((tmp_path / "run" / "run.json").read_text())["settings"]["trainer"]["loss_type"] == "grpo"
    other = _settings(tmp_path, "trainer.loss_type=dapo")  # trl's other losses stay one override away
    assert grpo_args(other, tmp_path / "run").loss_type == "dapo"


def test_help_shows_the_loss_type(capsys):
    from reward.core.cli import main
    from rl.commands.grpo import run

    main("grpo", run, doc="rl/grpo.py", argv=["--help"], schema=GrpoSettings)
    out = capsys.readouterr().out
    assert "\n  loss_type: grpo  # eq. 8: each completion's token losses averaged over its own length" in out
    assert "\n  num_generations: 8  # group size G (the paper: 8)\n" in out  # each trainer entry: its own help
    assert "\n  per_device_train_batch_size: 32  # completions per process and step" in out
