"""rl/grpo.py under `accelerate launch` with 2 CPU processes (gloo): DDP, DeepSpeed ZeRO-3 (a config file, and the
``--use_deepspeed --zero_stage 3`` flags; a full and a LoRA policy) and ZeRO-2, with trl's default KL term (beta > 0:
a reference model, sharded under ZeRO-3 like the policy; with LoRA the policy with its adapter disabled). Each process
builds its reward and generator on its own device, held-out evaluation and the final save are collective (under
ZeRO-3 they hung or crashed when done by the main process alone), sample files never collide, and what should equal
a 1-process run does: the held-out rewards before any update. The console shows one line per step and a closing
summary. And a run whose reward server dies mid-run stops at the first step without a usable reward, counting the
failures."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from transformers import TrainerCallback

from conftest import accelerate_config
from reward.core.cli import compose
from reward.core.config import parse
from rl.commands.grpo import run as run_grpo
from rl.commands.grpo_settings import GrpoSettings
from training.procedural.synthetic import write_inpainting_tasks
from training.shared.cards import public

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

ZERO2_CPU = accelerate_config(2, processes=2)
ZERO3_CPU = accelerate_config(3, processes=2)


def _overrides(lm: Path, tasks: Path, out: Path, vlm: Path, per_device: int) -> list[str]:
    return [
        f"policy.path={lm}",
        f"data={tasks}",
        f"out={out}",
        "reward=scene-proxy",
        f"eval_rewards=[{{name: qbench, model: '{vlm}'}}]",  # a real model on each process, used collectively
        "trainer.num_generations=2",
        f"trainer.per_device_train_batch_size={per_device}",
        "trainer.gradient_accumulation_steps=1",
        "trainer.max_steps=2",
        "eval.every=1",
        "eval_tasks=3",
        "samples_per_step=2",
        "trainer.learning_rate=5e-3",
        "trainer.max_completion_length=12",
        "trainer.save_steps=1000",
    ]


def _launch(launcher: list[str], overrides: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """A 2-process launch; a stalled one stops itself (stall_timeout_s) long before the test's own timeout."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_BUILD_OPS": "0", "HF_HUB_OFFLINE": "1"}
    overrides = [*overrides, "stall_timeout_s=300"]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *launcher, str(ROOT / "rl/grpo.py"), *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def parts(tmp_path_factory, tiny_vlm_path, tiny_lm_path):
    root = tmp_path_factory.mktemp("rl-processes")
    lm = tiny_lm_path
    tasks = write_inpainting_tasks(root / "tasks", 12, size=48, mask_fraction=0.8)
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        single = run_grpo(
            parse(
                GrpoSettings,
                compose("grpo", overrides=_overrides(lm, tasks, root / "one", tiny_vlm_path, 4), schema=GrpoSettings),
            )
        )
    heldout = [json.loads(line) for line in (root / "one" / "heldout.jsonl").read_text().splitlines()]
    return root, lm, tasks, single, heldout


NO_DEEPSPEED = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="no deepspeed")
# bf16 as the shipped configs/accelerate/zero3.yaml: trainer.bf16 (null) follows it, even on a CPU (DeepSpeed's config
# follows the launcher, and transformers refused the run: "ds bf16.enabled=True vs hf bf16=False"); the configs: no
FLAGS = ["--use_deepspeed", "--zero_stage", "3", "--num_processes", "2", "--mixed_precision", "bf16"]


def _launcher(launch: list[str], tmp_path: Path) -> list[str]:
    """A config named by its variable (ZERO3_CPU, ZERO2_CPU) is written to a file first."""
    if launch[:1] == ["--config_file"] and launch[1] in ("ZERO3_CPU", "ZERO2_CPU"):
        (tmp_path / "accelerate.yaml").write_text(globals()[launch[1]])
        return ["--config_file", str(tmp_path / "accelerate.yaml")]
    return launch


@pytest.mark.parametrize(
    "launch,beta",
    [
        pytest.param(["--multi_gpu", "--num_processes", "2", "--mixed_precision", "no"], 0, id="ddp-gloo-beta0"),
        pytest.param(["--config_file", "ZERO3_CPU"], None, id="zero3", marks=NO_DEEPSPEED),
    ],
)
def test_two_processes_each_on_its_device_collective_heldout_and_save(
    parts, tiny_vlm_path, launch, beta, tmp_path, request
):
    root, lm, tasks, single, heldout_single = parts
    if launch[1] == "ZERO3_CPU":
        request.getfixturevalue("deepspeed_ops")  # DeepSpeed's CPU op, built once for the test run
    out = tmp_path / "run"
    overrides = _overrides(lm, tasks, out, tiny_vlm_path, 2) + ([f"trainer.beta={beta}"] if beta is not None else [])
    proc = _launch(_launcher(launch, tmp_path), overrides, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "grpo_result.json").read_text())
    assert result["global_step"] == 2 and result["complete"]
    expected = (
        "none" if beta == 0 else "zero3-sharded"
    )  # trl's default beta: a reference model, sharded like the policy
    assert {p["reference"] for p in result["processes"]} == {expected}
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
    command = (out / "policy" / "README.md").read_text().split("## How it was made")[1]
    given = shlex.join(["accelerate", "launch", *public(_launcher(launch, tmp_path))])  # as typed, files by name
    assert f"\n{given} rl/grpo.py reward=scene-proxy " in command
    from safetensors.torch import load_file

    saved = load_file(out / "policy" / "model.safetensors")  # the gathered weights under ZeRO-3, not placeholders
    reference = load_file(root / "one" / "policy" / "model.safetensors")
    assert saved.keys() == reference.keys() and all(saved[k].shape == reference[k].shape for k in saved)


