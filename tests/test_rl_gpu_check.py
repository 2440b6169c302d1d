"""bench/rl_gpu_check.sh's CPU dry run: GRPO with the reward in-process and served, and with trl's default KL term
under DeepSpeed ZeRO-3 (a full and a LoRA policy), end to end on tiny models, every row of its table present and no
section failed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_rl_gpu_check_dry_run_prints_every_row_and_no_failure(tmp_path, request):
    if importlib.util.find_spec("deepspeed") is not None:
        request.getfixturevalue("deepspeed_ops")  # its ZeRO-3 sections build DeepSpeed's CPU op once per test run
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("OUT", None)
    cmd = ["bash", str(ROOT / "bench/rl_gpu_check.sh"), "--dry-run", "--out", str(tmp_path), "--work", str(tmp_path)]
    cmd += ["--budget-s", "3600"]  # every section starts, however loaded this machine is (the GPU's budget is 420 s)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {(s, m): v for s, m, v in json.loads((tmp_path / "rl_gpu_check.json").read_text())}
    assert not [k for k in rows if k[1] == "FAILED"], rows
    local, served = "rl grpo in-process reward", "rl grpo served reward"
    for section in (local, served):
        assert rows[(section, "steps done")] == "2 of 2"
        assert rows[(section, "devices as configured (cpu)")] == "yes"
        assert rows[(section, "policy dtype (dtype=auto, full fine-tuning)")] == "torch.float32"
        for part in ("policy_generation", "inpainting", "reward", "update_and_rest"):
            assert float(rows[(section, f"s/step {part}")]) >= 0
    assert float(rows[(local, "policy elements changed (lr 1e-6)")]) > 0.5  # fp32 master weights move
    assert rows[(local, "device reward:qbench")] == "cpu" and rows[(served, "device reward:qbench")] == "none"
    assert int(rows[(served, "server requests answered")]) > 0 and rows[(served, "failed scores (counted)")] == "0"
    assert float(rows[("rl served vs in-process scores", "max |served - in-process| qbench (4 images)")]) < 1e-5
    assert "section" in proc.stdout and "s/step inpainting" in proc.stdout  # the table on stdout
    assert f"{local} | steps done | 2 of 2" in proc.stdout  # and its rows as they come, one per line
    assert float(rows[("rl generators", "flux-fill candidate alone vs batched, max |diff| (0-255)")]) <= 2.0
    if importlib.util.find_spec("deepspeed") is not None:  # trl's default KL term under ZeRO-3, full and LoRA
        for section, reference in (
            ("rl grpo zero3 kl", "zero3-sharded"),
            ("rl grpo zero3 kl lora", "policy without its adapter"),
        ):
            assert rows[(section, "steps done")] == "2 of 2" and rows[(section, "reference model")] == reference
            assert float(rows[(section, "beta")]) > 0


def test_the_checkouts_metadata_declares_the_entry_points_an_install_declares(tmp_path):
    """On the GPU machine the checkout runs from PYTHONPATH, uninstalled: its ZeRO-3 sections failed with "unknown
    reward 'scene-proxy'". The metadata bench/gpu_env.sh writes declares what ``pip install -e .`` declared here."""
    from importlib import metadata

    sys.path.insert(0, str(ROOT / "bench"))
    from checkout_metadata import write_metadata

    write_metadata(tmp_path)
    [written] = metadata.distributions(path=[str(tmp_path)])
    installed = metadata.distribution("perceptual-rewards")
    assert written.version == installed.version
    for group in ("perceptual_rewards.rewards", "perceptual_rewards.commands", "console_scripts"):
        mine = {(p.name, p.value) for p in written.entry_points.select(group=group)}
        assert mine and mine == {(p.name, p.value) for p in installed.entry_points.select(group=group)}
    assert written.entry_points.select(group="perceptual_rewards.rewards")["scene-proxy"].load()["higher_is_better"]


H200_LAUNCH = """[rank0]:   File "/work/main/reward/integrations/reward_set.py", line 133, in __init__
[rank0]:     raise ValueError("\\n".join(problems))
[rank0]: ValueError: reward 'scene-proxy': unknown reward 'scene-proxy'. Known rewards: chat-judge, qbench.
E1204 18:43:38.361000 535 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: 1) local_rank: 0
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
"""  # the end of a failed ZeRO-3 launch's output on the H200 (shortened)


def test_a_failed_launch_is_named_by_its_ranks_error_not_by_the_launchers():
    sys.path.insert(0, str(ROOT / "bench"))
    from rl_gpu_check import launch_error

    assert launch_error(H200_LAUNCH).startswith("[rank0]: ValueError: reward 'scene-proxy': unknown reward")
    assert launch_error(H200_LAUNCH.replace("[rank0]: ", "")).startswith("torch.distributed.elastic")
    assert launch_error("Killed\n") == "no exception line; see the log"
