"""Learning proof: SA-IQA SFT of the tiny VLM on fresh procedural scenes ranks held-out lighting correctly."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import initialize_config_dir

from reward.core.cli import compose
from reward.core.config import parse
from training.commands.sft import SftSettings
from training.commands.sft import run as run_sft
from training.procedural.synthetic import write_benchmark

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.slow
def test_sft_lifts_heldout_lighting_srcc_above_0_6(tiny_vlm_path, tmp_path):
    bench = write_benchmark(tmp_path / "heldout", 60, size=64, seed=4242)  # scenes never seen in training
    overrides = [
        f"model.path={tiny_vlm_path}",
        "data.train=synthetic",
        f"data.test={bench.ratings}",
        f"out={tmp_path / 'run'}",
        "prompt.type=2",
        "prompt.dimensions=[lighting,harmony]",
        "trainer.max_steps=80",  # measured: SRCC -0.50 -> 0.94 after 80 steps of 16 (0.76 after 40)
        "trainer.per_device_train_batch_size=16",
        "trainer.gradient_accumulation_steps=1",
        "trainer.learning_rate=1e-3",
        "trainer.lr_scheduler_type=constant",
        "trainer.save_steps=1000",
        "trainer.logging_steps=40",
        "eval_before=true",
    ]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        result = run_sft(parse(SftSettings, compose("sft", overrides=overrides, schema=SftSettings)))
    before, after = result["metrics_before"]["lighting"]["srcc"], result["metrics"]["lighting"]["srcc"]
    assert after >= 0.6, f"held-out lighting SRCC {before:.3f} -> {after:.3f}"
    assert after - before >= 0.4
