"""How a VLM checkpoint is loaded: one small set of knobs that every reward config and the SFT config carry.

The keys sit flat in a reward's config (``reward.device_map=auto reward.max_pixels=401408``) and in
``configs/sft.yaml``'s ``model:`` section; :func:`split_loading` takes them out of a config mapping and
:func:`reward.vlm.load_vlm` takes the resulting :class:`ModelLoading`.

Example:
    >>> loading, rest = split_loading({"model": "m", "dtype": "bfloat16", "max_pixels": 401408})
    >>> loading.dtype, loading.max_pixels, rest
    ('bfloat16', 401408, {'model': 'm'})
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from reward.config import from_mapping

ATTN_IMPLEMENTATIONS = ("sdpa", "flash_attention_2", "flash_attention_3", "eager")


@dataclass
class ModelLoading:
    """Loading knobs of a VLM checkpoint (every field has a default: the checkpoint's own behaviour)."""

    dtype: str = "auto"  # auto: bf16 on a GPU that supports it, fp32 elsewhere
    device: str | None = None  # null: cuda if available; ignored when device_map is set
    device_map: str | dict | None = None  # "auto": spread a model larger than one GPU over all GPUs (accelerate)
    attn_implementation: str | None = "sdpa"  # sdpa, flash_attention_2 (pip install flash-attn), eager; null: default
    min_pixels: int | None = None  # processor: images smaller than this are upscaled (null: the checkpoint's)
    max_pixels: int | None = None  # processor: images larger are downscaled; visual tokens = pixels / 28^2

    def __post_init__(self) -> None:
        problems = []
        if self.attn_implementation is not None and self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            problems.append(
                f"attn_implementation={self.attn_implementation!r}: use one of {', '.join(ATTN_IMPLEMENTATIONS)}"
            )
        for name in ("min_pixels", "max_pixels"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                problems.append(f"{name}={v!r}: a positive number of pixels, e.g. 401408 (= 512 * 28 * 28)")
        if self.min_pixels and self.max_pixels and self.min_pixels > self.max_pixels:
            problems.append(f"min_pixels={self.min_pixels} is above max_pixels={self.max_pixels}")
        if self.device_map is not None and self.device not in (None, "auto"):
            problems.append(f"device={self.device!r} and device_map={self.device_map!r}: set only one of them")
        if problems:
            raise ValueError("invalid model loading settings:\n  - " + "\n  - ".join(problems))

    @property
    def processor_kwargs(self) -> dict[str, int]:
        """The visual-token budget for ``from_pretrained`` of the image processor (only the keys that are set)."""
        return {k: v for k, v in (("min_pixels", self.min_pixels), ("max_pixels", self.max_pixels)) if v is not None}


LOADING_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ModelLoading))


def split_loading(cfg: dict[str, Any], *, where: str = "reward") -> tuple[ModelLoading, dict[str, Any]]:
    """Take the :class:`ModelLoading` keys out of a flat config mapping: ``(loading, the other keys)``."""
    own = {k: v for k, v in cfg.items() if k in LOADING_KEYS}
    rest = {k: v for k, v in cfg.items() if k not in LOADING_KEYS}
    return from_mapping(ModelLoading, own, where=where, ignore=()), rest
