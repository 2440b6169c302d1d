"""Rewards in other people's code: several rewards scored on the same images (:mod:`.reward_set`), trl's
``GRPOTrainer`` (:mod:`.trl_rewards`, the one adapter our GRPO uses too), renderers that turn completions into images
(:mod:`.renderers`), and reranking of any pipeline's images (:mod:`.rerank`)."""
