"""training/sft.py under `accelerate launch` with DeepSpeed ZeRO-2 and ZeRO-3 (one CPU process): DeepSpeed really
runs, and a ZeRO-3 run writes a scorer with the gathered weights; and ZeRO-3 with two CPU processes, launched by a
config file and by the ``--use_deepspeed --zero_stage 3`` flags."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import accelerate_config

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed extra not installed"),
]

CPU_ZERO2 = accelerate_config(2, processes=1)


ZERO3_TWO = accelerate_config(3, processes=2)
FLAGS = ["--use_deepspeed", "--zero_stage", "3", "--num_processes", "2"]  # zero3_save_16bit_model left off
GPU_CHECK_ZERO3 = [  # the launch of bench/gpu_check.py's ZeRO-3 section, on one CPU process
    *("--use_deepspeed", "--zero_stage", "3", "--num_processes", "1", "--mixed_precision", "no"),
    *("--zero3_save_16bit_model", "true", "--zero3_init_flag", "false", "--gradient_accumulation_steps", "1"),
]


def _launch_sft(
    config: str | list[str],
    model: Path,
    tmp_path: Path,
    *extra: str,
    ratings: Path | None = None,
    precision: str = "no",
) -> tuple[subprocess.CompletedProcess, Path]:
    """training/sft.py under ``accelerate launch --config_file`` (a config's text) or the given launcher flags, on a
    tiny benchmark (or the manifest ``ratings``), with the launcher's ``--mixed_precision``."""
    from training.procedural.synthetic import write_benchmark

    ratings = ratings or write_benchmark(tmp_path / "bench", 6, size=56, seed=3).ratings
    if isinstance(config, str):
        (tmp_path / "accelerate.yaml").write_text(config)
        config = ["--config_file", str(tmp_path / "accelerate.yaml")]
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        *config,
        "--mixed_precision",
        precision,
        str(ROOT / "training/sft.py"),
        f"model.path={model}",
        f"data.train={ratings}",
        f"out={out}",
        "trainer.max_steps=2",
        "trainer.per_device_train_batch_size=4",
        "trainer.gradient_accumulation_steps=1",
        "prompt.type=1",
        *extra,
    ]
    env = {**os.environ, "DS_BUILD_OPS": "0", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, out


@pytest.fixture(autouse=True)
def _ops(deepspeed_ops):
    """DeepSpeed's CPU op built once for the test run, in a folder of its own."""


def test_sft_runs_under_deepspeed_zero2_in_the_shipped_configs_bf16(tiny_vlm_path, tmp_path):
    """configs/accelerate/zero2.yaml's bf16, on a CPU: trainer.bf16 (null) follows the launcher (transformers refused
    the run: "ds bf16.enabled=True vs hf bf16=False")."""
    _, out = _launch_sft(CPU_ZERO2, tiny_vlm_path, tmp_path, "trainer.save_steps=2", precision="bf16")
    assert torch.load(out / "checkpoint-2" / "training_args.bin", weights_only=False).bf16  # the launcher's, on a CPU
    # DeepSpeed's own checkpoint layout proves it was not silently dropped
    assert list((out / "checkpoint-2").glob("global_step2/*optim_states.pt"))
    assert (out / "scorer" / "sa_iqa.json").exists()


def test_zero3_scorer_holds_the_gathered_trained_weights(tiny_vlm_path, tmp_path):
    """ZeRO-3 partitions the weights: the scorer must hold the gathered ones (not empty placeholders) and load."""
    from safetensors.torch import load_file

    from reward.rewards.sa_iqa import build
    from tests.conftest import random_images

    proc, out = _launch_sft(
        GPU_CHECK_ZERO3, tiny_vlm_path, tmp_path, "trainer.save_steps=100", "trainer.learning_rate=1e-2"
    )
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
    scores = build({"model": str(scorer), "batch_size": 4}).score(random_images(2)).scores
    assert scores.shape == (2,) and bool(((scores >= 1) & (scores <= 5)).all())


@pytest.mark.parametrize("launch", [pytest.param(ZERO3_TWO, id="config-file"), pytest.param(FLAGS, id="flags")])
def test_zero3_with_two_processes_trains_and_writes_the_gathered_scorer(tiny_vlm_path, tmp_path, launch):
    from safetensors.torch import load_file

    proc, out = _launch_sft(launch, tiny_vlm_path, tmp_path, "trainer.save_steps=100", "trainer.learning_rate=1e-2")
    assert "effective batch 8 = 4 per device x 1 accumulation x 2 processes" in proc.stdout + proc.stderr
    trained = load_file(out / "scorer" / "model.safetensors")
    initial = load_file(tiny_vlm_path / "model.safetensors")
    assert set(trained) == set(initial) and all(trained[k].shape == initial[k].shape for k in initial)
    name = next(k for k in initial if k.endswith("lm_head.weight"))
    assert not torch.equal(trained[name], initial[name])  # trained, gathered from both processes' shards


def test_deqas_loss_runs_under_zero3_and_trains_the_head_it_reads(tiny_vlm_path, tmp_path):
    """loss.kind=deqa reads the level word's logits through the LM head inside the forward pass: under ZeRO-3 (weights
    partitioned, gathered by DeepSpeed's hooks) it runs, logs its parts and trains the head."""
    import json
    import re

    from safetensors.torch import load_file

    from tests.conftest import random_images

    rows = []
    for i, image in enumerate(random_images(4, seed=5)):
        image.save(tmp_path / f"{i}.png")
        rows.append({"image": f"{i}.png", "dimension": "quality", "mos": 1.5 + i, "std": 0.5})
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    extra = ["prompt.dimensions=[quality]", "data.soft_targets=deqa", "data.level_range=[1,5]", "loss.kind=deqa"]
    extra += ["trainer.save_steps=100", "trainer.learning_rate=1e-2", "trainer.logging_steps=1"]
    proc, out = _launch_sft(GPU_CHECK_ZERO3, tiny_vlm_path, tmp_path, *extra, ratings=tmp_path / "train.jsonl")
    kl = [float(v) for v in re.findall(r"'deqa_kl': '([0-9.e+-]+)'", proc.stdout + proc.stderr)]
    assert len(kl) == 2 and all(0 < v < 100 for v in kl), (proc.stdout + proc.stderr)[-3000:]
    trained, initial = load_file(out / "scorer" / "model.safetensors"), load_file(tiny_vlm_path / "model.safetensors")
    name = next(k for k in initial if k.endswith("lm_head.weight"))
    assert trained[name].shape == initial[name].shape and not torch.equal(trained[name], initial[name])
