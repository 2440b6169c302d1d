"""Encode an image prefix once, reuse its KV cache for many question suffixes.

The prefix is everything up to the last ``<|vision_end|>`` (system turn, user turn start, the images); the
suffix is the question, the end of the user turn, the assistant start and the response prefix. Qwen-VL models
use 3-D multimodal RoPE, so the suffix gets explicit positions continuing the prefix's
(``prefix_len + rope_delta``); letting the model infer them silently gives wrong log-probs (tests/test_vlm.py
compares both paths).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from reward.vlm.profile import section


def split_at_images(text: str, vision_end: str) -> tuple[str, str]:
    """Split a rendered prompt after its last image: ``(prefix, suffix)``."""
    pos = text.rfind(vision_end)
    if pos < 0:
        raise ValueError(f"prompt has no image (no {vision_end!r}): the shared-prefix path needs images")
    cut = pos + len(vision_end)
    return text[:cut], text[cut:]


class PrefixEncoder:
    """Run prefixes once, expand their cache to the queries, run only the suffixes."""

    def __init__(self, model: Any, processor: Any) -> None:
        self.model = model
        self.processor = processor
        tok = processor.tokenizer
        self.vision_end: str = (
            getattr(processor, "vision_end_token", None) or getattr(tok, "vision_end_token", None) or "<|vision_end|>"
        )
        inner = getattr(model, "model", None)
        self._rope_index = getattr(inner, "get_rope_index", None)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def suffix_logits(self, inputs: dict[str, torch.Tensor], suffixes: Sequence[Sequence[str]]) -> torch.Tensor:
        """Next-token logits after each suffix, rows group-major ([G*Q, V]); every group has Q suffixes.

        ``inputs``: the prefixes with their images, as the processor encodes them (``reward.vlm.inputs.encode``),
        on the model's device.
        """
        n_q = len(suffixes[0])
        prefix_mask = inputs["attention_mask"]
        position_ids, next_pos = self._prefix_positions(inputs)
        out = self.model(**inputs, position_ids=position_ids, use_cache=True, logits_to_keep=1)
        with section("tokenizer"):
            cache = out.cache if hasattr(out, "cache") and out.cache is not None else out.past_key_values
            if n_q > 1:
                cache.batch_repeat_interleave(n_q)
            tok = self.processor.tokenizer
            flat_suffixes = [s for row in suffixes for s in row]
            enc = tok(flat_suffixes, add_special_tokens=False, padding=True, return_tensors="pt").to(self.device)
            s_ids, s_mask = enc["input_ids"], enc["attention_mask"]
            start = next_pos.repeat_interleave(n_q)[:, None]
            s_pos = (start + s_mask.long().cumsum(-1) - 1).clamp_min(0)
            s_pos = torch.where(s_mask.bool(), s_pos, start)
            if self._rope_index is not None:
                s_pos = s_pos[None].expand(3, -1, -1)
            mask = torch.cat([prefix_mask.repeat_interleave(n_q, dim=0), s_mask], dim=1)
        logits = self.model(
            input_ids=s_ids, attention_mask=mask, position_ids=s_pos, cache=cache, use_cache=True, logits_to_keep=1
        ).logits
        return logits[:, -1]

    def _prefix_positions(self, inputs: Any) -> tuple[torch.Tensor | None, torch.Tensor]:
        mask = inputs["attention_mask"]
        length = mask.long().sum(-1)
        if self._rope_index is None:
            pos = (mask.long().cumsum(-1) - 1).clamp_min(0)
            return pos, length
        kwargs = {k: inputs[k] for k in ("image_grid_thw", "mm_token_type_ids") if k in inputs}
        pos, deltas = self._rope_index(input_ids=inputs["input_ids"], attention_mask=mask, **kwargs)
        return pos, length + deltas.view(-1).to(length.device)
