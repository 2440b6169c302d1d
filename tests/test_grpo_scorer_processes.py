"""GRPO on the scorer under 2 processes. trl computes reward functions on each process's own completions and gathers
the numbers afterwards, so VisualQuality-R1's ranking reward ranks the images of one process: under a launch of one
image per process it had nothing to rank (its logged mean was 0). ``ranking_scope=step`` gathers the whole step's
answers into the reward; ``ranking_scope=process`` ranks each process's own (the release), and a launch that leaves a
process fewer than two images is refused before any model loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from training.scorer_rewards import ranking_reward

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _answers(*scores: str) -> list[list[dict[str, str]]]:
    return [[{"role": "assistant", "content": f"<think>.</think><answer>{s}</answer>"}] for s in scores]


# one global batch of 4 images of 3 answers: process 0 gets images a and b, process 1 images c and d
BATCH = {
    "completions": _answers("4", "5", "x", "2", "3", "2", "3", "3", "4", "1", "2", "1"),
    "mos": [4.5] * 3 + [2.0] * 3 + [3.0] * 3 + [1.5] * 3,
    "image_id": [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3,
}


def _half(i: int) -> dict[str, list]:
    return {key: values[6 * i : 6 * (i + 1)] for key, values in BATCH.items()}


def test_the_ranking_reward_of_each_scope_under_two_processes_equals_one_process_on_its_images(tmp_path):
    (tmp_path / "batch.json").write_text(json.dumps(BATCH))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    cmd += ["--mixed_precision", "no", str(ROOT / "tests/launched_rewards.py"), str(tmp_path / "batch.json")]
    done = subprocess.run([*cmd, str(tmp_path)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = [json.loads((tmp_path / f"rewards-{rank}.json").read_text()) for rank in (0, 1)]

    one_process = ranking_reward()
    whole, own = one_process(**BATCH), [one_process(**_half(0)), one_process(**_half(1))]
    assert got[0]["step"] + got[1]["step"] == pytest.approx(whole, abs=1e-12)  # answer by answer, in order
    assert [got[0]["process"], got[1]["process"]] == [pytest.approx(own[0], abs=1e-12), pytest.approx(own[1])]
    assert whole != pytest.approx(own[0] + own[1], abs=1e-3)  # the two scopes differ on this batch
    assert got[0]["step"][2] == got[0]["process"][2] == 0.0  # the failed answer, under both

    for rank in (0, 1):  # 6 answers of one image per process (the measured launch)
        assert got[rank]["refused_step"] is None  # the step holds 2 images to rank
        refusal = got[rank]["refused_process"]
        assert "ranking_scope=process: each of the 2 process(es) ranks its own 6 answers, 1 image(s)" in refusal
        assert "trainer.per_device_train_batch_size" in refusal and "ranking_scope=step" in refusal
