"""training/sft.py under `accelerate launch` with DeepSpeed ZeRO-2 (one CPU process): DeepSpeed really runs."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed extra not installed"),
]

CPU_ZERO2 = """\
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  zero_stage: 2
  offload_optimizer_device: none
  offload_param_device: none
  gradient_accumulation_steps: 1
  zero3_init_flag: false
mixed_precision: 'no'
num_machines: 1
num_processes: 1
machine_rank: 0
use_cpu: false
"""


def test_sft_runs_under_deepspeed_zero2(tiny_vlm_path, tmp_path):
    from training.synthetic import write_benchmark

    bench = write_benchmark(tmp_path / "bench", 6, size=56, seed=3)
    (tmp_path / "zero2.yaml").write_text(CPU_ZERO2)
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(tmp_path / "zero2.yaml"),
        str(ROOT / "training/sft.py"), f"model.path={tiny_vlm_path}", f"data.train={bench.ratings}",
        f"output_dir={out}", "trainer.max_steps=2", "trainer.save_steps=2", "trainer.per_device_train_batch_size=4",
        "trainer.gradient_accumulation_steps=1", "prompt.type=1",
    ]  # fmt: skip
    env = {**os.environ, "DS_BUILD_OPS": "0"}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # DeepSpeed's own checkpoint layout proves it was not silently dropped
    assert list((out / "checkpoint-2").glob("global_step2/*optim_states.pt"))
    assert (out / "scorer" / "sa_iqa.json").exists()
