"""Test-only builders: tiny random VLMs and LMs, tiny diffusers pipelines, loopback HTTP servers.

Library code never imports this package (a test checks it); tests, the demo and the bench do. Each builder is
imported on first use (so that the demo checks its settings before torch loads).
"""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    **dict.fromkeys(("make_clip_tokenizer", "make_tiny_inpaint_pipeline", "make_tiny_text_to_image"), "diffusion"),
    "serve": "loopback",
    **dict.fromkeys(("ANSWER_WORDS", "make_tiny_lm", "make_tiny_vlm"), "models"),
    "serve_openai": "openai_server",
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"reward.testing.{_HOME[name]}"), name)
    raise AttributeError(f"module 'reward.testing' has no attribute {name!r}")


__all__ = sorted(_HOME)
