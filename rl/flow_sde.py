"""Flow-GRPO's math (Flow-GRPO: Training Flow Matching Models via Online RL, arXiv:2505.05470, §4): the ODE sampler of
a flow-matching model turned into an SDE with the same marginals, the log-probability of each sampled transition, the
KL between two policies' transitions, the window of steps that is sampled stochastically and trained on
(Flow-GRPO-Fast) and the clipped policy loss.

Time runs from noise (``sigma = 1``) to data (``sigma = 0``), as diffusers' flow-matching schedulers count it:
``x_sigma = (1 - sigma) x_0 + sigma * noise``, the model predicts the velocity ``v``, and a step goes from ``sigma`` to
``sigma_next < sigma`` (``dt = sigma_next - sigma < 0``). The SDE step (the paper's eq. 9, Euler-Maruyama) is

    x_next = x + [v + s^2 / (2 sigma) (x + (1 - sigma) v)] dt + s sqrt(-dt) eps,   s = a sqrt(sigma / (1 - sigma))

with ``a`` the noise level; at ``sigma = 1`` the schedule's next sigma stands in for it under the root (``sigma_cap``:
``1 / (1 - 1)`` has no value), as flow_grpo does. ``a = 0`` is the ODE (Euler) step. A transition is Gaussian with
mean ``x + [...] dt`` and standard deviation ``s sqrt(-dt)``; its log-probability is the Gaussian log density averaged
over the latent's elements (flow_grpo's convention: the policy ratio is ``exp`` of that mean, to which its clip ranges
are set), and the KL between two policies' transitions is ``|mean - mean_ref|^2 / (2 (s sqrt(-dt))^2)``, averaged the
same way (the paper's closed form; flow_grpo's code divides by ``s^2`` alone).

Example:
    >>> import torch
    >>> x, v = torch.zeros(1, 4), torch.ones(1, 4)
    >>> step = sde_step(v, x, torch.tensor([0.5]), torch.tensor([0.25]), noise_level=0.0, sigma_cap=0.75)
    >>> step.mean.tolist()  # a = 0: Euler, x + v dt
    [[-0.25, -0.25, -0.25, -0.25]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class SdeStep:
    """One transition: the next latent, its log-probability per item (NaN for an item's ODE step), the Gaussian's mean
    and standard deviation (per item, broadcastable)."""

    sample: torch.Tensor
    log_prob: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor


def _per_item(value: torch.Tensor | float, like: torch.Tensor) -> torch.Tensor:
    """A scalar or one value per item, shaped to broadcast over ``like``'s item dimensions."""
    value = torch.as_tensor(value, dtype=torch.float32, device=like.device)
    return value.reshape(-1, *([1] * (like.ndim - 1))) if value.ndim else value


def noise_scale(sigma: torch.Tensor, noise_level: torch.Tensor | float, sigma_cap: float) -> torch.Tensor:
    """``s = a sqrt(sigma / (1 - sigma))``, the paper's noise schedule, with ``sigma_cap`` in the root's denominator
    where ``sigma == 1``.

    >>> noise_scale(torch.tensor([0.5, 1.0]), 0.7, sigma_cap=0.8).tolist()
    [0.699999988079071, 1.5652475357055664]
    """
    sigma = sigma.float()
    below = torch.where(sigma >= 1, torch.full_like(sigma, sigma_cap), sigma)
    return torch.as_tensor(noise_level, dtype=torch.float32, device=sigma.device) * torch.sqrt(sigma / (1 - below))


def transition_log_prob(sample: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """The Gaussian log density of ``sample`` under ``N(mean, std^2)`` per element, averaged over each item's
    elements (float32)."""
    sample, mean, std = sample.float(), mean.float(), std.float()
    log_density = -((sample.detach() - mean) ** 2) / (2 * std**2) - torch.log(std) - 0.5 * math.log(2 * math.pi)
    return log_density.mean(dim=tuple(range(1, log_density.ndim)))


def sde_step(
    velocity: torch.Tensor,
    sample: torch.Tensor,
    sigma: torch.Tensor,
    sigma_next: torch.Tensor,
    *,
    noise_level: torch.Tensor | float,
    sigma_cap: float,
    next_sample: torch.Tensor | None = None,
    generators: Sequence[torch.Generator] | torch.Generator | None = None,
) -> SdeStep:
    """The SDE step from ``sample`` at ``sigma`` to ``sigma_next`` (per item) with velocity ``velocity``, in float32:
    ``next_sample`` given (training: the transition that was sampled), its log-probability under this velocity;
    else a new sample drawn with ``generators`` (one per item, or one for all) and its log-probability.
    ``noise_level``: ``a``, one for all or one per item; an item at 0 takes the ODE's step and its log-probability
    is NaN (a deterministic step has none)."""
    velocity, sample = velocity.float(), sample.float()
    sigma, sigma_next = _per_item(sigma, sample), _per_item(sigma_next, sample)
    a = _per_item(noise_level, sample)
    dt = sigma_next - sigma
    s = noise_scale(sigma, a, sigma_cap)
    mean = sample * (1 + s**2 / (2 * sigma) * dt) + velocity * (1 + s**2 * (1 - sigma) / (2 * sigma)) * dt
    std = s * torch.sqrt(-dt)
    if next_sample is None:
        from diffusers.utils.torch_utils import randn_tensor

        noise = randn_tensor(velocity.shape, generator=generators, device=velocity.device, dtype=torch.float32)
        next_sample = mean + std * noise
    stochastic = (std > 0).reshape(len(std), -1)[:, 0] if std.ndim else (std > 0).expand(len(sample))
    safe = torch.where(std > 0, std, torch.ones_like(std))
    log_prob = torch.where(stochastic, transition_log_prob(next_sample, mean, safe), torch.nan)
    return SdeStep(next_sample, log_prob, mean, std)


def transition_kl(mean: torch.Tensor, ref_mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """KL(policy || reference) of two Gaussian transitions sharing ``std``: ``|mean - ref_mean|^2 / (2 std^2)``,
    averaged over each item's elements (float32)."""
    kl = (mean.float() - ref_mean.float()) ** 2 / (2 * std.float() ** 2)
    return kl.mean(dim=tuple(range(1, kl.ndim)))


def window_start(steps: int, size: int, span: tuple[int, int], generator: torch.Generator) -> int:
    """The first of ``size`` consecutive steps sampled stochastically and trained on, drawn uniformly so that the
    window lies in the steps ``span = (first, end)`` (Flow-GRPO-Fast); ``size == steps`` trains every step.

    >>> window_start(6, 6, (0, 6), torch.Generator().manual_seed(0))
    0
    """
    low, high = span[0], min(span[1], steps) - size
    if high < low:
        raise ValueError(f"a window of {size} steps does not fit in steps {span[0]}..{min(span[1], steps)} of {steps}")
    return int(torch.randint(low, high + 1, (1,), generator=generator).item())


@dataclass
class PolicyLoss:
    """The clipped objective of one window step of each item of a micro-batch (per item, to be weighted by the
    caller) and what is logged of it."""

    per_item: torch.Tensor  # the policy loss plus beta x KL of each item
    ratio: torch.Tensor
    clipped: torch.Tensor  # the ratio left the clip range (no gradient from the policy term)
    kl: torch.Tensor | None


def policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_range: float,
    advantage_clip: float,
    kl: torch.Tensor | None = None,
    beta: float = 0.0,
) -> PolicyLoss:
    """GRPO's clipped objective for one step of each item (the paper's eq. 3 as a loss to minimise):
    ``max(-r A, -clip(r, 1 - eps, 1 + eps) A) + beta KL`` with ``r = exp(log_prob - old_log_prob)`` and the advantage
    ``A`` clipped to ``+-advantage_clip`` (flow_grpo's ``adv_clip_max``).

    >>> out = policy_loss(torch.tensor([0.0, 0.5]), torch.zeros(2), torch.tensor([1.0, 1.0]), clip_range=0.2,
    ...                   advantage_clip=5.0)
    >>> [round(v, 4) for v in out.per_item.tolist()], out.clipped.tolist()
    ([-1.0, -1.2], [False, True])
    """
    ratio = torch.exp(log_prob - old_log_prob)
    adv = advantages.to(ratio.dtype).clamp(-advantage_clip, advantage_clip)
    per_item = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - clip_range, 1 + clip_range))
    if kl is not None:
        per_item = per_item + beta * kl
    return PolicyLoss(per_item, ratio.detach(), ((ratio - 1).abs() > clip_range).detach(), kl)
