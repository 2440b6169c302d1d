"""The reward registry: the single source of reward names and their metadata.

Example:
    >>> from reward import list_rewards
    >>> "qbench" in list_rewards()
    True
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from reward.core.config import to_plain
from reward.rewards.base import Reward

Factory = Callable[[dict[str, Any]], Reward]


@dataclass(frozen=True)
class RewardSpec:
    """A registered reward: how to build it and how to read its scores."""

    name: str
    factory: str | Factory  # a callable, or "package.module:function" imported on first use
    higher_is_better: bool
    score_range: tuple[float, float]
    description: str

    def build(self, cfg: dict[str, Any]) -> Reward:
        factory = _import(self.factory) if isinstance(self.factory, str) else self.factory
        return factory(cfg)


_REGISTRY: dict[str, RewardSpec] = {}


def register_reward(
    name: str,
    factory: str | Factory,
    *,
    higher_is_better: bool,
    score_range: tuple[float, float],
    description: str,
) -> RewardSpec:
    """Register a reward under a kebab-case ``name``; metadata is required."""
    if not name or name != name.lower() or "_" in name or " " in name:
        raise ValueError(f"reward name {name!r} must be kebab-case (lower case, words joined by '-')")
    if name in _REGISTRY:
        raise ValueError(f"reward {name!r} is already registered")
    low, high = score_range
    if not low < high:
        raise ValueError(f"reward {name!r}: score_range {score_range} must be (low, high) with low < high")
    spec = RewardSpec(name, factory, higher_is_better, (float(low), float(high)), description)
    _REGISTRY[name] = spec
    return spec


def list_rewards() -> list[str]:
    """Names of the registered rewards, sorted."""
    return sorted(_REGISTRY)


def reward_info(name: str) -> RewardSpec:
    """The registration of ``name`` (metadata such as ``score_range``); unknown names fail with suggestions."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" in name:
        return RewardSpec(name, name, True, (float("-inf"), float("inf")), "custom reward from an import path")
    close = difflib.get_close_matches(name, list(_REGISTRY), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(
        f"unknown reward {name!r}.{hint} Known rewards: {', '.join(list_rewards())}. "
        "A custom one can be given as 'package.module:factory'."
    )


def get_reward(name: str, cfg: Mapping[str, Any] | Any | None = None, **overrides: Any) -> Reward:
    """Build the reward ``name`` from a config node (Hydra or plain mapping) and keyword overrides."""
    spec = reward_info(name)
    values = to_plain(cfg)
    values.pop("name", None)
    values.update(overrides)
    return spec.build(values)


def _import(path: str) -> Factory:
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"reward factory {path!r} must look like 'package.module:function'")
    try:
        obj = importlib.import_module(module)
    except ImportError as exc:
        raise ValueError(f"cannot import reward factory module {module!r} ({exc})") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"reward factory {path!r}: {module} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


register_reward(
    "qbench",
    "reward.rewards.qbench:build",
    higher_is_better=True,
    score_range=(0.0, 1.0),
    description="Q-Bench+ zero-shot: softmax of good vs poor at the answer position (optionally synonym sets)",
)
register_reward(
    "sa-iqa",
    "reward.rewards.sa_iqa:build",
    higher_is_better=True,
    score_range=(1.0, 5.0),
    description="SA-IQA fine-tuned scorer: expected value over five level words per dimension, fused by BT weights",
)
register_reward(
    "pace",
    "pace_judge.pace:build",
    higher_is_better=True,
    score_range=(1.0, 5.0),
    description="PACE training-free judge of any dimension named in words: protocol probes + anchor comparison",
)
register_reward(
    "scene-proxy",
    "rl.scene_proxy:build",
    higher_is_better=True,
    score_range=(1.0, 5.0),
    description="procedural scenes' proxy statistics calibrated to levels 1-5 and fused (a known optimum, for tests)",
)