@pytest.mark.parametrize(
    "launch,lora,reference",
    [
        pytest.param(FLAGS, False, "zero3-sharded", id="zero3-flags"),
        pytest.param(["--config_file", "ZERO3_CPU"], True, "policy without its adapter", id="zero3-lora"),
        pytest.param(["--config_file", "ZERO2_CPU"], False, "whole", id="zero2"),
    ],
)
@NO_DEEPSPEED
def test_deepspeed_launches_train_with_the_default_kl_term(parts, deepspeed_ops, launch, lora, reference, tmp_path):
    """trl's default beta builds a reference model: under ZeRO-3 inside zero.Init (it failed DeepSpeed's batch check,
    seeing one process), for LoRA the policy with its adapter disabled. Two steps train and the KL term moves."""
    _, lm, tasks, _, _ = parts
    out = tmp_path / "run"
    overrides = [
        f"policy.path={lm}",
        f"data={tasks}",
        f"out={out}",
        "reward=scene-proxy",
        "trainer.num_generations=4",
        "trainer.per_device_train_batch_size=8",
        "trainer.gradient_accumulation_steps=1",
        "trainer.max_steps=2",
        "eval.every=0",
        "trainer.learning_rate=5e-3",
        "trainer.max_completion_length=12",
        "trainer.save_steps=1000",
        *(["lora.enabled=true", "lora.r=4"] if lora else []),
    ]
    proc = _launch(_launcher(launch, tmp_path), overrides, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "grpo_result.json").read_text())
    assert result["global_step"] == 2 and result["complete"] and result["beta"] == pytest.approx(0.04)
    assert {p["reference"] for p in result["processes"]} == {reference}
    assert result["kl"][0][1] == pytest.approx(0, abs=1e-6) and result["kl"][-1][1] > 0  # the update moved the policy
    saved = out / "policy" / ("adapter_model.safetensors" if lora else "model.safetensors")
    assert saved.is_file()
    console = proc.stdout + proc.stderr
    assert "step 2/2  reward " in console and "{'loss'" not in console and "'train_runtime'" not in console
    assert "GRPO finished: 2 of 2 steps" in console and f"result: {out / 'grpo_result.json'}" in console


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


def test_a_reward_server_that_dies_mid_run_stops_the_run_at_the_first_step_without_reward(parts, tiny_vlm, tmp_path):
    from reward.core.errors import UserError
    from reward.testing.openai_server import serve_openai

    _, lm, tasks, _, _ = parts
    stack = contextlib.ExitStack()
    url = stack.enter_context(serve_openai(tiny_vlm))
    k = len(tiny_vlm.tokenizer)  # every token listed: the random model's words are outside a short top-k
    server = f"{{base_urls: ['{url}'], model: tiny, top_logprobs: {k}, max_retries: 0}}"
    overrides = [
        f"policy.path={lm}",
        f"data={tasks}",
        f"out={tmp_path / 'run'}",
        "reward=qbench",
        "reward.backend=openai",
        f"reward.server={server}",
        "trainer.num_generations=2",
        "trainer.per_device_train_batch_size=4",
        "trainer.gradient_accumulation_steps=1",
        "trainer.max_steps=3",
        "eval.every=0",
        "trainer.beta=0",
        "trainer.max_completion_length=8",
        "trainer.save_steps=1000",
    ]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = parse(GrpoSettings, compose("grpo", overrides=overrides, schema=GrpoSettings))
    kill = _KillServer(stack)
    with stack, pytest.raises(UserError, match=r"training stopped at step 2: 4 of 4 completions got no usable"):
        run_grpo(cfg, callbacks=[kill])
    result = json.loads((tmp_path / "run" / "grpo_result.json").read_text())
    assert result["global_step"] == 2 and result["complete"] is False  # before: 3 steps, complete, on no reward
    history = [e for e in kill.logs if "qbench/failed" in e]
    assert history[0]["qbench/failed"] == 0 and history[0]["qbench/server_requests"] == 4
    assert history[1]["qbench/failed"] == 4 and history[1]["qbench/server_requests"] == 0  # every item, counted
    reasons = {k: v for k, v in history[1].items() if k.startswith("qbench/server_failed/")}
    assert history[1]["qbench/server_failed"] == 4 and reasons == {"qbench/server_failed/connection": 4}
