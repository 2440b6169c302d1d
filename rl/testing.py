"""Tiny random diffusers inpainting pipelines for tests and the demo (built in :mod:`reward.testing_diffusion`).

>>> # make_tiny_inpaint_pipeline(tmp / "sd15", "sd15-inpaint")  -> a directory loadable with from_pretrained
"""

from reward.testing_diffusion import TINY_KINDS, make_clip_tokenizer, make_tiny_inpaint_pipeline

__all__ = ["TINY_KINDS", "make_clip_tokenizer", "make_tiny_inpaint_pipeline"]
