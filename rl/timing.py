"""Where a GRPO step's time goes, per process: the policy sampling completions, inpainting, the reward, and the rest
(log-probabilities, the loss, backward and the optimizer step).

Measured through trl's public contracts only: :class:`StepClock` is a ``TrainerCallback`` (a step's start and end)
and wraps the reward functions trl calls; trl samples a step's completions, then calls them, so the policy's sampling
is the time from the step's start to its first reward call. Inpainting and reward times come from
:class:`rl.inpaint_render.InpaintingRender` and :class:`reward.integrations.trl_rewards.TrlRewards`. (trl's own
``step_time`` covers neither the optimizer step nor the split.)
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

from transformers import TrainerCallback

PARTS = ("policy_generation", "inpainting", "reward", "update_and_rest")


class StepClock(TrainerCallback):
    """Wall time inside training steps (before held-out evaluation runs) and, within them, the policy's sampling.

    >>> clock = StepClock()
    >>> (score,) = clock.watch([lambda completions, **kw: [1.0] * len(completions)])
    >>> clock.on_step_begin(None, None, None); score(["a", "b"]); clock.on_step_end(None, None, None)
    [1.0, 1.0]
    >>> clock.steps, clock.sampled_steps, 0 < clock.policy_generate_s <= clock.step_s
    (1, 1, True)
    """

    def __init__(self) -> None:
        self.step_s = self.policy_generate_s = 0.0
        self.steps = self.sampled_steps = 0  # sampled: steps in which trl sampled completions (and called the rewards)
        self._start: float | None = None
        self._sampled = False

    def watch(self, functions: Sequence[Callable[..., Any]]) -> list[Callable[..., Any]]:
        """The reward functions, each noting the first reward call of a step (names and signatures kept for trl)."""
        watched = []
        for fn in functions:

            def reward_fn(*args: Any, _fn: Callable[..., Any] = fn, **kwargs: Any) -> Any:
                if self._start is not None and not self._sampled:
                    self.policy_generate_s += time.perf_counter() - self._start
                    self.sampled_steps += 1
                    self._sampled = True
                return _fn(*args, **kwargs)

            watched.append(functools.wraps(fn)(reward_fn))
        return watched

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._start, self._sampled = time.perf_counter(), False

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._start is not None:
            self.step_s += time.perf_counter() - self._start
            self.steps += 1
            self._start = None


def step_split(clock: StepClock, inpaint_s: float, reward_s: float) -> dict[str, Any]:
    """Seconds per step in each part, and the parts' shares of the step time.

    >>> clock = StepClock(); clock.step_s, clock.steps, clock.policy_generate_s = 10.0, 2, 4.0
    >>> split = step_split(clock, 3.0, 2.0)
    >>> split["per_step_s"]["update_and_rest"], split["shares"]["policy_generation"]
    (0.5, 0.4)
    """
    n, total = max(clock.steps, 1), clock.step_s
    parts = {"policy_generation": clock.policy_generate_s, "inpainting": inpaint_s, "reward": reward_s}
    parts["update_and_rest"] = max(total - sum(parts.values()), 0.0)
    return {
        "steps": clock.steps,
        "sampled_steps": clock.sampled_steps,
        "step_s": total / n,
        "per_step_s": {k: v / n for k, v in parts.items()},
        "shares": {k: (v / total if total else None) for k, v in parts.items()},
    }


def mean_timing(processes: list[dict[str, Any]]) -> dict[str, Any]:
    """The step-time split averaged over the processes (each process times its own share of the batch)."""
    n = len(processes)
    per_step = {k: sum(p["timing"]["per_step_s"][k] for p in processes) / n for k in PARTS}
    step_s = sum(p["timing"]["step_s"] for p in processes) / n
    shares = {k: (v / step_s if step_s else None) for k, v in per_step.items()}
    return {"step_s": step_s, "per_step_s": per_step, "shares": shares}
