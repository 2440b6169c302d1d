"""Bradley–Terry fusion of dimension scores into one reward (SA-IQA §3.2.2), ties handled; weights as JSON.

Fit with ``perceptual-rewards fit`` (:mod:`fusion.commands.fit`); the weights are read and applied by
:mod:`reward.rewards.fusion_weights`.
"""
