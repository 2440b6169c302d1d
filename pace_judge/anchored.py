"""Track 2 with the anchors encoded once: [high anchor, low anchor] is a prefix whose KV cache is expanded to every
target of a batch, each target and the question a right-padded suffix whose 3-D RoPE positions come from Qwen-VL's
``get_rope_index`` over the whole sequence (equal to the plain path; models without it use the plain path)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from PIL import Image

from reward.vlm import VLM, OptionLogProbs, OptionQuery
from reward.vlm.answer_head import fp32_answer_head, gather_candidates
from reward.vlm.prefix import repeat_cache


def supports_anchor_prefix(vlm: VLM) -> bool:
    return getattr(getattr(vlm.model, "model", None), "get_rope_index", None) is not None


@torch.inference_mode()
def anchored_logprobs(
    vlm: VLM,
    anchors: Sequence[Image.Image],
    targets: Sequence[Image.Image],
    query: OptionQuery,
    *,
    system: str | None = None,
) -> OptionLogProbs:
    """``query``'s option log-probs for each [*anchors, target] group, the anchors encoded once per batch."""
    ids = vlm.candidate_ids(query, system)
    out = torch.full((len(targets), 1, len(ids)), -math.inf)
    text = vlm.render(len(anchors) + 1, query.question, query.response_prefix, system)
    cut = 0
    for _ in anchors:  # after the anchors' image placeholders
        cut = text.index(vlm.processor.image_token, cut) + len(vlm.processor.image_token)
    prefix, suffix = text[:cut], text[cut:]
    step = max(1, vlm.batch_size)
    for start in range(0, len(targets), step):
        chunk = list(targets[start : start + step])
        with fp32_answer_head(vlm.model):  # as reward.vlm: fp32 answer logits, only the candidates leave the device
            logp = _chunk_logprobs(vlm, prefix, list(anchors), suffix, chunk)
        out[start : start + len(chunk), 0] = gather_candidates(logp, [[ids]] * len(chunk), len(ids))
    return OptionLogProbs(out, [[query.options] for _ in targets])


def _chunk_logprobs(
    vlm: VLM, prefix: str, anchors: list[Image.Image], suffix: str, targets: list[Image.Image]
) -> torch.Tensor:
    model, dev, n = vlm.model, vlm.device, len(targets)
    pin = vlm.processor(text=[prefix], images=anchors, return_tensors="pt").to(dev)
    cache_out = model(**pin, use_cache=True, logits_to_keep=1)
    cache = cache_out.cache if getattr(cache_out, "cache", None) is not None else cache_out.past_key_values
    repeat_cache(cache, n)
    sin = vlm.processor(text=[suffix] * n, images=targets, padding=True, padding_side="right", return_tensors="pt")
    sin = sin.to(dev)
    mask = torch.cat([pin["attention_mask"].expand(n, -1), sin["attention_mask"]], dim=1)
    grids = torch.cat([torch.cat([pin["image_grid_thw"], sin["image_grid_thw"][b : b + 1]]) for b in range(n)])
    extra = {}
    if "mm_token_type_ids" in sin:
        extra["mm_token_type_ids"] = torch.cat([pin["mm_token_type_ids"].expand(n, -1), sin["mm_token_type_ids"]], 1)
    full_ids = torch.cat([pin["input_ids"].expand(n, -1), sin["input_ids"]], dim=1)
    pos, _ = model.model.get_rope_index(input_ids=full_ids, image_grid_thw=grids, attention_mask=mask, **extra)
    suffix_inputs = {k: v for k, v in sin.items() if k != "attention_mask"}
    last = sin["attention_mask"].sum(-1) - 1
    keep = torch.unique(last)  # the positions some row answers at
    logits = model(
        **suffix_inputs,
        attention_mask=mask,
        position_ids=pos[:, :, pin["input_ids"].shape[1] :],
        cache=cache,
        use_cache=True,
        logits_to_keep=keep,
    ).logits[torch.arange(n, device=dev), torch.searchsorted(keep, last)]
    return torch.log_softmax(logits.float(), dim=-1)
