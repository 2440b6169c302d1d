"""Models for training, as SFT and GRPO load them: one precision rule (:func:`load_dtype`, from the trainer's
``bf16`` and DeepSpeed; :func:`load_for_training`), LoRA (:class:`LoraSettings`, :func:`lora_config`), the vision
tower and aligner frozen."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omegaconf import MISSING

from reward.vlm.families import FAMILIES
from reward.vlm.loading import ModelLoading, loading_of

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

VISION_TOWERS = tuple(dict.fromkeys(f.vision for f in FAMILIES.values()))  # module names across VLM families
ALIGNERS = tuple(dict.fromkeys(f.aligner for f in FAMILIES.values()))


@dataclass
class ModelSettings(ModelLoading):
    """The VLM to fine-tune; loading knobs from :class:`reward.vlm.ModelLoading` (``dtype=auto``: fp32 master
    weights for full fine-tuning under the trainer's bf16 autocast, bf16 for LoRA or DeepSpeed, see
    :func:`load_dtype`; ``min_pixels``/``max_pixels`` are saved with the scorer)."""

    path: str = field(default=MISSING, metadata={"help": "VLM folder or Hub id (Qwen2-VL, Qwen2.5-VL, Qwen3-VL)"})
    freeze_vision: bool = field(default=True, metadata={"help": "SA-IQA freezes the ViT ..."})
    freeze_aligner: bool = field(default=True, metadata={"help": "... and the aligner (merger); the LLM is trained"})

    def problems(self) -> list[str]:
        """The loading knobs together (:func:`reward.vlm.loading.loading_of`)."""
        try:
            loading_of(self)
        except ValueError as err:
            return [f"model: {err}".replace("\n  - ", "; ")]
        return []


@dataclass
class LoraSettings:
    enabled: bool = field(default=False, metadata={"help": "LoRA on the language model instead of full fine-tuning"})
    r: int = field(default=16, metadata={"help": "rank", "range": (1, 4096)})
    alpha: int = field(default=32, metadata={"help": "scaling numerator (lora_alpha)", "range": (1, 100_000)})
    dropout: float = field(default=0.05, metadata={"help": "dropout on the LoRA layers' input", "range": (0, 0.99)})
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        metadata={"help": "projections of the language model's layers (the vision tower is never adapted)"},
    )
    modules_to_save: list[str] | None = field(
        default=None, metadata={"help": "e.g. [lm_head, embed_tokens]: trained fully beside the adapter"}
    )


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
    total = sum(p.numel() for p in model.parameters())
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    text = "vision tower %s frozen=%s, aligner frozen=%s: %d of %d parameters trainable"
    logger.info(text, tower_name, vision, aligner, trained, total)
    return {"trainable": trained, "total": total}


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


def load_dtype(dtype: str, *, lora: bool, bf16: bool, deepspeed: bool) -> torch.dtype:
    """The dtype to load the weights in for training.

    ``auto``: full fine-tuning without DeepSpeed keeps fp32 master weights and lets the trainer's bf16 autocast
    do mixed precision (as trl does given a model name): pure-bf16 AdamW at lr 2e-5 rounds most updates away.
    LoRA (frozen base) and DeepSpeed (its own fp32 master copy) load in bf16 where training runs in bf16. ``bf16``
    and ``deepspeed``: the trainer's (``bool(args.bf16)``, :func:`training.shared.deepspeed.uses_deepspeed`).

    >>> [load_dtype("auto", lora=lora, bf16=True, deepspeed=False) for lora in (False, True)]
    [torch.float32, torch.bfloat16]
    """
    import torch

    from reward.vlm import resolve_dtype

    if dtype != "auto":
        chosen = resolve_dtype(dtype)
        if chosen != torch.float32 and not lora and not deepspeed:
            logger.warning(
                "model.dtype=%s with full fine-tuning and no DeepSpeed: the optimizer updates %s weights "
                "directly and small updates round away; model.dtype=auto keeps fp32 master weights",
                dtype,
                chosen,
            )
        return chosen
    if bf16 and (lora or deepspeed):
        return torch.bfloat16
    return torch.float32


def load_for_training(
    path: str, dtype: torch.dtype, loading: ModelLoading | None = None, *, vision: bool = True
) -> Any:
    """The model for training (SFT's scorer, GRPO's policy): ``dtype`` weights (choose it with
    :func:`load_dtype`), attention implementation and device_map from ``loading``; a VLM, or with
    ``vision=False`` a causal language model. ``path`` may be a LoRA adapter folder (``trl sft --use_peft``'s output,
    e.g. GRPO's stage-1 prompt expander): its base is loaded and the adapter merged in fp32, rounded once to
    ``dtype``, so training starts from the fine-tuned model."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from reward.vlm.loading import adapter_base, attach_adapter

    cls = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    base = adapter_base(path)
    model = cls.from_pretrained(base or path, **(loading or ModelLoading()).model_kwargs(dtype))
    if base is not None:
        model = attach_adapter(model, path)
        logger.info("%s: the LoRA adapter merged into its base %s (fp32, rounded once to %s)", path, base, dtype)
    return model
