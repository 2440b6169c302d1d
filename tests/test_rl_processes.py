"""rl/grpo.py under `accelerate launch` with 2 CPU processes (gloo): DDP and DeepSpeed ZeRO-3. Each process builds its
reward and generator on its own device, held-out evaluation and the final save are collective (under ZeRO-3 they
hung or crashed when done by the main process alone), sample files never collide, and what should equal a 1-process
run does: the held-out rewards before any update. And a run whose reward server dies mid-run goes on, counting the
failures."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from transformers import TrainerCallback

from reward.core.cli import compose
from rl.commands.grpo import run as run_grpo
from rl.inpaint_tasks import write_procedural_tasks

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

ZERO3_CPU = """\
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  zero_stage: 3
  offload_optimizer_device: none
  offload_param_device: none
  gradient_accumulation_steps: 1
  zero3_init_flag: true
  zero3_save_16bit_model: true
mixed_precision: 'no'
num_machines: 1
num_processes: 2
machine_rank: 0
use_cpu: false
"""


def _overrides(lm: Path, tasks: Path, out: Path, vlm: Path, per_device: int) -> list[str]:
    return [
        f"policy.path={lm}",
        f"data={tasks}",
        f"output_dir={out}",
        "reward=scene-proxy",
        f"eval_rewards=[{{name: qbench, model: '{vlm}'}}]",  # a real model on each process, used collectively
        "trainer.num_generations=2",
        f"trainer.per_device_train_batch_size={per_device}",
        "trainer.max_steps=2",
        "eval.every=1",
        "eval_tasks=3",
        "samples_per_step=2",
        "trainer.learning_rate=5e-3",
        "trainer.beta=0",
        "trainer.max_completion_length=12",
        "trainer.save_steps=1000",
    ]


def _launch(launcher: list[str], overrides: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_BUILD_OPS": "0", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *launcher, str(ROOT / "rl/grpo.py"), *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def parts(tmp_path_factory, tiny_vlm_path):
    from reward.testing import make_tiny_lm

    root = tmp_path_factory.mktemp("rl-processes")
    lm = make_tiny_lm(root / "lm")
    tasks = write_procedural_tasks(root / "tasks", 12, size=48, mask_fraction=0.8)
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        single = run_grpo(compose("grpo", overrides=_overrides(lm, tasks, root / "one", tiny_vlm_path, 4)))
    heldout = [json.loads(line) for line in (root / "one" / "heldout.jsonl").read_text().splitlines()]
    return root, lm, tasks, single, heldout


@pytest.mark.parametrize(
    "launch",
    [
        pytest.param(["--multi_gpu", "--num_processes", "2", "--mixed_precision", "no"], id="ddp-gloo"),
        pytest.param(
            ["--config_file", "ZERO3"],
            id="zero3",
            marks=pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="no deepspeed"),
        ),
    ],
)
def test_two_processes_each_on_its_device_collective_heldout_and_save(parts, tiny_vlm_path, launch, tmp_path):
    root, lm, tasks, single, heldout_single = parts
    if launch == ["--config_file", "ZERO3"]:
        (tmp_path / "zero3.yaml").write_text(ZERO3_CPU)
        launch = ["--config_file", str(tmp_path / "zero3.yaml")]
    out = tmp_path / "run"
    proc = _launch(launch, _overrides(lm, tasks, out, tiny_vlm_path, 2), tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "grpo_result.json").read_text())
    assert result["global_step"] == 2 and result["complete"]
    procs = result["processes"]
    assert [p["process"] for p in procs] == [0, 1] and [p["local_rank"] for p in procs] == [0, 1]
    for p in procs:  # what each process actually built its models on (a model's parameters, not a setting)
        assert p["devices"]["policy"] == "cpu" and p["devices"]["eval_reward:qbench"] == "cpu"
        assert p["timing"]["steps"] == 2 and p["timing"]["per_step_s"]["reward"] > 0
    heldout = [json.loads(line) for line in (out / "heldout.jsonl").read_text().splitlines()]
    assert [r["step"] for r in heldout] == [0, 1, 2]  # collective evaluation: no hang under ZeRO-3
    for key in ("scene-proxy", "qbench"):  # before any update both launches see the same policy and tasks
        assert heldout[0][key] == pytest.approx(heldout_single[0][key], abs=1e-6)
    samples = [json.loads(line) for line in (out / "samples" / "samples.jsonl").read_text().splitlines()]
    paths = [r["path"] for r in samples]
    assert len(paths) == len(set(paths)) == 4 and all(Path(p).is_file() for p in paths)  # one writer, no collision
    from safetensors.torch import load_file

    saved = load_file(out / "policy" / "model.safetensors")  # the gathered weights under ZeRO-3, not placeholders
    reference = load_file(root / "one" / "policy" / "model.safetensors")
    assert saved.keys() == reference.keys() and all(saved[k].shape == reference[k].shape for k in saved)


class _KillServer(TrainerCallback):
    """Stops the reward's server after the first step; keeps the logged metrics."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self.stack = stack
        self.logs: list[dict] = []

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            self.stack.close()

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


def test_a_reward_server_that_dies_mid_run_gives_counted_nones_and_the_run_goes_on(parts, tiny_vlm, tmp_path):
    from reward.testing.openai_server import serve_openai

    _, lm, tasks, _, _ = parts
    stack = contextlib.ExitStack()
    url = stack.enter_context(serve_openai(tiny_vlm))
    server = f"{{base_urls: ['{url}'], model: tiny, backoff: 0.01, backoff_max: 0.02, max_retries: 1}}"
    overrides = [
        f"policy.path={lm}",
        f"data={tasks}",
        f"output_dir={tmp_path / 'run'}",
        "reward=qbench",
        "reward.backend=openai",
        f"reward.server={server}",
        "trainer.num_generations=2",
        "trainer.per_device_train_batch_size=4",
        "trainer.max_steps=3",
        "eval.every=0",
        "trainer.beta=0",
        "trainer.max_completion_length=8",
        "trainer.save_steps=1000",
    ]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("grpo", overrides=overrides)
    kill = _KillServer(stack)
    with stack:
        result = run_grpo(cfg, callbacks=[kill])
    assert result["global_step"] == 3 and result["complete"]
    history = [e for e in kill.logs if "qbench/failed" in e]
    assert history[0]["qbench/failed"] == 0 and history[0]["qbench/server_requests"] == 4
    assert [e["qbench/failed"] for e in history[1:]] == [4, 4]  # every item of the later steps, counted
    assert all(e["qbench/server_requests"] == 0 for e in history[1:])
