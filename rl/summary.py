"""What a GRPO run prints instead of trl's dictionaries: one line per logged step while it trains, and at the end a
summary (training reward over the first vs the last steps, held-out rewards before vs after, the share of groups whose
completions all scored the same, where the step time went, where every file is)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformers.trainer_callback import ProgressCallback

from rl.reward_guard import PARTS


def summarize(
    log_history: list[dict[str, Any]], heldout: list[dict[str, Any]], labels: Sequence[str]
) -> dict[str, Any]:
    """The numbers of the closing summary, from trl's log history and the held-out records: each training reward's
    mean over the first and the last ``k`` logged steps (``k``: a tenth of them, 1 to 10).

    >>> s = summarize([{"step": i, "reward": float(i)} for i in range(1, 41)], [], [])
    >>> s["train"]["reward"]
    {'first': 2.5, 'last': 38.5, 'steps_each': 4}
    """
    steps = [e for e in log_history if "reward" in e and "step" in e]
    out: dict[str, Any] = {"train": {}, "heldout": {}, "frac_reward_zero_std": None}
    for key in ["reward", *(f"rewards/{label}/mean" for label in labels)]:
        values = [float(e[key]) for e in steps if e.get(key) is not None]
        if values:
            k = min(max(len(values) // 10, 1), 10)
            name = key.removeprefix("rewards/").removesuffix("/mean")
            out["train"][name] = {"first": sum(values[:k]) / k, "last": sum(values[-k:]) / k, "steps_each": k}
    zero = [float(e["frac_reward_zero_std"]) for e in steps if e.get("frac_reward_zero_std") is not None]
    if zero:
        out["frac_reward_zero_std"] = {"mean": sum(zero) / len(zero), "first": zero[0], "last": zero[-1]}
    if heldout:
        first, last = heldout[0], heldout[-1]
        names = [k for k in first if k not in ("step", "counts", "example") and isinstance(first[k], int | float)]
        out["heldout"] = {
            k: {"first": first[k], "last": last.get(k), "steps": [first["step"], last["step"]]} for k in names
        }
    return out


def summary_text(result: dict[str, Any]) -> str:
    """The closing summary of a run's ``grpo_result.json`` contents, a few lines."""
    s, timing = result["summary"], result["timing"]
    lines = [
        f"GRPO {'finished' if result['complete'] else 'stopped'}: {result['global_step']} of {result['max_steps']} "
        f"steps in {timing['train_s']:.0f} s ({timing['step_s']:.2f} s per step, {len(result['processes'])} "
        "process(es))" + (f"; rewards {result['reward_scale']}" if result.get("reward_scale") else "")
    ]
    for name, v in s["train"].items():
        lines.append(
            f"  training {name}: {v['first']:.4f} -> {v['last']:.4f} (mean of the first vs the last "
            f"{v['steps_each']} step(s))"
        )
    for name, v in s["heldout"].items():
        last = "n/a" if v["last"] is None else f"{v['last']:.4f}"
        lines.append(f"  held-out {name}: {v['first']:.4f} -> {last} (step {v['steps'][0]} -> {v['steps'][1]})")
    if (zero := s["frac_reward_zero_std"]) is not None:
        lines.append(
            f"  groups with no reward spread (no learning signal): {zero['mean']:.0%} of steps' groups "
            f"(first step {zero['first']:.0%}, last {zero['last']:.0%})"
        )
    shares = timing["shares"]
    parts = [f"{part.replace('_', ' ')} {shares[part]:.0%}" for part in PARTS if shares.get(part) is not None]
    lines += ["  step time: " + ", ".join(parts), "  files:"]
    lines.extend(f"    {name}: {path}" for name, path in result["files"].items())
    return "\n".join(lines)


class StepLine(ProgressCallback):
    """transformers' progress bar, writing one line per logged step instead of the logged dictionary (and nothing
    for the end-of-training one: the run's summary follows); ``scale``: what the reward ranges over."""

    scale = ""

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """E.g. ``step 3/10  reward 0.5000 (normalised to [0, 1]; std 0.1000)  zero-std groups 25%  kl 0.002  loss
        0.01  1.5 s``."""
        logs = logs or {}
        if (
            not state.is_world_process_zero
            or self.training_bar is None
            or "train_runtime" in logs
            or "reward" not in logs
        ):
            return
        std = _number(logs, "reward_std", ".4f")
        notes = "; ".join(n for n in (self.scale, f"std {std}" if std else "") if n)
        reward = f"reward {_number(logs, 'reward', '.4f') or 'n/a'}" + (f" ({notes})" if notes else "")
        parts = [f"step {state.global_step}/{state.max_steps}", reward]
        for key, label, spec in (
            ("frac_reward_zero_std", "zero-std groups", ".0%"),
            ("kl", "kl", ".3g"),
            ("loss", "loss", ".3g"),
        ):
            if (text := _number(logs, key, spec)) is not None:
                parts.append(f"{label} {text}")
        if (seconds := _number(logs, "step_time", ".1f")) is not None:
            parts.append(f"{seconds} s")
        self.training_bar.write("  ".join(parts))


def _number(logs: dict[str, Any], key: str, spec: str) -> str | None:
    """``logs[key]`` formatted, or ``None`` when it is missing or not a number (a step whose rewards all failed)."""
    try:
        return format(float(logs[key]), spec)
    except (KeyError, TypeError, ValueError):
        return None
