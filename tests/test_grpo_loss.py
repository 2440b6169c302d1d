"""GRPO's objective as SA-IQA eq. 8 (App. D.3): each completion's token losses averaged by its own length, then over
the group, which is trl's loss_type "grpo" (trl's own default, "dapo", averages over all the batch's tokens)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra import initialize_config_dir

from reward.core.cli import compose
from reward.core.config import parse
from rl.commands.grpo_settings import GrpoSettings
from training.procedural.synthetic import write_inpainting_tasks

ROOT = Path(__file__).resolve().parents[1]


def _settings(tmp_path, *extra: str):
    tasks = write_inpainting_tasks(tmp_path / "tasks", 16, size=32, seed=0)
    base = [f"policy.path={tmp_path}", f"data={tasks}", f"out={tmp_path / 'run'}", "reward=scene-proxy"]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return parse(GrpoSettings, compose("grpo", overrides=[*base, *extra], schema=GrpoSettings))


def test_the_default_loss_is_eq_8_and_is_recorded_in_run_json(tmp_path):
    from rl.commands.grpo_launch import check_output_folder, grpo_args

    s = _settings(tmp_path)
    assert grpo_args(s, tmp_path / "run").loss_type == "grpo"
    check_output_folder(s).create()
    assert json.loads((tmp_path / "run" / "run.json").read_text())["settings"]["trainer"]["loss_type"] == "grpo"
    other = _settings(tmp_path, "trainer.loss_type=dapo")  # trl's other losses stay one override away
    assert grpo_args(other, tmp_path / "run").loss_type == "dapo"


def test_help_shows_the_loss_type(capsys):
    from reward.core.cli import main
    from rl.commands.grpo import run

    main("grpo", run, doc="rl/grpo.py", argv=["--help"], schema=GrpoSettings)
    out = capsys.readouterr().out
    assert "\n  loss_type: grpo  # eq. 8: each completion's token losses averaged over its own length" in out
    assert "\n  num_generations: 8  # group size G (the paper: 8)\n" in out  # each trainer entry: its own help
    assert "\n  per_device_train_batch_size: 4  # completions per process and micro-step" in out
    assert (
        "\n  global_batch_size: null  # ours, not trl's" in out and "SA-IQA App. D.3 (4 prompts x group 8)'s 32" in out
    )


# --- eq. 8 by hand against trl's loss and gradient ------------------------------------------------------------------

BETA = 0.04
EPSILON = 0.2  # DeepSeekMath's clip range, trl's default epsilon
LENGTHS = (5, 2, 7, 3)  # completions of unequal lengths: eq. 8 averages each over its own |o_i|


def _eq8_batch(vocab: int) -> dict:
    """Four completions of one prompt (a group), each of its own length, with sampling-time (old) and reference
    log-probabilities that differ from the policy's, so the ratio and the KL term both matter."""
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, vocab, (1, 6), generator=gen).repeat(len(LENGTHS), 1)
    width = max(LENGTHS)
    completion = torch.randint(3, vocab, (len(LENGTHS), width), generator=gen)
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in LENGTHS])
    return {
        "prompt_ids": prompt,
        "prompt_mask": torch.ones_like(prompt),
        "completion_ids": completion * mask,
        "completion_mask": mask,
        "advantages": torch.tensor([1.2, -0.4, 0.7, -1.5]),
        "old_shift": 0.3 * torch.randn(len(LENGTHS), width, generator=gen),  # log pi_old = log pi - shift
        "ref_shift": 0.5 * torch.randn(len(LENGTHS), width, generator=gen),  # log pi_ref = log pi + shift
    }


