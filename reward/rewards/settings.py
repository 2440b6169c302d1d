"""The settings of this package's rewards whose modules import torch (the ``reward`` config group's options:
``reward=qbench``, ``sa-iqa``, ``chat-judge``), apart from the rewards themselves so that a command checks them before
torch loads. Each reward's module imports its settings from here (``reward.rewards.sa_iqa.SaIqaConfig`` is this one);
``reasoning-iqa``'s module imports no torch, and holds its own (``ReasoningIqaConfig``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from reward.core.config import BATCH
from reward.rewards.levels import EXPERT_DEFINITIONS
from reward.vlm.loading import BACKENDS, ModelLoading, ServerConfig


@dataclass
class QBenchConfig(ModelLoading):
    """Settings of ``reward=qbench`` (the loading knobs dtype, device, device_map, attn_implementation, min_pixels
    and max_pixels come from :class:`reward.vlm.ModelLoading`)."""

    name: str = "qbench"
    model: str | None = field(
        default=None,
        metadata={"help": "checkpoint directory of the VLM (backend=openai: only its tokenizer is read, if given)"},
    )
    prompt: str = field(default="Rate the quality of the image.", metadata={"help": "user question"})
    response_prefix: str = field(
        default="The quality of the image is", metadata={"help": "the answer word follows it"}
    )
    positive: tuple[str, ...] = field(
        default=("good",), metadata={"help": "positive word(s); with ensemble, the synonym set P"}
    )
    negative: tuple[str, ...] = field(
        default=("poor",), metadata={"help": "negative word(s); with ensemble, the synonym set N"}
    )
    ensemble: bool = field(
        default=False,
        metadata={"help": "use Q-Bench+'s synonym sets (good/high/fine vs poor/low/bad) unless words given"},
    )
    temperature: float = field(default=1.0, metadata={"help": "softmax temperature T", "range": (0, None, True)})
    system: str | None = field(default=None, metadata={"help": "optional system prompt"})
    batch_size: int = field(default=16, metadata={"help": "images per forward pass", "range": BATCH})
    backend: str = field(
        default="local",
        metadata={
            "help": "local: the model in this process; openai: OpenAI-compatible servers (server.*)",
            "choices": BACKENDS,
        },
    )
    server: ServerConfig = field(
        default_factory=ServerConfig, metadata={"help": "backend=openai: base_urls, model, retries, ..."}
    )


@dataclass
class SaIqaConfig(ModelLoading):
    """Settings of ``reward=sa-iqa`` (loading knobs from :class:`reward.vlm.ModelLoading`)."""

    name: str = "sa-iqa"
    model: str = field(
        default=MISSING,
        metadata={
            "help": (
                "scorer folder written by training/sft.py (model or adapter, processor, sa_iqa.json), or "
                "its Hub repo id ORG/NAME (resolved through the Hugging Face cache, offline too)"
            )
        },
    )
    fusion: str | None = field(
        default=None, metadata={"help": "fusion weights JSON; default: fusion_weights.json in the scorer directory"}
    )
    dimensions: list[str] | None = field(
        default=None, metadata={"help": "score only these dimensions (default: all of the scorer's)"}
    )
    batch_size: int = field(
        default=32, metadata={"help": "(image, dimension) queries per forward pass", "range": BATCH}
    )
    reuse_prefix: bool = field(default=True, metadata={"help": "encode each image once for all its dimensions"})
    backend: str = field(
        default="local",
        metadata={
            "help": "local: the model in this process; openai: servers of this scorer (server.*)",
            "choices": BACKENDS,
        },
    )
    server: ServerConfig = field(
        default_factory=ServerConfig, metadata={"help": "backend=openai: base_urls, model, retries, ..."}
    )


@dataclass
class ChatJudgeConfig:
    """Settings of ``reward=chat-judge``."""

    name: str = "chat-judge"
    dimensions: list[str] = field(
        default_factory=lambda: list(EXPERT_DEFINITIONS), metadata={"help": "the dimensions asked, each its prompt"}
    )
    prompts: dict[str, str] = field(
        default_factory=dict,
        metadata={"help": 'dimension -> prompt asking for {"score": N}; default: App. B.2 for its four dimensions'},
    )
    max_tokens: int = field(default=64, metadata={"help": "answer tokens at most", "range": (1, 1_000_000)})
    server: ServerConfig = field(
        default_factory=ServerConfig, metadata={"help": "base_urls, model, api_key_env, timeout, max_retries, ..."}
    )
