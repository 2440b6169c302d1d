"""Test-only builders: tiny random VLMs and LMs, tiny diffusers pipelines, a loopback HTTP server.

Library code never imports this package (a test checks it); tests, the demo and the bench do.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    "ANSWER_WORDS": "reward.testing.models",
    "CHAT_TEMPLATE": "reward.testing.models",
    "make_tokenizer": "reward.testing.models",
    "make_tiny_vlm": "reward.testing.models",
    "make_tiny_lm": "reward.testing.models",
    "TINY_KINDS": "reward.testing.diffusion",
    "make_clip_tokenizer": "reward.testing.diffusion",
    "make_tiny_inpaint_pipeline": "reward.testing.diffusion",
    "make_tiny_text_to_image": "reward.testing.diffusion",
    "serve": "reward.testing.loopback",
    "serve_openai": "reward.testing.openai_server",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'reward.testing' has no attribute {name!r}")
