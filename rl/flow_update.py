"""One Flow-GRPO update (rl/flow_grpo.py): every window step of every sampled batch of this process's share, the
transition's log-probability recomputed with gradients under the current adapter, the clipped ratio against the
log-probability it was sampled with, the KL to the frozen model (the adapter switched off) when ``beta > 0``, and one
optimizer step at the end (accelerate's gradient accumulation: DDP synchronises on the last backward, DeepSpeed
steps on its own boundary).

The update's loss is the mean over its usable items, all processes together, and over the window steps: each
backward is weighted by ``accumulation x processes / (usable items x window)``, since accelerate divides a loss by
the accumulation and DDP averages the processes' gradients. An item without a reward is weighted 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rl.flow_models import FlowGenerator
from rl.flow_rollout import Rollout
from rl.flow_sde import policy_loss, sde_step, transition_kl


@dataclass(frozen=True)
class Objective:
    """The clipped objective's constants (Flow-GRPO's eq. 3; flow_grpo's ``clip_range``, ``adv_clip_max``)."""

    clip_range: float
    advantage_clip: float
    beta: float
    noise_level: float
    guidance: float
    max_grad_norm: float


@contextlib.contextmanager
def adapter_off(transformer: Any) -> Iterator[None]:
    """The frozen model: ``transformer`` with its LoRA adapter switched off (diffusers' ``disable_adapters``)."""
    transformer.disable_adapters()
    try:
        yield
    finally:
        transformer.enable_adapters()


def run_update(
    accelerator: Any,
    model: Any,
    optimizer: Any,
    gen: FlowGenerator,
    rollouts: Sequence[Rollout],
    advantages: Sequence[torch.Tensor],
    usable: Sequence[torch.Tensor],
    usable_total: int,
    how: Objective,
) -> dict[str, float | None]:
    """Train on ``rollouts`` (this process's share of one update) with their ``advantages`` and ``usable`` masks;
    ``usable_total``: the update's usable items over every process. Returns this process's means of the logged
    quantities (policy loss, KL, ratio, clip fraction, approximate KL to the sampling policy; ``None`` without a
    usable item)."""
    window = rollouts[0].log_probs.shape[1]
    scale = accelerator.gradient_accumulation_steps * accelerator.num_processes / max(usable_total * window, 1)
    params = [p for p in model.parameters() if p.requires_grad]
    sums = {"policy_loss": 0.0, "kl": 0.0, "ratio": 0.0, "clip_fraction": 0.0, "approx_kl": 0.0}
    counted = 0
    model.train()
    for rollout, adv, ok in zip(rollouts, advantages, usable, strict=True):
        device = rollout.latents.device
        adv, weight = adv.to(device), ok.to(device).float()
        for k in range(window):
            with accelerator.accumulate(model):
                x, x_next = rollout.latents[:, k], rollout.latents[:, k + 1]
                sigma = rollout.sigmas[k].expand(len(x))
                step_args = {"noise_level": how.noise_level, "sigma_cap": rollout.sigma_cap, "next_sample": x_next}
                v = gen.velocity(model, x, sigma, rollout.cond, how.guidance, rollout.size)
                step = sde_step(v, x, rollout.sigmas[k], rollout.sigmas[k + 1], **step_args)
                kl = None
                if how.beta > 0:
                    with torch.no_grad(), adapter_off(gen.transformer):
                        v_ref = gen.velocity(gen.transformer, x, sigma, rollout.cond, how.guidance, rollout.size)
                        ref = sde_step(v_ref, x, rollout.sigmas[k], rollout.sigmas[k + 1], **step_args)
                    kl = transition_kl(step.mean, ref.mean, step.std)
                old = rollout.log_probs[:, k].to(device)
                out = policy_loss(
                    step.log_prob,
                    old,
                    adv,
                    clip_range=how.clip_range,
                    advantage_clip=how.advantage_clip,
                    kl=kl,
                    beta=how.beta,
                )
                accelerator.backward((out.per_item * weight).sum() * scale)
                if accelerator.sync_gradients and how.max_grad_norm > 0:
                    accelerator.clip_grad_norm_(params, how.max_grad_norm)
                optimizer.step()
                optimizer.zero_grad()
            n = float(weight.sum())
            if n:
                counted += n
                with torch.no_grad():
                    policy = out.per_item - (how.beta * kl if kl is not None else 0)
                    sums["policy_loss"] += float((policy * weight).sum())
                    sums["kl"] += float((kl * weight).sum()) if kl is not None else 0.0
                    sums["ratio"] += float((out.ratio * weight).sum())
                    sums["clip_fraction"] += float((out.clipped.float() * weight).sum())
                    sums["approx_kl"] += float((0.5 * (step.log_prob.detach() - old) ** 2 * weight).sum())
    return {k: v / counted for k, v in sums.items()} if counted else {k: None for k in sums}
