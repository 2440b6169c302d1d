"""Bradley–Terry fusion of dimension scores into one reward (SA-IQA §3.2.2), ties handled; weights as JSON.

Fit with ``perceptual-rewards fit pairs=PAIRS.jsonl scores=SCORES.jsonl out=WEIGHTS.json`` (settings:
:mod:`fusion.commands.fit`); read and apply the weights with :func:`load_weights` and :meth:`FusionWeights.fuse`.
"""

from fusion.bradley_terry import BTFit, FitOptions, fit_bradley_terry
from fusion.uncertainty import bootstrap_intervals, heldout_comparison
from reward.rewards.fusion_weights import WEIGHTS_FILENAME, FusionWeights, load_weights, save_weights

__all__ = [
    "WEIGHTS_FILENAME",
    "BTFit",
    "FitOptions",
    "FusionWeights",
    "bootstrap_intervals",
    "fit_bradley_terry",
    "heldout_comparison",
    "load_weights",
    "save_weights",
]
