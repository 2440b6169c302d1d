"""training/sft.py under `accelerate launch` with DeepSpeed ZeRO-3 (one CPU process): the scorer holds the
gathered weights, not ZeRO-3's empty placeholders, and loads with reward=sa-iqa."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed extra not installed"),
]

CPU_ZERO3 = """\
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  zero_stage: 3
  offload_optimizer_device: none
  offload_param_device: none
  gradient_accumulation_steps: 1
  zero3_init_flag: false
  zero3_save_16bit_model: true
mixed_precision: 'no'
num_machines: 1
num_processes: 1
machine_rank: 0
use_cpu: false
"""


def test_zero3_scorer_holds_the_gathered_trained_weights(tiny_vlm_path, tmp_path):
    from safetensors.torch import load_file

    from reward.sa_iqa import build
    from tests.conftest import random_images
    from training.synthetic import write_benchmark

    bench = write_benchmark(tmp_path / "bench", 6, size=56, seed=3)
    (tmp_path / "zero3.yaml").write_text(CPU_ZERO3)
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(tmp_path / "zero3.yaml"),
        str(ROOT / "training/sft.py"), f"model.path={tiny_vlm_path}", f"data.train={bench.ratings}",
        f"output_dir={out}", "trainer.max_steps=2", "trainer.save_steps=100", "trainer.per_device_train_batch_size=4",
        "trainer.gradient_accumulation_steps=1", "trainer.learning_rate=1e-2", "prompt.type=1",
    ]  # fmt: skip
    env = {**os.environ, "DS_BUILD_OPS": "0"}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "effective batch 4 = 4 per device x 1 accumulation x 1 processes" in proc.stdout + proc.stderr
    scorer = out / "scorer"
    trained = load_file(scorer / "model.safetensors")
    initial = load_file(tiny_vlm_path / "model.safetensors")
    assert set(trained) == set(initial)
    assert all(trained[k].shape == initial[k].shape for k in initial)  # ZeRO-3 placeholders have shape [0]
    name = next(k for k in initial if k.endswith("lm_head.weight"))
    assert not torch.equal(trained[name], initial[name])  # the LLM was trained ...
    vit = next(k for k in initial if "visual" in k and k.endswith("weight"))
    assert torch.equal(trained[vit], initial[vit])  # ... the frozen ViT was not
    reward = build({"path": str(scorer), "batch_size": 4})
    scores = reward.score(random_images(2)).scores
    assert scores.shape == (2,) and bool(((scores >= 1) & (scores <= 5)).all())
