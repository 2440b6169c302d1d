"""perceptual-rewards: the common language of the toolkit (VLM option scoring, rewards, metrics, data)."""

from reward.base import Reward, RewardOutput
from reward.registry import get_reward, list_rewards, register_reward, reward_info

__all__ = ["Reward", "RewardOutput", "get_reward", "list_rewards", "register_reward", "reward_info"]
