"""rl/flow_grpo.py under ``accelerate launch`` with 2 CPU processes (gloo), at the recipe's own geometry
(``+recipe=flow-grpo-flux-fill``: 3 images per process and batch, groups of 24, two optimizer steps a round, 6
sampling steps with a window of 5) on the tiny FLUX Fill, only the model, the data and the steps shrunk: the fused
SA-IQA reward (its fitted weights) and scene-proxy weighted 0.7 / 0.3, both active in every round, a Q-Bench+ judge
served by a loopback OpenAI-compatible server; advantages from the gathered rewards of both processes (each group
spans 8 batches on both); the adapter saved in diffusers' format with its card; a second launch resumes from the
checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rl.flow_advantages import group_advantages
from training.procedural.synthetic import write_inpainting_tasks

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _launch(overrides: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "tests")}
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--mixed_precision",
        "no",
        str(ROOT / "rl/flow_grpo.py"),
        *overrides,
        "stall_timeout_s=300",
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_two_processes_at_the_recipes_batch_and_group_size_train_save_and_resume(
    tiny_pipeline_path, tiny_scorer_path, tmp_path
):
    from server_doubles import serve_scripted

    from reward.rewards.fusion_weights import WEIGHTS_FILENAME, FusionWeights, save_weights

    scorer = tmp_path / "scorer"
    shutil.copytree(tiny_scorer_path, scorer)
    save_weights(scorer / WEIGHTS_FILENAME, FusionWeights(("lighting", "harmony"), (0.8, 0.4)))  # "fitted"
    tasks = write_inpainting_tasks(tmp_path / "tasks", 8, size=32, mask_fraction=0.6)
    out = tmp_path / "run"
    with serve_scripted([" good", " poor"]) as url:
        judge = f"judge={{name: qbench, model: null, backend: openai, server: {{base_urls: [{url}], model: tiny}}}}"
        overrides = [
            "+recipe=flow-grpo-flux-fill",
            f"generator.path={tiny_pipeline_path('flux-fill')}",  # the model shrunk
            "generator.dtype=float32",
            "generator.max_sequence_length=16",
            "generator.steps=3",
            "sample.max_size=32",
            f"reward.model={scorer}",
            "more_rewards=[{name: scene-proxy, calibration_scenes: 2}]",
            "trainer.reward_weights=[0.7,0.3]",
            judge,
            f"data={tasks}",  # the data shrunk: 2 prompts a round, 2 held-out tasks
            "eval_tasks=2",
            "trainer.generation_batch_size=48",
            "trainer.global_batch_size=24",
            "trainer.max_steps=2",  # the steps shrunk
            "trainer.save_steps=2",
            "eval.every=2",
            "trainer.bf16=false",
            "lora.r=4",
            f"out={out}",
        ]
        first = _launch(overrides, tmp_path)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        result = json.loads((out / "flow_grpo_result.json").read_text())
        second = _launch([*overrides, "trainer.max_steps=4"], tmp_path)
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert result["complete"] and result["global_step"] == 2 and [p["process"] for p in result["processes"]] == [0, 1]
    assert result["batch"] == {
        "images_per_round": 48,
        "group_size": 24,
        "prompts_per_round": 2,
        "updates_per_round": 2,
        "per_device": 3,
        "processes": 2,
        "accumulation": 20,
    }
    for r in _rows(out / "rounds.jsonl"):  # every reward term active, weighted as asked
        sa, sp = r["rewards/sa-iqa"], r["rewards/scene-proxy"]
        assert sa is not None and sp is not None and r["unusable"] == 0
        assert r["reward"] == pytest.approx(0.7 * sa + 0.3 * sp, abs=1e-9)
    items = _rows(out / "items.jsonl")
    for round_ in {i["round"] for i in items}:  # what each process trained with = one process holding every image
        mine = [i for i in items if i["round"] == round_]
        expected, _ = group_advantages([i["reward"] for i in mine], [i["group"] for i in mine], scale="batch")
        assert [i["advantage"] for i in mine] == pytest.approx(expected.tolist(), abs=1e-9)
    assert len({i["item"] for i in items if i["round"] == 0}) == 48
    heldout = _rows(out / "heldout.jsonl")
    assert [h["step"] for h in heldout] == [0, 2, 4] and all(h["qbench"] is not None for h in heldout)
    assert (out / "lora" / "pytorch_lora_weights.safetensors").is_file()
    card = (out / "lora" / "README.md").read_text()
    assert "held-out judge" in card and "accelerate launch --multi_gpu --num_processes 2" in card
    resumed = json.loads((out / "flow_grpo_result.json").read_text())
    assert resumed["complete"] and resumed["global_step"] == 4 and resumed["resumed_from"].endswith("checkpoint-2")
    assert [r["step"] for r in _rows(out / "rounds.jsonl")] == [2, 4]  # round 1 after the checkpoint, not round 0
    assert [r["round"] for r in _rows(out / "rounds.jsonl")] == [0, 1]
    assert resumed["reward_failures"]["servers"]["qbench"]["answers"] > 0  # the judge, served: it answered
