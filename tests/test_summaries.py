"""Curves and summaries: every command's closing summary, SFT's loss / learning-rate curve, report_to checked early."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from PIL import Image

from conftest import run_cli
from reward.commands.evaluate import EvaluateSettings
from reward.core.summary import log_summary
from rl.tasks import TasksSettings
from training.commands.sft import SftSettings
from training.curves import curve_series, write_train_curve
from training.shared.launch import BACKENDS
from training.synthetic import SyntheticSettings


def _closing(stdout: str, title: str) -> list[str]:
    """The lines of ``stdout`` from the summary's ``done: TITLE`` line to the end."""
    lines = stdout.rstrip("\n").splitlines()
    start = max(i for i, line in enumerate(lines) if f"done: {title}" in line)
    return lines[start:]


def test_a_summary_names_the_facts_and_each_file_given():
    text = log_summary("fit", {"pairs": 40, "ties": None, "SRCC": 0.51234}, {"weights": "w.json", "plot": None})
    assert text == "done: fit -- pairs 40, SRCC 0.512\n  weights: w.json"


def test_the_curve_plots_every_logged_loss_and_learning_rate_and_not_the_closing_summary(tmp_path):
    history = [
        {"step": 1, "loss": 3.0, "learning_rate": 0.0, "epoch": 0.1},
        {"step": 2, "loss": 2.5, "learning_rate": 1e-3},
        {"step": 2, "eval_loss": 9.0},
        {"step": 3, "loss": 2.0, "learning_rate": 5e-4},
        {"step": 3, "train_loss": 2.5, "train_runtime": 1.0},
    ]
    assert curve_series(history) == {
        "loss": [[1, 3.0], [2, 2.5], [3, 2.0]],
        "learning_rate": [[1, 0.0], [2, 1e-3], [3, 5e-4]],
    }
    paths = write_train_curve(history, tmp_path)
    assert json.loads((tmp_path / "train_curve.json").read_text())["loss"] == [[1, 3.0], [2, 2.5], [3, 2.0]]
    assert Image.open(paths["png"]).size[0] > 300


def test_the_tasks_and_benchmark_commands_end_with_their_summary(tmp_path, capsys):
    from rl.tasks import run as run_tasks
    from training.synthetic import run as run_synthetic

    assert run_cli("tasks", run_tasks, [f"out={tmp_path / 'tasks'}", "n=3", "size=32"], schema=TasksSettings) == 0
    lines = _closing(capsys.readouterr().out, "tasks")
    assert lines[0].endswith("done: tasks -- tasks 3, size 32")
    assert lines[1:] == [f"  tasks: {tmp_path / 'tasks' / 'tasks.jsonl'}"]

    assert (
        run_cli("synthetic", run_synthetic, [f"out={tmp_path / 'bench'}", "n=4", "size=32"], schema=SyntheticSettings)
        == 0
    )
    lines = _closing(capsys.readouterr().out, "synthetic benchmark")
    assert "images 4, size 32" in lines[0]
    assert f"  ratings: {tmp_path / 'bench' / 'ratings.jsonl'}" in lines
    assert f"  pairs: {tmp_path / 'bench' / 'pairs.jsonl'}" in lines


def test_evaluate_ends_with_its_summary_naming_the_metrics_and_scores(tmp_path, tiny_vlm_path, capsys):
    from reward.commands.evaluate import run as run_evaluate

    (tmp_path / "img").mkdir()
    rows = []
    for i in range(4):
        Image.fromarray(np.full((56, 56, 3), 60 * i, np.uint8)).save(tmp_path / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "lighting", "mos": 1.0 + i})
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    argv = ["reward=qbench", f"reward.model={tiny_vlm_path}", f"data={tmp_path / 'r.jsonl'}", f"out={out}"]
    assert run_cli("evaluate", run_evaluate, argv, schema=EvaluateSettings) == 0
    lines = _closing(capsys.readouterr().out, "evaluate qbench")
    assert "rows 4, skipped 0, SRCC" in lines[0]
    assert f"  metrics: {out / 'metrics.json'}" in lines and f"  scores: {out / 'scores.jsonl'}" in lines


@pytest.mark.parametrize("backend", ["tensorboard", "wandb"])
def test_a_report_to_backend_that_is_not_installed_is_refused_before_any_model_loads(tmp_path, capsys, backend):
    from training.commands.sft import run as run_sft

    if any(importlib.util.find_spec(m) for m in BACKENDS[backend][0]):
        pytest.skip(f"{backend} is installed here")
    (tmp_path / "model").mkdir()  # files that exist (never read: the settings are refused first)
    (tmp_path / "data.jsonl").write_text("")
    argv = [
        f"model.path={tmp_path / 'model'}",
        f"data.train={tmp_path / 'data.jsonl'}",
        f"out={tmp_path / 'out'}",
        f"trainer.report_to={backend}",
    ]
    assert run_cli("sft", run_sft, argv, schema=SftSettings) == 2
    err = capsys.readouterr().err
    assert f"trainer.report_to={backend}: {backend} is not installed; pip install" in err
    assert not (tmp_path / "out").exists()


def test_the_report_to_backends_are_transformers_own():
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    assert set(BACKENDS) == set(INTEGRATION_TO_CALLBACK)


def test_an_unknown_report_to_backend_gets_a_suggestion(tmp_path, capsys):
    from training.commands.sft import run as run_sft

    argv = [f"model.path={tmp_path}", f"data.train={tmp_path}", f"out={tmp_path / 'o'}"]
    assert run_cli("sft", run_sft, [*argv, "trainer.report_to=tensorbord"], schema=SftSettings) == 2
    assert "trainer.report_to=tensorbord: unknown backend. Did you mean 'tensorboard'?" in capsys.readouterr().err
