"""Generators made better by rewards: GRPO prompt expansion (``rl/grpo.py``) and Best-of-N (``rl/best_of_n.py``).

Rewards come only from the registry (``reward.get_reward``); generators from :mod:`rl.generators`.
"""

# the scene-proxy reward, registered with reward's registry through the entry point in pyproject.toml (read on first
# use)
SCENE_PROXY_REWARD = {
    "factory": "rl.scene_proxy:SceneProxyReward",
    "higher_is_better": True,
    "score_range": (1.0, 5.0),
    "description": "procedural scenes' proxy statistics calibrated to levels 1-5 and fused (a known optimum, for "
    "tests)",
    "config": "rl.scene_proxy:SceneProxyConfig",
}
