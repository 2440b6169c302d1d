"""perceptual-rewards: the common language of the toolkit (VLM option scoring, rewards, metrics, data).

The public API is imported lazily so that light modules (``reward.data.manifest``, ``reward.eval.metrics``) load
without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Reranked",
    "Reward",
    "RewardOutput",
    "as_images",
    "declare_reward",
    "get_reward",
    "images_from_column",
    "list_rewards",
    "register_reward",
    "render_from_pipeline",
    "rerank",
    "reward_info",
    "trl_reward_func",
    "trl_reward_funcs",
]

_HOME = {
    "Reward": "reward.rewards.base",
    "RewardOutput": "reward.rewards.base",
    "declare_reward": "reward.rewards.registry",
    "get_reward": "reward.rewards.registry",
    "list_rewards": "reward.rewards.registry",
    "register_reward": "reward.rewards.registry",
    "reward_info": "reward.rewards.registry",
    "as_images": "reward.data.images",
    "trl_reward_func": "reward.integrations.trl_rewards",
    "trl_reward_funcs": "reward.integrations.trl_rewards",
    "images_from_column": "reward.integrations.renderers",
    "render_from_pipeline": "reward.integrations.renderers",
    "rerank": "reward.integrations.rerank",
    "Reranked": "reward.integrations.rerank",
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'reward' has no attribute {name!r}")
