"""The vision tower's packed attention as a few batched SDPA calls instead of one call per image or window (Qwen-VL
towers pack every image, and Qwen2.5-VL every window, into one sequence with ``cu_seqlens`` boundaries): segments
grouped by length, each group one SDPA call; the same attention, in the same order. transformers hands ``cu_seqlens``
only to implementations named "flash", so it is registered as :data:`VARLEN_SDPA` on the vision tower's config alone.

Example:
    >>> import torch
    >>> q = k = v = torch.randn(1, 2, 7, 4)  # [1, heads, packed tokens, head dim]
    >>> cu = torch.tensor([0, 3, 6, 7])
    >>> out, _ = varlen_sdpa(None, q, k, v, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu)
    >>> ref = torch.cat([torch.nn.functional.scaled_dot_product_attention(q[..., a:b, :], k[..., a:b, :],
    ...     v[..., a:b, :]) for a, b in ((0, 3), (3, 6), (6, 7))], dim=2).transpose(1, 2)
    >>> bool(torch.allclose(out, ref, atol=1e-6))
    True
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

logger = logging.getLogger(__name__)

# "flash" in the name: transformers' vision attention passes cu_seqlens only to such implementations
VARLEN_SDPA = "flash_varlen_sdpa"


@functools.lru_cache(maxsize=16)
def _groups(lengths: tuple[int, ...]) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """``(length, starts)`` of the packed segments, grouped by length (empty segments dropped).

    >>> _groups((3, 3, 1, 0, 3))
    ((3, (0, 3, 7)), (1, (6,)))
    """
    by_len: dict[int, list[int]] = {}
    start = 0
    for n in lengths:
        if n > 0:
            by_len.setdefault(n, []).append(start)
        start += n
    return tuple((n, tuple(s)) for n, s in by_len.items())


def varlen_sdpa(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    cu_seq_lens_q: torch.Tensor | None = None,
    cu_seq_lens_k: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention within each packed segment of ``query`` [1, heads, tokens, dim]; returns [1, tokens, heads, dim].

    Without ``cu_seq_lens_q`` (an unpacked call) it is transformers' own SDPA attention.
    """
    if cu_seq_lens_q is None or attention_mask is not None or is_causal:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    if (
        cu_seq_lens_k is not None
        and cu_seq_lens_k is not cu_seq_lens_q
        and not torch.equal(cu_seq_lens_k, cu_seq_lens_q)
    ):
        raise ValueError("varlen_sdpa: packed self-attention needs the same segments for queries and keys")
    if query.shape[0] != 1:
        raise ValueError(f"varlen_sdpa: packed inputs have batch 1, got {query.shape[0]}")
    lengths = tuple((cu_seq_lens_q[1:] - cu_seq_lens_q[:-1]).tolist())  # one host sync per layer, as transformers'
    q, k, v = query[0], key[0], value[0]  # [heads, tokens, dim]
    heads, tokens, dim = q.shape
    out = q.new_empty(tokens, heads, value.shape[-1])
    for n, starts in _groups(lengths):
        # segments that follow one another without a gap: a plain view of them suffices
        if all(b - a == n for a, b in zip(starts, starts[1:], strict=False)):
            a, b = starts[0], starts[0] + n * len(starts)
            qs, ks, vs = (t[:, a:b].reshape(heads, len(starts), n, -1).transpose(0, 1) for t in (q, k, v))
            o = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, dropout_p=dropout, scale=scaling)
            out[a:b] = o.permute(0, 2, 1, 3).reshape(-1, heads, o.shape[-1])
            continue
        index = (torch.tensor(starts, device=q.device)[:, None] + torch.arange(n, device=q.device)).reshape(-1)
        qs, ks, vs = (t[:, index].reshape(heads, len(starts), n, -1).transpose(0, 1) for t in (q, k, v))
        o = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, dropout_p=dropout, scale=scaling)
        out[index] = o.permute(0, 2, 1, 3).reshape(-1, heads, o.shape[-1])
    return out.unsqueeze(0), None


@contextmanager
def batched_vision_attention(model: Any) -> Iterator[bool]:
    """Within the block, a vision tower that runs SDPA attention runs it batched by segment length (see the
    module docstring); yields whether it did. Other implementations (eager, flash attention) are left alone."""
    from transformers import AttentionInterface

    config = getattr(getattr(getattr(model, "model", model), "visual", None), "config", None)  # what the tower reads
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        yield False
        return
    if VARLEN_SDPA not in AttentionInterface._global_mapping:
        AttentionInterface.register(VARLEN_SDPA, varlen_sdpa)
    config._attn_implementation = VARLEN_SDPA
    try:
        yield True
    finally:
        config._attn_implementation = "sdpa"
