"""The VLM core: loading and its knobs, the option-log-prob primitive, prefix reuse, the fp32 answer head, tokens.

Example:
    >>> from reward.vlm import OptionQuery
    >>> OptionQuery("Rate the quality of the image.", ("good", "poor"), "The quality of the image is").separator
    ' '
"""

from reward.vlm.loading import (
    LOADING_KEYS,
    ModelLoading,
    load_processor,
    load_vlm,
    loading_of,
    resolve_device,
    resolve_dtype,
    split_loading,
    thinking_off,
)
from reward.vlm.model import VLM, OptionLogProbs, OptionQuery

__all__ = [
    "LOADING_KEYS",
    "VLM",
    "ModelLoading",
    "OptionLogProbs",
    "OptionQuery",
    "load_processor",
    "load_vlm",
    "loading_of",
    "resolve_device",
    "resolve_dtype",
    "split_loading",
    "thinking_off",
]
