"""The reward settings GRPO and Flow-GRPO both have, defined once: each command names its own unit of training (a
step of completions, a round of images) in the help, so ``--help`` and the docs say what the setting means there."""

from __future__ import annotations

import dataclasses
from typing import Any

from reward.core.config import FRACTION


def normalize_rewards_field() -> Any:
    """``normalize_rewards``: each reward onto [0, 1] by its ``score_range`` (on by default)."""
    return dataclasses.field(default=True, metadata={"help": "each reward onto [0, 1] (1 = best) by its score_range"})


def max_reward_failures_field(unit: str, items: str) -> Any:
    """``max_reward_failures``: the share of a ``unit``'s ``items`` (a step's completions, a round's images) left
    unrewarded that stops the run (1.0: only when none is rewarded); changeable when a run resumes."""
    return dataclasses.field(
        default=1.0,
        metadata={
            "help": f"a {unit} with more than this fraction of {items} unrewarded stops the run (1.0: none rewarded)",
            "may_change": True,
            "range": FRACTION,
        },
    )
