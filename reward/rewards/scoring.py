"""Scoring rules: turn the logits (or log-probabilities) of a few candidate answer tokens into a score.

All functions take tensors whose last axis holds the K candidates (usually ``[B, K]``), compute in float32
whatever the input dtype, and return a float32 tensor with the last axis removed (``[B]``).

- :func:`expected_value` -- SA-IQA eq. 6-7 (App. D.2) / Q-Align: softmax over the K level words, then sum p_k * v_k.
- :func:`synonym_ensemble` -- Q-Bench+ eq. 2: softmax of the ``good`` logits against the ``poor`` logits, each summed
  over a synonym set; with one word a side (``[B, 1]`` each) it is eq. 1, the softmax of ``good`` against ``poor``.

Logits and log-probabilities give identical results in every rule that normalises over the same candidates
(softmax is shift-invariant); the one exception is noted in :func:`synonym_ensemble`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reward.rewards.levels import LEVEL_VALUES, LEVEL_WORDS, QBENCH_NEGATIVE_WORDS, QBENCH_POSITIVE_WORDS

__all__ = [
    "LEVEL_VALUES",
    "LEVEL_WORDS",
    "QBENCH_NEGATIVE_WORDS",
    "QBENCH_POSITIVE_WORDS",
    "expected_value",
    "synonym_ensemble",
]


def _as_float32(x: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(x)
    if x.ndim == 0:
        raise ValueError(f"{name} must have a candidate axis (shape [B, K] or [K]), got a scalar.")
    x = x.to(torch.float32)
    if torch.isnan(x).any():
        raise ValueError(f"{name} contains NaN; check the model outputs (e.g. a bf16 overflow) before scoring.")
    return x


def expected_value(
    logits: torch.Tensor, values: Sequence[float] | torch.Tensor | None = None, temperature: float = 1.0
) -> torch.Tensor:
    """Expected value of the candidates' values under the softmax of their logits: sum_k softmax(z/T)_k * v_k.

    The softmax runs over the K candidates only, in float32. ``values`` defaults to :data:`LEVEL_VALUES`
    (for logits ordered as :data:`LEVEL_WORDS`), giving a score in [1, 5].

    >>> import math
    >>> expected_value(torch.tensor([[0.0, math.log(3.0)]]), [1.0, 2.0])  # p = [1/4, 3/4] -> 1/4 + 6/4
    tensor([1.7500])
    >>> expected_value(torch.zeros(1, 5))  # uniform over the five level words -> mean of 5..1
    tensor([3.])
    """
    z = _as_float32(logits, "logits")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}.")
    v = torch.as_tensor(LEVEL_VALUES if values is None else values, dtype=torch.float32, device=z.device)
    if v.ndim != 1 or v.shape[0] != z.shape[-1]:
        raise ValueError(
            f"values has shape {tuple(v.shape)} but logits have {z.shape[-1]} candidates on the last axis; "
            "pass one value per candidate token, in the same order."
        )
    return (torch.softmax(z / temperature, dim=-1) * v).sum(dim=-1)


def synonym_ensemble(pos_logits: torch.Tensor, neg_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Q-Bench+ eq. 2: ``e^(sum_P x_t) / (e^(sum_P x_t) + e^(sum_N x_t))`` with the sums divided by T (eq. 1 with one
    word a side: ``e^(g/T) / (e^(g/T) + e^(p/T))``), computed stably as a sigmoid of the difference.

    As the paper writes it, the logits of each synonym set (``P`` e.g. good/high/fine, ``N`` e.g.
    poor/low/bad) are *summed* inside the exponent -- not averaged, and not a sum of probabilities.
    ``pos_logits`` is ``[B, P]`` and ``neg_logits`` is ``[B, N]``. Log-probabilities give the same result as
    logits only when ``P == N`` (the per-row normaliser then cancels); with unequal set sizes pass raw logits.

    >>> # sums: 1 + 0.5 + 0.5 = 2 and 0 + 1 + 0 = 1 -> sigmoid(2 - 1) = e / (e + 1) = 0.7311
    >>> synonym_ensemble(torch.tensor([[1.0, 0.5, 0.5]]), torch.tensor([[0.0, 1.0, 0.0]]))
    tensor([0.7311])
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}.")
    pos = _as_float32(pos_logits, "pos_logits")
    neg = _as_float32(neg_logits, "neg_logits")
    if pos.shape[-1] == 0 or neg.shape[-1] == 0:
        raise ValueError("pos_logits and neg_logits each need at least one word on the last axis.")
    return torch.sigmoid((pos.sum(dim=-1) - neg.sum(dim=-1)) / temperature)
