"""Where PACE's model calls go: the local transformers VLM, or an OpenAI-compatible server (reward.vlm.server).

Two capabilities: ``option_logprobs`` (Track 1 and 2: log-probabilities of the option letters at the answer
position) and ``chat`` (the agents: free text, deterministic by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from PIL import Image

from reward.core.config import BATCH
from reward.vlm import VLM, OptionLogProbs, OptionQuery, load_vlm
from reward.vlm.loading import LOADING_KEYS, ModelLoading

if TYPE_CHECKING:
    from reward.vlm.server import ServerConfig


@dataclass
class ModelConfig:
    path: str = field(metadata={"help": "VLM checkpoint directory (Qwen2-VL, Qwen2.5-VL, Qwen3-VL ...)"})
    dtype: str = field(default="auto", metadata={"help": "auto: bf16 on GPU, fp32 on CPU"})
    device: str | None = field(default=None, metadata={"help": "null: cuda if available"})
    batch_size: int = field(
        default=32, metadata={"help": "(image group, probe) queries per forward pass", "range": BATCH}
    )
    device_map: Any = field(
        default=None,
        metadata={"help": "auto: spread a model too large for one GPU over all GPUs (reward.vlm.loading)"},
    )
    attn_implementation: str | None = field(default="sdpa", metadata={"help": "sdpa | flash_attention_2 | eager"})
    min_pixels: int | None = field(
        default=None, metadata={"help": "processor pixel budget per image (null: the checkpoint's)"}
    )
    max_pixels: int | None = field(
        default=802_816, metadata={"help": "1024 visual tokens per image (and per crop): the main cost knob"}
    )


ProbeResult = OptionLogProbs  # PACE's name for option log-probs with the missing top-k mass


class Backend(Protocol):
    def option_logprobs(
        self, images: Sequence[Sequence[Image.Image]], queries: Sequence[OptionQuery], *, system: str | None = None
    ) -> ProbeResult:
        """Every query asked about every image group, in as few forward passes as the backend allows."""
        ...

    def chat(
        self,
        prompts: Sequence[str],
        images: Sequence[Sequence[Image.Image]],
        *,
        system: str | None = None,
        max_new_tokens: int = 512,
    ) -> list[str]:
        """One deterministic answer per (prompt, image group)."""
        ...


def load_local_vlm(cfg: ModelConfig) -> VLM:
    """The one place PACE loads a local VLM from its config (loading knobs are wired here)."""
    loading = ModelLoading(**{k: getattr(cfg, k) for k in LOADING_KEYS})
    return load_vlm(cfg.path, loading, batch_size=cfg.batch_size)


class LocalBackend:
    """The transformers VLM: all queries about one image group share its encoded image prefix."""

    def __init__(self, vlm: VLM) -> None:
        self.vlm = vlm

    def option_logprobs(
        self, images: Sequence[Sequence[Image.Image]], queries: Sequence[OptionQuery], *, system: str | None = None
    ) -> ProbeResult:
        out = self.vlm.option_logprobs(images, list(queries), system=system)
        return out

    def check(self, queries: Sequence[OptionQuery], *, system: str | None = None) -> None:
        """Fail before any scoring when an option letter is not one token for this tokenizer."""
        for q in queries:
            self.vlm.candidate_ids(q, system)

    def anchored_logprobs(
        self,
        anchors: Sequence[Image.Image],
        targets: Sequence[Image.Image],
        query: OptionQuery,
        *,
        system: str | None = None,
    ) -> ProbeResult:
        """``query`` about each [*anchors, target] group; the anchors are encoded once (pace_judge.anchored)."""
        from pace_judge.anchored import anchored_logprobs, supports_anchor_prefix

        if supports_anchor_prefix(self.vlm) and len(targets) > 1:
            return anchored_logprobs(self.vlm, anchors, targets, query, system=system)
        return self.option_logprobs([[*anchors, t] for t in targets], [query], system=system)

    def chat(
        self,
        prompts: Sequence[str],
        images: Sequence[Sequence[Image.Image]],
        *,
        system: str | None = None,
        max_new_tokens: int = 512,
    ) -> list[str]:
        return self.vlm.generate(images, prompts, system=system, max_new_tokens=max_new_tokens, do_sample=False)


def make_backend(kind: str, model: ModelConfig | None, server: ServerConfig | dict[str, Any] | None = None) -> Backend:
    """``local`` (needs ``model``) or ``openai`` (an OpenAI-compatible server such as vLLM; needs ``server``)."""
    if kind == "local":
        if model is None:
            raise ValueError("backend=local needs a model: pass model=PATH (a VLM checkpoint directory)")
        return LocalBackend(load_local_vlm(model))
    if kind == "openai":
        from reward.vlm.server import served_vlm

        return served_vlm(server or {})
    raise ValueError(f"unknown backend {kind!r}; choose local (transformers) or openai (an OpenAI-compatible server)")
