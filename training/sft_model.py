"""The model side of SA-IQA SFT: load the VLM, freeze the vision tower and aligner, optional LoRA (peft)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

logger = logging.getLogger(__name__)

VISION_TOWERS = ("visual", "vision_tower", "vision_model")  # attribute names across VLM families
ALIGNERS = ("merger", "multi_modal_projector", "mm_projector", "aligner")


@dataclass
class LoraSettings:
    enabled: bool = False  # LoRA on the language model instead of full fine-tuning
    r: int = 16  # rank
    alpha: int = 32  # scaling numerator (lora_alpha)
    dropout: float = 0.05
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )  # projections of the language model's layers (the vision tower is never adapted)
    modules_to_save: list[str] | None = None  # e.g. [lm_head, embed_tokens]: trained fully beside the adapter


def find_submodule(model: torch.nn.Module, names: Sequence[str]) -> tuple[str, torch.nn.Module] | None:
    """The first module whose attribute name is one of ``names`` (searching breadth-first by path depth)."""
    candidates = [(n, m) for n, m in model.named_modules() if n.split(".")[-1] in names]
    return min(candidates, key=lambda nm: nm[0].count("."), default=None)


def freeze_vision(model: torch.nn.Module, *, vision: bool = True, aligner: bool = True) -> dict[str, int]:
    """Freeze the vision tower (without its aligner) and/or the aligner; returns trainable counts per part."""
    tower = find_submodule(model, VISION_TOWERS)
    if tower is None:
        raise ValueError(
            f"{type(model).__name__}: no vision tower found (looked for {', '.join(VISION_TOWERS)}); "
            "set model.freeze_vision=false and model.freeze_aligner=false for this architecture"
        )
    tower_name, tower_module = tower
    align = find_submodule(tower_module, ALIGNERS) or find_submodule(model, ALIGNERS)
    align_params = {id(p) for p in align[1].parameters()} if align else set()
    for p in tower_module.parameters():
        if id(p) not in align_params:
            p.requires_grad_(not vision)
    if align is not None:
        for p in align[1].parameters():
            p.requires_grad_(not aligner)
    elif aligner:
        logger.warning("no aligner/projector module found in %s; nothing to freeze there", type(model).__name__)
    counts = {
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "total": sum(p.numel() for p in model.parameters()),
    }
    logger.info("vision tower %s frozen=%s, aligner frozen=%s: %d of %d parameters trainable", tower_name, vision,
                aligner, counts["trainable"], counts["total"])  # fmt: skip
    return counts


def lora_config(settings: LoraSettings) -> Any:
    """A peft ``LoraConfig`` restricted to the language model (the vision tower is frozen anyway)."""
    from peft import LoraConfig

    targets = "|".join(settings.target_modules)
    return LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=rf"^(?!.*(?:{'|'.join(VISION_TOWERS)})).*\.(?:{targets})$",
        modules_to_save=settings.modules_to_save,
        task_type="CAUSAL_LM",
    )


def load_for_training(path: str, dtype: torch.dtype) -> Any:
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(path, dtype=dtype)
