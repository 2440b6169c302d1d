"""Rewards in other people's code: trl's ``GRPOTrainer`` (:mod:`.trl_rewards`), renderers that turn completions into
images (:mod:`.renderers`), and reranking of any pipeline's images (:mod:`.rerank`)."""
