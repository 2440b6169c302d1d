"""Encode an image prefix once, reuse its cache for many question suffixes.

Every query about one image group is tokenized in full; the tokens they share (system turn, user turn start, the
images) are the prefix, run once, and its cache is copied to each query; only the rest (the question, the end of the
user turn, the assistant start and the response prefix) runs per query. Splitting the token ids, not the text, keeps
the tokens exactly those of the plain path for every tokenizer. The copy holds every state the prefix left: keys and
values, and the convolution and recurrent states of linear-attention layers (Qwen3.5's Gated DeltaNet). Suffixes are
padded on the right, so that no padding sits between a prefix and its suffix (a recurrent state would read it), and
each row's answer is read at its own last token. Qwen-VL models use 3-D multimodal RoPE, so the suffix gets explicit
positions continuing the prefix's (``prefix_len + rope_delta``); letting the model infer them silently gives wrong
log-probs (tests/test_families.py compares both paths on every family).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from reward.vlm.inputs import PreparedImages, image_inputs, pad, to_device, token_ids


def shared_length(rows: Sequence[Sequence[int]]) -> int:
    """How many leading tokens all ``rows`` share, leaving each at least one of its own.

    >>> shared_length([[1, 2, 3, 4], [1, 2, 5]]), shared_length([[1, 2], [1, 2]])
    (2, 1)
    """
    n = min(len(r) for r in rows) - 1
    first = rows[0]
    return next((i for i in range(n) if any(r[i] != first[i] for r in rows)), n)


def repeat_cache(cache: Any, n: int) -> None:
    """Each row of ``cache`` repeated ``n`` times in place (row ``b * n + q``): its keys and values, and the
    convolution and recurrent states of linear-attention layers."""
    for layer in cache.layers:
        if hasattr(layer, "batch_repeat_interleave"):
            layer.batch_repeat_interleave(n)
        for states in (getattr(layer, "conv_states", {}), getattr(layer, "recurrent_states", {})):
            for i, state in states.items():
                if state is not None:
                    states[i] = state.repeat_interleave(n, dim=0)


def suffix_logits(
    model: Any, processor: Any, groups: list[PreparedImages], texts: list[list[str]], pin: bool = False
) -> torch.Tensor:
    """Next-token logits after each text, rows group-major ([G*Q, V]): each group's prefix run once, its cache
    expanded to the queries, only the suffixes run. Every group has Q texts, which must share the text before (and
    with) their images."""
    n_q, rope_index = len(texts[0]), getattr(getattr(model, "model", None), "get_rope_index", None)  # Qwen-VL's 3-D
    ids = token_ids(processor, [t for row in texts for t in row], [g for g in groups for _ in range(n_q)])
    prefixes, suffixes = [], []
    for g in range(len(groups)):
        rows = ids[g * n_q : (g + 1) * n_q]
        cut = shared_length(rows)
        prefixes.append(rows[0][:cut])
        suffixes.extend(r[cut:] for r in rows)
    if any(model.config.image_token_id in row for row in suffixes):
        raise ValueError("queries about one image group must share the text before the images")
    inputs = to_device({**pad(processor, prefixes), **image_inputs(processor, groups, pin=pin)}, model.device)
    position_ids, next_pos = _prefix_positions(inputs, rope_index)
    out = model(**inputs, position_ids=position_ids, use_cache=True, logits_to_keep=1)
    cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
    repeat_cache(cache, n_q)
    enc = pad(processor, suffixes, side="right")
    s_ids, s_mask = enc["input_ids"].to(model.device), enc["attention_mask"].to(model.device)
    s_pos = next_pos.repeat_interleave(n_q)[:, None] + torch.arange(s_ids.shape[1], device=model.device)
    if rope_index is not None:
        s_pos = s_pos[None].expand(3, -1, -1)
    mask = torch.cat([inputs["attention_mask"].repeat_interleave(n_q, dim=0), s_mask], dim=1)
    last = s_mask.sum(-1) - 1
    keep = torch.unique(last)  # the positions some row answers at: logits of those only
    logits = model(
        input_ids=s_ids, attention_mask=mask, position_ids=s_pos, cache=cache, use_cache=True, logits_to_keep=keep
    ).logits
    return logits[torch.arange(len(last), device=logits.device), torch.searchsorted(keep, last)]


def _prefix_positions(inputs: Any, rope_index: Any) -> tuple[torch.Tensor, torch.Tensor]:
    mask = inputs["attention_mask"]
    length = mask.long().sum(-1)
    if rope_index is None:
        return (mask.long().cumsum(-1) - 1).clamp_min(0), length
    kwargs = {k: inputs[k] for k in ("image_grid_thw", "mm_token_type_ids") if k in inputs}
    pos, deltas = rope_index(input_ids=inputs["input_ids"], attention_mask=mask, **kwargs)
    return pos, length + deltas.view(-1).to(length.device)
