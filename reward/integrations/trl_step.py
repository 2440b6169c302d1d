"""A trl reward function that sees the whole step, not one process's share of it.

trl's ``GRPOTrainer`` calls every reward function with the completions of its own process only and gathers the
numbers afterwards (``_calculate_rewards``): a reward that compares the items of a batch (a ranking over images, a
statistic of a group) sees one process's share, which under a launch of one image per process holds nothing to compare.
Every process calls its reward functions at the same point of a step, so :func:`whole_step` can gather the
completions and the named columns of all processes (``accelerate.utils.gather_object``), call the reward once on all
of them, and hand each process its own share of the result: the rewards are those of a one-process run on the same
global batch, answer by answer. Outside a distributed launch it calls the reward as it is.

Example:
    >>> def rank_in_batch(completions, score, **_):
    ...     return [sorted(score).index(s) / (len(score) - 1) for s in score]
    >>> f = whole_step(rank_in_batch, columns=("score",))
    >>> f.__name__, f(completions=["a", "b", "c"], score=[0.3, 0.9, 0.1])
    ('rank_in_batch', [0.5, 1.0, 0.0])
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["whole_step"]


def whole_step(func: Callable[..., Sequence[Any]], columns: Sequence[str] = ()) -> Callable[..., list[Any]]:
    """``func`` called on the completions and ``columns`` (keyword arguments of one value per completion) of every
    process of the step, returning this process's share; it keeps ``func``'s name (trl logs rewards by it). Other
    keyword arguments trl passes (``prompts``, ``trainer_state``, ...) are not given to ``func``: name a per-item one
    in ``columns`` to have it gathered too."""

    @functools.wraps(func)
    def step_reward(completions: Sequence[Any], **kwargs: Any) -> list[Any]:
        from accelerate import PartialState
        from accelerate.utils import gather_object

        missing = [c for c in columns if c not in kwargs]
        if missing:
            raise TypeError(f"{func.__name__}: whole_step needs the column(s) {missing}; trl passes {sorted(kwargs)}")
        mine = {"completions": list(completions), **{c: list(kwargs[c]) for c in columns}}
        shares = gather_object([mine])  # one entry per process, in process order (itself, not distributed)
        every = {key: [item for share in shares for item in share[key]] for key in mine}
        out = list(func(**every))
        rank = PartialState().process_index if len(shares) > 1 else 0
        start = sum(len(share["completions"]) for share in shares[:rank])
        return out[start : start + len(mine["completions"])]

    return step_reward
