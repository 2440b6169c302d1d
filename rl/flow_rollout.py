"""Flow-GRPO's sampling (rl/flow_grpo.py): each batch of a group's images (a round laid out over the processes by
:class:`rl.flow_settings.Layout`) sampled by the SDE inside its window of steps and by the ODE outside it, the
window's latents and their transitions' log-probabilities kept for training (Flow-GRPO, arXiv:2505.05470, §4;
Flow-GRPO-Fast).

A round samples ``prompts`` groups of ``group_size`` images, item ``k`` in group ``k // group_size``; process ``p`` of
``world`` takes the ``k`` of its equal contiguous share, in batches of one group each. Everything random is drawn from
the run's seed and the round (:func:`seed_of`), never from a process's own generator: an image's initial noise and SDE
noise from its item number, the window's start from its group, so a round samples the same images on one process or
eight. A group's members share one window (flow_grpo draws one per sampling batch on each GPU).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from PIL import Image

from rl.flow_models import Conditions, FlowGenerator, select
from rl.flow_sde import sde_step, transition_log_prob, window_start


def seed_of(*parts: Any) -> int:
    """A seed from the run's seed and labels (round, group, item): the same on every process.

    >>> seed_of(42, "noise", 3, 17) == seed_of(42, "noise", 3, 17) != seed_of(42, "noise", 3, 18)
    True
    """
    return zlib.crc32(":".join(map(str, parts)).encode()) & 0x7FFFFFFF


@dataclass
class Rollout:
    """One sampled batch (one group's images on this process): what training needs of it, and its images until they
    are scored."""

    items: list[int]  # item numbers in the round
    group: int
    size: tuple[int, int]
    cond: Conditions
    latents: torch.Tensor  # [B, window + 1, ...]: the latent before each window step, and after the last
    log_probs: torch.Tensor  # [B, window]: each window transition's log-probability when sampled (float32)
    sigmas: torch.Tensor  # [window + 1]: sigma before each window step, and after the last
    sigma_cap: float  # the schedule's second sigma (stands in for 1 in the noise scale)
    images: list[Image.Image] = field(default_factory=list, repr=False)


@dataclass(frozen=True)
class Sampling:
    """How a round samples: the training steps (Denoising Reduction), the window, the noise level and guidance."""

    steps: int
    window: int
    window_range: tuple[int, int]
    noise_level: float
    guidance: float
    max_side: int
    seed: int


def sample_group_batch(
    gen: FlowGenerator,
    task: Any,
    items: Sequence[int],
    group: int,
    round_: int,
    how: Sampling,
    encoded: dict[tuple[int, int], Conditions] | None = None,
) -> Rollout:
    """Sample ``items`` (all of group ``group``, whose task is ``task``) of round ``round_`` with the transformer as
    it is now (its adapter on), without gradients; ``encoded``: the group's conditions kept between its batches
    (by round and group: the task is encoded once, with the group's seed)."""
    size = gen.size_of(task, how.max_side)
    noise_gens = [torch.Generator("cpu").manual_seed(seed_of(how.seed, "noise", round_, k)) for k in items]
    window_gen = torch.Generator("cpu").manual_seed(seed_of(how.seed, "window", round_, group))
    start = window_start(how.steps, how.window, how.window_range, window_gen)
    encoded = {} if encoded is None else encoded
    with torch.no_grad():
        if (round_, group) not in encoded:
            task_gen = torch.Generator("cpu").manual_seed(seed_of(how.seed, "task", round_, group))
            encoded.clear()  # one group at a time: a process's batches come group by group
            encoded[(round_, group)] = gen.encode([task], size, [task_gen])
        cond = select(encoded[(round_, group)], [0] * len(items))
        sigmas = gen.sigmas(how.steps, size)
        cap = float(sigmas[1]) if len(sigmas) > 1 else float(sigmas[0])
        x = gen.noise(noise_gens, size)
        kept, log_probs = [x], []
        for i in range(how.steps):
            in_window = start <= i < start + how.window
            sigma = sigmas[i].expand(len(items))
            v = gen.velocity(gen.transformer, x, sigma, cond, how.guidance, size)
            step = sde_step(
                v,
                x,
                sigmas[i],
                sigmas[i + 1],
                noise_level=how.noise_level if in_window else 0.0,
                sigma_cap=cap,
                generators=noise_gens,
            )
            x = step.sample.to(x.dtype)  # what the next step reads, and what training finds again
            if in_window:
                log_probs.append(transition_log_prob(x, step.mean, step.std))
                kept.append(x)
            elif i < start:
                kept = [x]
        images = gen.decode(x, [task] * len(items), size)
    return Rollout(
        items=list(items),
        group=group,
        size=size,
        cond=cond,
        latents=torch.stack(kept, dim=1),
        log_probs=torch.stack(log_probs, dim=1),
        sigmas=sigmas[start : start + how.window + 1].clone(),
        sigma_cap=cap,
        images=images,
    )
