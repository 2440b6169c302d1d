"""The GRPO policy: whether it is a VLM, the precision it trains in, and its loading (through SFT's loader)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from reward.core.errors import MissingInputError, UserError
from training.shared.deepspeed import uses_deepspeed
from training.shared.trainable import LoraSettings, load_dtype, load_for_training

logger = logging.getLogger(__name__)

POLICY_VIEWS = ("masked", "outline", "original")


@dataclass
class PolicySettings:
    path: str = field(
        default=MISSING,
        metadata={"help": "the prompt expander: a causal LM or a VLM directory (the paper: its stage-1 LoRA SFT)"},
    )
    dtype: str = field(
        default="auto",
        metadata={
            "help": "auto: fp32 master weights for full fine-tuning without DeepSpeed; bf16 with LoRA/DeepSpeed"
        },
    )
    vision: str = field(
        default="auto",
        metadata={
            "help": "auto: a VLM (it sees the task image) if its config has a vision part; true; false",
            "choices": ("auto", "true", "false"),
        },
    )
    freeze_vision: bool = field(default=True, metadata={"help": "VLM policy: the vision tower stays frozen"})
    image: str = field(
        default="masked",
        metadata={
            "help": "what a VLM policy sees: masked (region to invent greyed out) | outline | original",
            "choices": POLICY_VIEWS,
        },
    )


def is_vlm(path: str, vision: str | bool) -> bool:
    """Whether the policy is a VLM (it then sees the task image): from ``policy.vision`` or its config."""
    if str(vision).lower() == "true":  # the command line's false reaches a str field as 'False'
        return True
    if str(vision).lower() == "false":
        return False
    from transformers import AutoConfig

    from reward.vlm.loading import adapter_base

    try:
        config = AutoConfig.from_pretrained(adapter_base(path) or path)  # an adapter folder: its base's config
    except (OSError, ValueError) as err:
        raise MissingInputError(
            f"policy.path={path!r}: cannot read its config ({err}); point it at a model directory"
        ) from err
    return getattr(config, "vision_config", None) is not None


def load_policy(policy: PolicySettings, lora: LoraSettings, vision: bool, args: Any) -> tuple[Any, Any]:
    """The policy through the loader SFT uses (one precision rule: fp32 master weights for full fine-tuning without
    DeepSpeed under the trainer's bf16 autocast, bf16 for LoRA or DeepSpeed) and its processor or tokenizer."""
    from reward.vlm import load_processor
    from reward.vlm.loading import ModelLoading

    dtype = load_dtype(policy.dtype, lora=lora.enabled, bf16=bool(args.bf16), deepspeed=uses_deepspeed(args))
    model = load_for_training(policy.path, dtype, ModelLoading(), vision=vision)
    logger.info("policy %s loaded in %s (lora=%s, bf16 training=%s)", policy.path, dtype, lora.enabled, args.bf16)
    if vision:
        from training.shared.trainable import freeze_vision

        if policy.freeze_vision:
            freeze_vision(model, vision=True, aligner=True)
        return model, load_processor(policy.path)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy.path)
    if tokenizer.chat_template is None:
        raise UserError(f"{policy.path}: the tokenizer has no chat template; GRPO prompts are chat turns")
    return model, tokenizer