def _policy_logps(model, batch: dict) -> torch.Tensor:
    """log pi_theta(o_t | q, o_<t) of every completion token, from one plain forward pass."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    logits = model(input_ids=ids, attention_mask=torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)).logits
    width = batch["completion_ids"].shape[1]
    logps = torch.log_softmax(logits[:, -width - 1 : -1].float(), dim=-1)
    return logps.gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)


def _eq8_by_hand(model, batch: dict, beta: float) -> torch.Tensor:
    """The negative of eq. 8 (DeepSeekMath's GRPO objective) for one group:
    -(1/G) sum_i (1/|o_i|) sum_t { min[r A_i, clip(r, 1-eps, 1+eps) A_i] - beta D_KL },  r = pi / pi_old,
    D_KL = pi_ref / pi - log(pi_ref / pi) - 1 (the k3 estimator)."""
    logp = _policy_logps(model, batch)
    old = (logp - batch["old_shift"]).detach()
    ref = (logp + batch["ref_shift"]).detach()
    ratio = torch.exp(logp - old)
    adv = batch["advantages"].unsqueeze(1)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - EPSILON, 1 + EPSILON) * adv)
    kl = torch.exp(ref - logp) - (ref - logp) - 1
    per_token = surrogate - beta * kl
    mask = batch["completion_mask"].float()
    per_completion = (per_token * mask).sum(1) / mask.sum(1)
    return -per_completion.mean()


def _trl_loss(trainer, batch: dict) -> torch.Tensor:
    """trl's GRPO loss of the same batch (its own forward pass), old and reference log-probs given as inputs."""
    with torch.no_grad():
        logp = _policy_logps(trainer.model, batch)
    inputs = {k: v for k, v in batch.items() if not k.endswith("_shift")}
    inputs["old_per_token_logps"] = logp - batch["old_shift"]
    inputs["ref_per_token_logps"] = logp + batch["ref_shift"]
    trainer.current_gradient_accumulation_steps = 1
    return trainer.compute_loss(trainer.model, inputs)


def _loss_and_grad(model, compute) -> tuple[float, torch.Tensor]:
    model.zero_grad()
    loss = compute()
    loss.backward()
    grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return float(loss.detach()), grad


@pytest.mark.slow
def test_trls_loss_and_gradient_are_eq_8_with_the_default_settings(tmp_path):
    """A real GRPOTrainer built from the default settings (beta 0.04, loss_type grpo): its loss and its gradient
    equal eq. 8 computed by hand on completions of unequal lengths; trl's own default (the KL term x pi/pi_old,
    DeepSeek-V3.2's correction) is one labelled override away and is not eq. 8 on the same batch."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from reward.testing import make_tiny_lm
    from rl.commands.grpo_launch import grpo_args

    lm = make_tiny_lm(tmp_path / "lm")
    found = {}
    for name, extra in (("ours", ()), ("trl", ("trainer.use_bias_correction_kl=true",))):
        args = grpo_args(_settings(tmp_path, "trainer.per_device_train_batch_size=8", *extra), tmp_path / name)
        assert (args.beta, args.loss_type, args.epsilon) == (BETA, "grpo", EPSILON)
        trainer = GRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(lm, dtype=torch.float32),
            reward_funcs=lambda completions, **_: [0.0] * len(completions),
            args=args,
            train_dataset=Dataset.from_dict({"prompt": ["a sofa"] * 8}),
            processing_class=AutoTokenizer.from_pretrained(lm),
        )
        trainer.model.train()
        batch = _eq8_batch(trainer.model.config.vocab_size)
        hand = _loss_and_grad(trainer.model, lambda t=trainer, b=batch: _eq8_by_hand(t.model, b, BETA))
        trl = _loss_and_grad(trainer.model, lambda t=trainer, b=batch: _trl_loss(t, b))
        found[name] = (abs(trl[0] - hand[0]), float((trl[1] - hand[1]).norm() / hand[1].norm()))
    assert found["ours"][0] < 1e-6 and found["ours"][1] < 1e-5, found  # eq. 8, loss and gradient
    assert found["trl"][0] > 1e-4 and found["trl"][1] > 1e-3, found  # the batch tells the two apart


def test_the_kl_correction_is_off_recorded_and_documented(tmp_path, capsys):
    from reward.core.cli import main
    from rl.commands.grpo import run
    from rl.commands.grpo_launch import check_output_folder, grpo_args

    s = _settings(tmp_path)
    assert grpo_args(s, tmp_path / "run").use_bias_correction_kl is False
    check_output_folder(s).create()
    recorded = json.loads((tmp_path / "run" / "run.json").read_text())["settings"]["trainer"]
    assert recorded["use_bias_correction_kl"] is False
    assert grpo_args(_settings(tmp_path, "trainer.use_bias_correction_kl=true"), tmp_path / "x").use_bias_correction_kl
    main("grpo", run, doc="rl/grpo.py", argv=["--help"], schema=GrpoSettings)
    out = capsys.readouterr().out
    assert "\n  use_bias_correction_kl: false  # eq. 8: the KL term is DeepSeekMath's k3 estimator" in out
    assert "true: trl's default" in out
