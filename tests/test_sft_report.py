"""SFT's report step: only the main process writes the run's result files (every process runs ``report``)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from reward.core.config import parse
from training.commands.sft import Trained, report
from training.commands.sft_settings import SftSettings
from training.commands.sft_setup import Setup, check_output_folder, scorer_meta


def _setup(tmp_path) -> tuple[Setup, dict]:
    cfg = {"model": {"path": "Org/vlm"}, "data": {"train": "synthetic"}, "out": str(tmp_path / "run")}
    cfg["trainer"] = {"max_steps": 2}
    settings = parse(SftSettings, cfg)
    output = check_output_folder(settings)
    output.create()
    setup = Setup(settings, output.path, output, scorer_meta(settings), None, None, 3, None, None, None)
    return setup, cfg


def _trained(setup: Setup, main_process: bool) -> Trained:
    log = [{"step": 1, "loss": 2.0, "learning_rate": 1e-3}, {"step": 2, "loss": 1.5, "learning_rate": 1e-3}]
    trainer = SimpleNamespace(state=SimpleNamespace(log_history=log))
    scorer = setup.out / "scorer" if main_process else None
    if scorer is not None:
        scorer.mkdir()
    return Trained(trainer, 2, 1.75, None, main_process, scorer)


def test_a_process_other_than_the_main_one_writes_no_result_file(tmp_path):
    setup, cfg = _setup(tmp_path)
    before = sorted(p.name for p in setup.out.iterdir())
    result = report(setup, _trained(setup, main_process=False), setup.settings)
    assert result["global_step"] == 2 and result["skipped_train_rows"] == 3 and "scorer" not in result
    assert sorted(p.name for p in setup.out.iterdir()) == before  # no sft_result.json, curve or card


def test_the_main_process_writes_the_result_with_its_scorer(tmp_path):
    setup, cfg = _setup(tmp_path)
    result = report(setup, _trained(setup, main_process=True), setup.settings)
    written = json.loads((setup.out / "sft_result.json").read_text())
    assert written["scorer"] == result["scorer"] == str(setup.out / "scorer")
    assert written["global_step"] == 2 and written["train_loss"] == 1.75 and written["skipped_train_rows"] == 3
    assert (setup.out / "scorer" / "README.md").is_file() and (setup.out / "train_curve.png").is_file()
