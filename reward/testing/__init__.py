"""Test-only builders: tiny random VLMs and LMs, tiny diffusers pipelines, loopback HTTP servers.

Library code never imports this package (a test checks it); tests, the demo and the bench do.
"""

from reward.testing.diffusion import make_clip_tokenizer, make_tiny_inpaint_pipeline, make_tiny_text_to_image
from reward.testing.loopback import serve
from reward.testing.models import ANSWER_WORDS, make_tiny_lm, make_tiny_vlm
from reward.testing.openai_server import serve_openai

__all__ = [
    "ANSWER_WORDS",
    "make_clip_tokenizer",
    "make_tiny_inpaint_pipeline",
    "make_tiny_lm",
    "make_tiny_text_to_image",
    "make_tiny_vlm",
    "serve",
    "serve_openai",
]
