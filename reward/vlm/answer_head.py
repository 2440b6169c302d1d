"""The answer position of a low-precision model, read precisely: fp32 logits and candidate ids gathered on the device.

bf16 logits are spaced 0.125 apart at |logit| 16-32, enough to move an expected value over rating words, so the
output projection of the answer position is computed in fp32 (a slice of the vocabulary at a time, the weights
left as they are); and only the candidate words' log-probabilities leave the device, never [rows x vocab].
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


def gather_candidates(logp: torch.Tensor, ids: list[list[list[int]]], k_max: int) -> torch.Tensor:
    """``[R, k_max]`` candidate log-probs gathered on ``logp``'s device (rows group-major; padding -inf): only
    these few numbers go to the host."""
    rows = [cand for group in ids for cand in group]
    index = torch.zeros(len(rows), max(k_max, 1), dtype=torch.long)
    valid = torch.zeros(len(rows), max(k_max, 1), dtype=torch.bool)
    for r, cand in enumerate(rows):
        index[r, : len(cand)] = torch.tensor(cand, dtype=torch.long)
        valid[r, : len(cand)] = True
    picked = logp.gather(1, index.to(logp.device)).masked_fill(~valid.to(logp.device), -math.inf)
    return picked[:, :k_max].cpu()


class _Fp32Head(torch.nn.Module):
    """The output projection computed in fp32 from a low-precision one, a slice of the vocabulary at a time."""

    def __init__(self, head: torch.nn.Linear, chunk: int = 32768) -> None:
        super().__init__()
        self.head = head
        self.chunk = chunk

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        weight, bias = self.head.weight, self.head.bias
        h = hidden.to(weight.device, torch.float32)
        parts = [
            torch.nn.functional.linear(h, weight[i : i + self.chunk].float())
            for i in range(0, weight.shape[0], self.chunk)
        ]
        logits = torch.cat(parts, dim=-1)
        return logits if bias is None else logits + bias.float()


@contextmanager
def fp32_answer_head(model: Any) -> Iterator[None]:
    """Within the block, ``model``'s output projection yields fp32 logits (the weights stay as they are)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    name = next((n for n, m in model.named_children() if m is head), None)
    if not isinstance(head, torch.nn.Linear) or name is None or head.weight.dtype == torch.float32:
        yield
        return
    setattr(model, name, _Fp32Head(head))
    try:
        yield
    finally:
        setattr(model, name, head)
