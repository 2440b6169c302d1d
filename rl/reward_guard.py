"""A GRPO step's time, and a run whose rewards fail stopped as a failure, never as a success.

:class:`RewardGuard` (a ``TrainerCallback`` over the tally of GRPO's reward functions) times each step and adds up,
over every process so that all decide alike, the completions scored in a step and those that got no usable reward; a
step with none usable, or with more than ``max_failed`` of them failed, stops training, and the command exits 2 naming
each reward's failures (and, for served rewards, the reasons). :func:`require_scores` is Best-of-N's rule: a run in
which no task got a score fails.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from accelerate.utils import gather_object
from transformers import TrainerCallback

from reward.core.errors import UserError
from reward.integrations.reward_set import RewardSet
from reward.integrations.trl_rewards import RewardTally, TrlRewards
from reward.rewards.base import failure_summary, served_stats, server_report

logger = logging.getLogger(__name__)

PARTS = ("policy_generation", "inpainting", "reward", "update_and_rest")


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
    """Times each step (``seconds``) and stops training after a step without usable rewards (:attr:`failure`: why);
    collective. trl samples a step's completions, then renders and scores them: the policy's sampling is the time
    from the step's start to the render's first call in it (``scoring.render.first_call``)."""

    def __init__(self, scoring: TrlRewards, max_failed: float = 1.0) -> None:
        self.scoring = scoring
        self.max_failed = max_failed
        self.failure: str | None = None
        self.totals = {"completions": 0, "unusable": 0, "steps_without_reward": 0}
        self.seconds = {"steps": 0, "sampled_steps": 0, "step": 0.0, "policy_generation": 0.0}
        self._start = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._start, self.scoring.render.first_call = time.perf_counter(), None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        s, first = self.seconds, self.scoring.render.first_call
        s["steps"], s["step"] = s["steps"] + 1, s["step"] + time.perf_counter() - self._start
        if first is not None:
            s["sampled_steps"], s["policy_generation"] = (
                s["sampled_steps"] + 1,
                s["policy_generation"] + first - self._start,
            )
        mine, self.scoring.tally = self.scoring.tally, RewardTally()
        parts = gather_object([mine.as_dict()])  # every process: the same totals, the same decision
        failure = judge_tallies(parts, self.scoring.rewards, self.max_failed, self.totals)
        if failure is not None and self.failure is None:
            self.failure = f"training stopped at step {state.global_step}: {failure}"
            logger.error("%s", self.failure)
            control.should_training_stop = True


def judge_tallies(
    parts: list[dict[str, Any]], rewards: RewardSet, max_failed: float, totals: dict[str, int]
) -> str | None:
    """One step's reward tallies (:meth:`RewardTally.as_dict`, every process's, gathered) added to ``totals``; why
    the run must stop, or ``None``: a step in which no completion got a usable reward, or more than ``max_failed`` of
    them none, stops it (GRPO's and Flow-GRPO's rule)."""
    total = sum(p["completions"] for p in parts)
    if total == 0:  # no reward call this step (a generation reused over several steps)
        return None
    unusable = sum(p["unusable"] for p in parts)
    totals["completions"] += total
    totals["unusable"] += unusable
    totals["steps_without_reward"] += unusable == total
    if unusable < total and unusable <= max_failed * total:
        return None
    failed: dict[str, int] = {}
    for p in parts:
        for label, n in p["failed"].items():
            failed[label] = failed.get(label, 0) + n
    inpaint = sum(p["render_failed"] for p in parts)
    rule = "no usable reward at all" if unusable == total else f"more than max_reward_failures={max_failed:g}"
    return f"{unusable} of {total} completions got no usable reward ({rule}): {failure_details(rewards, failed)}" + (
        f"; inpainting failed on {inpaint}" if inpaint else ""
    )


def step_split(seconds: dict[str, float]) -> dict[str, Any]:
    """Seconds per step in each part (``seconds``: a guard's, with the ``inpainting`` and ``reward`` totals added),
    and the parts' shares of the step time.

    >>> split = step_split({"steps": 2, "step": 10.0, "policy_generation": 4.0, "inpainting": 3.0, "reward": 2.0})
    >>> split["per_step_s"]["update_and_rest"], split["shares"]["policy_generation"]
    (0.5, 0.4)
    """
    n, total = max(seconds["steps"], 1), seconds["step"]
    parts = {k: seconds[k] for k in PARTS[:3]}
    parts["update_and_rest"] = max(total - sum(parts.values()), 0.0)
    return {
        "steps": seconds["steps"],
        "sampled_steps": seconds.get("sampled_steps"),
        "step_s": total / n,
        "per_step_s": {k: v / n for k, v in parts.items()},
        "shares": {k: (v / total if total else None) for k, v in parts.items()},
    }


def require_scores(rewards: RewardSet, scored: int, candidates: int, counts: dict[str, int]) -> None:
    """Best-of-N: a :class:`UserError` (exit 2) when no task got a score from ``rewards``' first reward."""
    if scored:
        return
    label = rewards.labels[0]
    raise UserError(
        f"no task could be scored: {counts.get('reward_failed', 0)} of {candidates} candidates failed to score "
        f"and {counts.get('generation_failed', 0)} tasks failed to generate; "
        f"{failure_details(rewards, {label: counts.get('reward_failed', 0)})}"
    )
