"""The VLM core: loading and its knobs, the option-log-prob primitive, prefix reuse, the fp32 answer head, tokens.

Example:
    >>> from reward.vlm import OptionQuery
    >>> OptionQuery("Rate the quality of the image.", ("good", "poor"), "The quality of the image is").separator
    ' '
"""

from __future__ import annotations

import importlib
from typing import Any

IMAGE = "<image>"  # in a question: where an image goes ("The first image: <image>"); without it, images come first
# imported on first use, so that settings (ModelLoading) are read without torch
_HOME = {
    **dict.fromkeys(
        (
            "ModelLoading",
            "load_processor",
            "load_vlm",
            "loading_of",
            "resolve_device",
            "resolve_dtype",
            "thinking_off",
        ),
        "reward.vlm.loading",
    ),
    **dict.fromkeys(("VLM", "OptionLogProbs", "OptionQuery"), "reward.vlm.model"),
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'reward.vlm' has no attribute {name!r}")


__all__ = sorted(_HOME)
