"""A checkpoint cut short by a kill during its save is passed over: SFT resumes from the last complete one, says so,
and the trainer's key warnings about weights our code restored are not printed."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from transformers import TrainerCallback

from reward.core.cli import compose
from reward.core.config import parse
from training.commands.sft import SftSettings
from training.commands.sft import run as run_sft
from training.procedural.synthetic import write_benchmark
from training.shared.checkpoints import checkpoint_problem, last_complete_checkpoint

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _cfg(model: Path, data: Path, out: Path):
    overrides = [
        f"model.path={model}",
        f"data.train={data}",
        f"out={out}",
        "trainer.max_steps=6",
        "trainer.save_steps=2",
        "trainer.per_device_train_batch_size=4",
        "trainer.gradient_accumulation_steps=1",  # one batch a step (the paper's 32 are the whole 48 rows: 12 each)
        "trainer.learning_rate=1e-3",
        "trainer.logging_steps=1",
        "prompt.type=1",
    ]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("sft", overrides=overrides, schema=SftSettings)


class _Crash(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 5:
            raise KeyboardInterrupt("killed at step 5")


@pytest.fixture(scope="module")
def crashed(tiny_vlm_path, tmp_path_factory) -> tuple[Path, Path]:
    """A real SFT run killed at step 5: checkpoint-2 and checkpoint-4, both complete."""
    bench = write_benchmark(tmp_path_factory.mktemp("bench"), 12, size=56, seed=5)
    out = tmp_path_factory.mktemp("crashed") / "run"
    with pytest.raises(KeyboardInterrupt):
        run_sft(parse(SftSettings, _cfg(tiny_vlm_path, bench.ratings, out)), callbacks=[_Crash()])
    assert checkpoint_problem(out / "checkpoint-2") is None and checkpoint_problem(out / "checkpoint-4") is None
    return out, bench.ratings


def _truncate(checkpoint: Path) -> None:
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def _no_state(checkpoint: Path) -> None:
    (checkpoint / "trainer_state.json").unlink()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.slow
def test_resume_passes_over_a_truncated_last_checkpoint_and_says_so(crashed, tiny_vlm_path, tmp_path):
    source, data = crashed
    out = tmp_path / "run"
    shutil.copytree(source, out)
    _truncate(out / "checkpoint-4")
    records = _Records()
    for name in ("training.shared.checkpoints", "transformers"):
        logging.getLogger(name).addHandler(records)
    try:
        result = run_sft(parse(SftSettings, _cfg(tiny_vlm_path, data, out)))
    finally:
        for name in ("training.shared.checkpoints", "transformers"):
            logging.getLogger(name).removeHandler(records)
    assert result["global_step"] == 6
    said = [line for line in records.lines if "is incomplete" in line]
    assert len(said) == 1 and "checkpoint-4" in said[0] and "model.safetensors is truncated" in said[0]
    assert (out / "incomplete-checkpoint-4" / "trainer_state.json").is_file()  # moved aside, not deleted
    state = json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())
    assert [e["step"] for e in state["log_history"] if "loss" in e][-4:] == [3, 4, 5, 6]  # resumed from step 2
    assert checkpoint_problem(out / "checkpoint-4") is None  # step 4 saved again, whole
    # the weights were restored by our code: the trainer's "missing / unexpected keys" warnings are not printed
    assert not [line for line in records.lines if "keys in the checkpoint model loaded" in line]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("damage", "why"),
    [(_truncate, "model.safetensors is truncated"), (_no_state, "no trainer_state.json")],
    ids=["truncated-weights", "no-trainer-state"],
)
def test_an_incomplete_real_checkpoint_is_passed_over_for_the_one_before(crashed, tmp_path, damage, why, caplog):
    out = tmp_path / "run"
    shutil.copytree(crashed[0], out)
    damage(out / "checkpoint-4")
    with caplog.at_level(logging.WARNING, logger="training.shared.checkpoints"):
        assert last_complete_checkpoint(out) == str(out / "checkpoint-2")
    assert why in caplog.text and "checkpoint-4" in caplog.text
    assert not (out / "checkpoint-4").exists() and (out / "incomplete-checkpoint-4").is_dir()


def test_no_complete_checkpoint_means_starting_anew(tmp_path, caplog):
    (tmp_path / "checkpoint-3").mkdir()
    (tmp_path / "checkpoint-3" / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")
    with caplog.at_level(logging.WARNING, logger="training.shared.checkpoints"):
        assert last_complete_checkpoint(tmp_path) is None
    assert "no trainer_state.json" in caplog.text and "starts again from its first step" in caplog.text
