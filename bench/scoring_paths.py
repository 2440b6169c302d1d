"""The scoring paths the library's one path replaced, kept for the bench and the tests to compare with: image
processor on the host in the loop, batches in input order, the vision tower's own attention, pageable copies.

``use_speed(vlm, ScoringSpeed.unoptimised())`` makes a loaded VLM a :class:`TunedVLM` (the library's VLM with each
choice of ``vlm.speed`` applied by an override or a patch); ``ScoringSpeed()`` is the library's path unchanged.
Bench and tests only (``python bench/NAME.py`` imports it by its bare name).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

import reward.vlm.model
from reward.vlm.inputs import PreparedImages, device_preprocessing
from reward.vlm.model import VLM

logger = logging.getLogger("reward.vlm.model")  # said where the library's own scoring messages are

PREPROCESS = ("auto", "host", "device")
VISION_ATTENTION = ("batched", "model")


@dataclass
class ScoringSpeed:
    """How :meth:`VLM.option_logprobs` feeds the model; every choice gives the same scores (fp32 within 1e-4)."""

    preprocess: str = "auto"  # image processor: device (torchvision on the GPU), host, auto (device where it can)
    group_by_tokens: bool = True  # batch image groups of similar visual token counts (less padding)
    vision_attention: str = "batched"  # the tower's packed SDPA as a few batched calls (vision_attention.py); model
    pin_memory: bool = True  # batches built in pinned host memory, copied without blocking

    def __post_init__(self) -> None:
        if self.preprocess not in PREPROCESS:
            raise ValueError(f"preprocess={self.preprocess!r}: use one of {', '.join(PREPROCESS)}")
        if self.vision_attention not in VISION_ATTENTION:
            raise ValueError(f"vision_attention={self.vision_attention!r}: use one of {', '.join(VISION_ATTENTION)}")

    @classmethod
    def unoptimised(cls) -> ScoringSpeed:
        """The scoring path before the faster loop: image processor on the host in the loop, batches in input order,
        per-window vision attention, pageable copies."""
        return cls(preprocess="host", group_by_tokens=False, vision_attention="model", pin_memory=False)


class TunedVLM(VLM):
    """The library's VLM scoring the way ``self.speed`` says (see the module docstring)."""

    speed: ScoringSpeed
    _told: set[str]

    def _device_preprocessing(self) -> bool:
        if self.speed.preprocess == "host":
            return False
        on_device = super()._device_preprocessing()
        why_not = (
            None if on_device else device_preprocessing(self._fast or self.processor.image_processor, self.device)
        )
        if why_not is not None and self.speed.preprocess == "device" and why_not not in self._told:
            self._told.add(why_not)
            logger.info("image processing stays on the host (preprocess=device asked for): %s", why_not)
        return on_device

    def _batch_order(self, members: list[int], prepared: dict[int, PreparedImages]) -> list[int]:
        return super()._batch_order(members, prepared) if self.speed.group_by_tokens else list(members)

    def _chunk_logprobs(self, groups: list[PreparedImages], texts: list[list[str]], reuse_prefix: bool) -> Any:
        with contextlib.ExitStack() as patches:
            if self.speed.vision_attention == "model":  # the tower's own attention, one call per window
                plain = mock.patch.object(reward.vlm.model, "batched_vision_attention", _no_batching)
                patches.enter_context(plain)
            if not self.speed.pin_memory:
                encode, suffix = reward.vlm.model.encode, reward.vlm.model.suffix_logits
                patches.enter_context(mock.patch.object(reward.vlm.model, "encode", _unpinned(encode, 3)))
                patches.enter_context(mock.patch.object(reward.vlm.model, "suffix_logits", _unpinned(suffix, 4)))
            return super()._chunk_logprobs(groups, texts, reuse_prefix)


def _no_batching(model: Any) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


def _unpinned(function: Any, at: int) -> Any:
    """``function`` with its ``pin`` argument (keyword, or positional at index ``at``) false."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if len(args) > at:
            args = (*args[:at], False, *args[at + 1 :])
        else:
            kwargs["pin"] = False
        return function(*args, **kwargs)

    return call


def use_speed(vlm: VLM, speed: ScoringSpeed) -> VLM:
    """``vlm`` scoring the way ``speed`` says from now on (``ScoringSpeed()``: the library's path)."""
    if not isinstance(vlm, TunedVLM):
        vlm.__class__ = TunedVLM
        vlm._told = set()
    vlm.speed = speed  # type: ignore[attr-defined]
    return vlm


__all__: Sequence[str] = ("ScoringSpeed", "TunedVLM", "use_speed")
