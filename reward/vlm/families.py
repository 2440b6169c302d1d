"""The VLM families the toolkit scores, fine-tunes and reuses exactly, one entry per transformers model type.

What differs between families lives here as data, never as ``if "qwen" in name`` in generic code: what the pixel
budget sets, which module is the vision tower and which the aligner (frozen for SFT, told apart by ``plan=true``),
how many visual tokens an image costs, and which checks of the test matrix a family is spared, with the reason.
``tests/test_families.py`` runs every check on a tiny random checkpoint of every entry; ``docs/backbones.md``'s
table is made from this one (``python docs/settings.py``).

Example:
    >>> family_of("gemma3").vision, family_of("gemma3").pixels is None
    ('vision_tower', True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

CHECKS = ("score", "prefix reuse exact", "SFT LoRA", "SFT full", "GRPO policy", "plan")


@dataclass(frozen=True)
class Family:
    """One VLM family (a transformers model type)."""

    label: str  # as people call it
    ids: tuple[str, ...]  # Hub ids it covers (examples)
    vision: str = "visual"  # the vision tower's module
    aligner: str = "merger"  # the module between the tower and the language model (a name part)
    # what min_pixels/max_pixels set: "area" (the image is resized to that many pixels, Qwen-VL's smart resize),
    # "tiles" (at most max_pixels / tile pixels crops of the tile size), None (a fixed resolution: refused)
    pixels: str | None = "area"
    frames: int = 1  # the image processor's area budget counts this many frames of an image (GLM-4V repeats it)
    # visual tokens of one image (or tile) from the model config; None: pixels / (patch x merge)^2
    tokens: Callable[[Any], int] | None = None
    skips: dict[str, str] = field(default_factory=dict)  # check (of CHECKS) -> why it is not run


FAMILIES: dict[str, Family] = {
    "qwen2_vl": Family("Qwen2-VL", ("Qwen/Qwen2-VL-2B-Instruct", "Qwen/Qwen2-VL-7B-Instruct")),
    "qwen2_5_vl": Family("Qwen2.5-VL", ("Qwen/Qwen2.5-VL-3B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct")),
    "qwen3_vl": Family("Qwen3-VL", ("Qwen/Qwen3-VL-2B-Instruct", "Qwen/Qwen3-VL-8B-Instruct")),
    "qwen3_5": Family("Qwen3.5", ("Qwen/Qwen3.5-27B",)),
    "qwen3_5_moe": Family("Qwen3.5 MoE", ("Qwen/Qwen3.5-35B-A3B",)),
    "glm4v": Family("GLM-4.1V", ("zai-org/GLM-4.1V-9B-Thinking",), frames=2),
    "ovis2": Family(
        "Ovis2",
        ("thisisiron/Ovis2-1B-hf", "thisisiron/Ovis2-2B-hf"),
        vision="vision_tower",
        aligner="visual_embeddings_table",
        pixels="tiles",
        tokens=lambda c: (
            (c.vision_config.image_size // (c.vision_config.patch_size * c.vision_config.hidden_stride)) ** 2
        ),
        skips={
            "GRPO policy": "trl tokenizes the policy's prompts without return_tensors, and transformers' "
            "Ovis2Processor then fails on its own grids ('list' object has no attribute 'tolist')"
        },
    ),
    "internvl": Family(
        "InternVL3",
        ("OpenGVLab/InternVL3-1B-hf", "OpenGVLab/InternVL3-8B-hf"),
        vision="vision_tower",
        aligner="multi_modal_projector",
        pixels="tiles",
        tokens=lambda c: c.image_seq_length,
    ),
    "gemma3": Family(
        "Gemma 3",
        ("google/gemma-3-4b-it", "google/gemma-3-12b-it"),
        vision="vision_tower",
        aligner="multi_modal_projector",
        pixels=None,
        tokens=lambda c: c.mm_tokens_per_image,
    ),
    "smolvlm": Family(
        "SmolVLM",
        ("HuggingFaceTB/SmolVLM2-2.2B-Instruct",),
        vision="vision_model",
        aligner="connector",
        pixels=None,
        tokens=lambda c: (c.vision_config.image_size // c.vision_config.patch_size) ** 2 // c.scale_factor**2,
    ),
    "llava_onevision": Family(
        "LLaVA-OneVision",
        ("llava-hf/llava-onevision-qwen2-0.5b-ov-hf", "llava-hf/llava-onevision-qwen2-7b-ov-hf"),
        vision="vision_tower",
        aligner="multi_modal_projector",
        pixels=None,
        tokens=lambda c: (c.vision_config.image_size // c.vision_config.patch_size) ** 2,
        skips={
            "GRPO policy": "trl's GRPOTrainer passes every processor output to its log-prob function, which does not "
            "take LLaVA-OneVision's batch_num_images"
        },
    ),
}

GENERIC = Family("another VLM", ())  # a model type not in the table: Qwen-VL's conventions


def family_of(model_type: str) -> Family:
    """The entry of ``model_type`` (:data:`GENERIC` for one not in the table)."""
    return FAMILIES.get(model_type, GENERIC)
