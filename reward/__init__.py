"""perceptual-rewards: the common language of the toolkit (VLM option scoring, rewards, metrics, data).

The public API is imported lazily so that light modules (``reward.data.manifest``, ``reward.eval.metrics``) load
without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Reward",
    "RewardOutput",
    "declare_reward",
    "get_reward",
    "list_rewards",
    "register_reward",
    "reward_info",
]

_HOME = {
    "Reward": "reward.rewards.base",
    "RewardOutput": "reward.rewards.base",
    "declare_reward": "reward.rewards.registry",
    "get_reward": "reward.rewards.registry",
    "list_rewards": "reward.rewards.registry",
    "register_reward": "reward.rewards.registry",
    "reward_info": "reward.rewards.registry",
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'reward' has no attribute {name!r}")
