"""Group-relative advantages (GRPO; Flow-GRPO, arXiv:2505.05470, §4.1): each image's reward minus the mean of its
prompt's group, over a standard deviation, computed over the WHOLE group whatever the number of processes: every
process's rewards are gathered first (flow_grpo's train loop does the same), so a group spread over eight GPUs is
one group, not eight (a per-process statistic is the bug trl's reward functions have, each seeing its own slice).

An item without a reward (its image or any reward failed: ``None``) is no score: it is left out of its group's mean
and standard deviation, its advantage is 0 and its ``usable`` flag false, so the loss skips it. ``scale``:

- ``group``: the group's own standard deviation (the paper's formula);
- ``batch``: the standard deviation of every usable reward of the round, all groups together (flow_grpo's
  ``global_std=True``, its FLUX and SD3.5 configs' choice);
- ``none``: the mean is subtracted, nothing divided.

The standard deviation is the population one (numpy's, as flow_grpo) plus ``eps = 1e-4``, so a group whose rewards are
all equal gets advantages of 0 (never a division by zero).

Example:
    >>> adv, usable = group_advantages([1.0, 3.0, 2.0, 2.0], [0, 0, 1, 1], scale="group")
    >>> [round(a, 4) for a in adv.tolist()], usable.tolist()
    ([-0.9999, 0.9999, 0.0, 0.0], [True, True, True, True])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where used: the command's settings (SCALES) are checked without it
    import torch

SCALES = ("group", "batch", "none")
EPS = 1e-4  # flow_grpo's stat tracker adds this to the standard deviation


def group_advantages(
    rewards: Sequence[float | None] | torch.Tensor,
    groups: Sequence[int] | torch.Tensor,
    *,
    scale: str = "group",
    eps: float = EPS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages (float64) and the ``usable`` mask of items whose ``groups`` id names their prompt's group;
    ``rewards``: a number per item, ``None`` or NaN for an item without one. Computed on every item given: gather the
    round's items of every process first (:func:`gathered_advantages`)."""
    import torch

    if scale not in SCALES:
        raise ValueError(f"scale={scale!r}: choose one of {', '.join(SCALES)}")
    values = torch.tensor([torch.nan if r is None else float(r) for r in rewards], dtype=torch.float64)
    ids = torch.as_tensor(groups, dtype=torch.long)
    if len(ids) != len(values):
        raise ValueError(f"got {len(values)} rewards for {len(ids)} group ids; give one id per item")
    usable = ~torch.isnan(values)
    advantages = torch.zeros_like(values)
    batch_std = values[usable].std(unbiased=False) if usable.any() else torch.tensor(0.0, dtype=torch.float64)
    for group in ids.unique():
        members = (ids == group) & usable
        if not members.any():
            continue
        centred = values[members] - values[members].mean()
        if scale == "group":
            centred = centred / (values[members].std(unbiased=False) + eps)
        elif scale == "batch":
            centred = centred / (batch_std + eps)
        advantages[members] = centred
    return advantages, usable


@dataclass
class RoundStats:
    """What a round's advantages say about its groups: how many groups had no spread (every usable reward equal,
    so nothing to learn from them) and how many items had no reward."""

    groups: int
    zero_spread: int
    unusable: int
    items: int


def round_stats(rewards: torch.Tensor, groups: torch.Tensor) -> RoundStats:
    """:class:`RoundStats` of every item of a round (``rewards`` NaN where none)."""
    import torch

    usable = ~torch.isnan(rewards)
    zero = 0
    ids = groups.unique()
    for group in ids:
        values = rewards[(groups == group) & usable]
        zero += int(len(values) > 0 and bool((values == values[0]).all()))
    return RoundStats(len(ids), zero, int((~usable).sum()), len(rewards))


def gathered_advantages(
    rewards: torch.Tensor,
    groups: torch.Tensor,
    gather: Callable[[torch.Tensor], torch.Tensor],
    *,
    rank: int,
    world: int,
    scale: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """This process's advantages and usable mask, computed on the items of every process: ``rewards`` (NaN: none)
    and ``groups`` are this process's, the same count on every process, and ``gather`` concatenates a tensor over the
    processes in rank order (accelerate's ``Accelerator.gather``). Returns also every process's rewards and group
    ids (what was gathered)."""
    every_reward = gather(rewards.double().contiguous())
    every_group = gather(groups.long().contiguous())
    n = len(rewards)
    if len(every_reward) != n * world:
        raise RuntimeError(f"gathered {len(every_reward)} rewards from {world} processes of {n} items each")
    adv, usable = group_advantages(every_reward.cpu().tolist(), every_group.cpu(), scale=scale)
    mine = slice(rank * n, (rank + 1) * n)
    return adv[mine], usable[mine], every_reward.cpu(), every_group.cpu()
