"""A run whose rewards fail stops as a failure, never as a success.

:class:`RewardGuard` (a ``TrainerCallback`` over the tally of GRPO's reward functions) adds up, over every process so
that all decide alike, the completions scored in a step and those that got no usable reward; a step with none usable,
or with more than ``max_failed`` of them failed, stops training, and the command exits 2 naming each reward's failures
(and, for served rewards, the reasons). :func:`require_scores` is Best-of-N's rule: a run in which no task got a score
fails.
"""

from __future__ import annotations

import logging
from typing import Any

from accelerate.utils import gather_object
from transformers import TrainerCallback

from reward.core.errors import UserError
from reward.integrations.reward_set import RewardSet
from reward.integrations.trl_rewards import RewardTally, TrlRewards
from reward.vlm.server import failure_summary, served_stats, server_report

logger = logging.getLogger(__name__)


class RewardsFailed(UserError):
    """Too many completions (or candidates) got no usable reward: the run stops, incomplete."""


def failure_details(rewards: RewardSet, failed: dict[str, int]) -> str:
    """Each reward's failed count and, for one scored through servers, this process's reasons."""
    parts = []
    for r in rewards.rewards:
        part = f"reward {r.label} failed on {failed.get(r.label, 0)}"
        stats = served_stats(r.reward)
        if stats is not None and stats.get("failed"):
            part += f" (its servers: {failure_summary(stats)})"
        parts.append(part)
    return "; ".join(parts)


def served_reports(rewards: RewardSet) -> dict[str, Any]:
    """Per reward scored through servers: its requests, failures and their reasons (this process's)."""
    return {r.label: server_report(stats) for r in rewards.rewards if (stats := served_stats(r.reward)) is not None}


class RewardGuard(TrainerCallback):
    """Stops training after a step without usable rewards (:attr:`failure`: why); collective."""

    def __init__(self, scoring: TrlRewards, max_failed: float = 1.0) -> None:
        self.scoring = scoring
        self.max_failed = max_failed
        self.failure: str | None = None
        self.totals = {"completions": 0, "unusable": 0, "steps_without_reward": 0}

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        mine, self.scoring.tally = self.scoring.tally, RewardTally()
        parts = gather_object([mine.as_dict()])  # every process: the same totals, the same decision
        total = sum(p["completions"] for p in parts)
        if total == 0:  # no reward call this step (a generation reused over several steps)
            return
        unusable = sum(p["unusable"] for p in parts)
        self.totals["completions"] += total
        self.totals["unusable"] += unusable
        self.totals["steps_without_reward"] += unusable == total
        if self.failure is not None or (unusable < total and unusable <= self.max_failed * total):
            return
        failed: dict[str, int] = {}
        for p in parts:
            for label, n in p["failed"].items():
                failed[label] = failed.get(label, 0) + n
        inpaint = sum(p["render_failed"] for p in parts)
        rule = "no usable reward at all" if unusable == total else f"more than max_reward_failures={self.max_failed:g}"
        self.failure = (
            f"training stopped at step {state.global_step}: {unusable} of {total} completions got no usable reward "
            f"({rule}): {failure_details(self.scoring.rewards, failed)}"
            + (f"; inpainting failed on {inpaint}" if inpaint else "")
        )
        logger.error("%s", self.failure)
        control.should_training_stop = True


def require_scores(rewards: RewardSet, scored: int, candidates: int, counts: dict[str, int]) -> None:
    """Best-of-N: raise :class:`RewardsFailed` (exit 2) when no task got a score from ``rewards``' first reward."""
    if scored:
        return
    label = rewards.labels[0]
    raise RewardsFailed(
        f"no task could be scored: {counts.get('reward_failed', 0)} of {candidates} candidates failed to score "
        f"and {counts.get('generation_failed', 0)} tasks failed to generate; "
        f"{failure_details(rewards, {label: counts.get('reward_failed', 0)})}"
    )
