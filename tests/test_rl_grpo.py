"""rl/grpo.py: config validation up front, the learning proof (tiny text policy, full fine-tuning, procedural
generator, scene-proxy reward), held-out rewards, plots, resume, every registered reward, a VLM policy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_reward_config
from hydra import compose, initialize_config_dir
from transformers import TrainerCallback

from reward import list_rewards
from rl.commands.grpo import run as run_grpo
from rl.inpaint_tasks import write_procedural_tasks

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
FAST = ["trainer.learning_rate=5e-3", "trainer.beta=0", "trainer.max_completion_length=16", "trainer.save_steps=1000"]


def _cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("grpo", overrides=overrides)


class Watch(TrainerCallback):
    """Snapshots the trainable parameters when training starts and records every forward call's inputs."""

    def __init__(self) -> None:
        self.before: dict[str, torch.Tensor] = {}
        self.changed: list[str] = []
        self.forward_keys: list[set[str]] = []

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

        def record(module, inputs, kw):
            self.forward_keys.append({k for k, v in kw.items() if v is not None})

        model.register_forward_pre_hook(record, with_kwargs=True)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        now = dict(model.named_parameters())
        self.changed = [n for n, p in self.before.items() if not torch.equal(p, now[n].detach())]


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory) -> Path:
    from reward.testing import make_tiny_lm

    return make_tiny_lm(tmp_path_factory.mktemp("tiny-lm"))


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    return write_procedural_tasks(tmp_path_factory.mktemp("tasks"), 40, size=64, seed=0, mask_fraction=0.8)


def test_config_problems_are_reported_together_before_anything_loads(tmp_path):
    bad = [
        f"output_dir={tmp_path}",
        "data=none.jsonl",
        "policy.path=none",
        "reward=scene-proxy",
        "trainer.num_generations=3",
        "trainer.reward_weights=[1.0,2.0]",
        "prompt.template=no slot",
    ]
    with pytest.raises(ValueError, match=r"unknown key policy.pth \(did you mean 'path'\?\)"):
        run_grpo(_cfg([*bad, "+policy.pth=x"]))
    with pytest.raises(ValueError) as err:
        run_grpo(_cfg(bad))
    msg = str(err.value)
    assert "trainer.reward_weights has 2 weights for 1 rewards" in msg
    assert "must be divisible by num_generations (3)" in msg  # trl.GRPOConfig's own check, named as trainer.*
    assert "prompt.template must contain {prompt}" in msg


@pytest.mark.slow
def test_grpo_raises_the_scene_reward_holds_out_a_second_reward_and_resumes(tiny_lm, tasks, tmp_path, request):
    out = tmp_path / "run"
    qbench = tiny_reward_config("qbench", request)["model"]
    base = [
        f"policy.path={tiny_lm}",
        f"data={tasks}",
        f"output_dir={out}",
        "reward=scene-proxy",
        "trainer.num_generations=8",
        "trainer.per_device_train_batch_size=16",
        "eval.every=20",
        "eval_tasks=6",
        f"eval_rewards=[{{name: qbench, model: '{qbench}'}}]",
        *FAST,
    ]
    result = run_grpo(_cfg([*base, "trainer.max_steps=40", "trainer.save_steps=40"]))
    means = np.array([m for _, m, _ in result["train_curve"]["scene-proxy"]])
    first, last = means[:10], means[-10:]
    assert last.mean() > first.mean() + 0.05, (first.mean(), last.mean())  # measured: ~0.42 -> ~0.58
    heldout = [json.loads(line) for line in (out / "heldout.jsonl").read_text().splitlines()]
    assert [r["step"] for r in heldout] == [0, 20, 40]
    assert all(0 <= r["qbench"] <= 1 and 0 <= r["scene-proxy"] <= 1 for r in heldout)
    for name in ("reward_curve.png", "samples_first_last.png", "policy/config.json", "grpo_result.json"):
        assert (out / name).exists(), name
    assert 0 < result["timing"]["generate_share"] < 1 and 0 < result["timing"]["reward_share"] < 1
    resumed = run_grpo(_cfg([*base, "trainer.max_steps=42"]))  # resume=auto from checkpoint-40
    assert resumed["global_step"] == 42
    with pytest.raises(ValueError, match=r"cannot resume in .*different config:\n  - reward: .*weights"):
        run_grpo(_cfg([*base, "trainer.max_steps=44", "+reward.weights={lighting: 1.0}"]))


@pytest.mark.slow
@pytest.mark.parametrize("name", list_rewards())
def test_every_registered_reward_trains_a_step(name, tiny_lm, tasks, tmp_path, request):
    overrides = [f"reward.{k}={v}" for k, v in tiny_reward_config(name, request).items()]
    cfg = _cfg(
        [
            f"policy.path={tiny_lm}",
            f"data={tasks}",
            f"output_dir={tmp_path}",
            f"reward={name}",
            *overrides,
            "trainer.max_steps=2",
            "trainer.num_generations=4",
            "trainer.per_device_train_batch_size=8",
            "trainer.temperature=1.5",  # prompts of a group differ in level words, so their rewards differ
            "eval.every=0",
            *FAST,
        ]
    )
    watch = Watch()
    result = run_grpo(cfg, callbacks=[watch])
    assert result["global_step"] == 2 and result["rewards"] == [name]
    assert result["train_curve"][name] and 0 <= result["train_curve"][name][0][1] <= 1
    assert watch.before and watch.changed, "the policy's trainable parameters did not move"


@pytest.mark.slow
def test_a_vlm_policy_sees_the_task_image_and_trains_with_lora(tiny_vlm_path, tasks, tmp_path):
    cfg = _cfg(
        [
            f"policy.path={tiny_vlm_path}",
            f"data={tasks}",
            f"output_dir={tmp_path}",
            "reward=scene-proxy",
            "lora.enabled=true",
            "trainer.max_steps=1",
            "trainer.num_generations=4",
            "trainer.per_device_train_batch_size=8",
            "trainer.temperature=1.5",  # prompts of a group differ in level words, so their rewards differ
            "eval.every=1",
            "eval_tasks=2",
            *FAST,
        ]
    )
    watch = Watch()
    result = run_grpo(cfg, callbacks=[watch])
    assert result["global_step"] == 1
    assert any("pixel_values" in keys and "image_grid_thw" in keys for keys in watch.forward_keys)  # sees the image
    assert watch.changed and all("lora_" in n for n in watch.changed)  # the adapter moved, nothing else
    assert (tmp_path / "policy" / "adapter_config.json").exists()
    assert len((tmp_path / "heldout.jsonl").read_text().splitlines()) == 2
