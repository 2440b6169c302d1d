"""Generators made better by rewards: GRPO prompt expansion (``rl/grpo.py``) and Best-of-N (``rl/best_of_n.py``).

Rewards come only from the registry (``reward.get_reward``); generators from :mod:`rl.generators`.
"""
