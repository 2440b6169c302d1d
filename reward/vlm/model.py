"""Vision-language models: load a checkpoint, read answer-token log-probabilities, generate text.

One primitive serves every scorer of the toolkit (see DESIGN.md): given groups of images and questions about
them, return the log-probabilities of named candidate tokens at the answer position with one forward pass.
When several questions are asked about the same images, the image prefix (system turn, user turn start and
the images) is encoded once and its KV cache is reused for every question (``reuse_prefix=True``).

Example:
    >>> vlm = load_vlm("Qwen/Qwen2.5-VL-7B-Instruct")  # doctest: +SKIP
    >>> q = OptionQuery("Rate the quality of the image.", ("good", "poor"), "The quality of the image is")
    >>> vlm.option_logprobs([[image]], [q]).logprobs.shape  # doctest: +SKIP
    torch.Size([1, 1, 2])
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from PIL import Image

from reward.vlm.answer_head import fp32_answer_head, gather_candidates
from reward.vlm.prefix import PrefixEncoder, split_at_images
from reward.vlm.tokens import default_separator, resolve_candidates

logger = logging.getLogger(__name__)

ImageGroup = Sequence[Image.Image]


@dataclass(frozen=True)
class OptionQuery:
    """One question whose answer is read as a distribution over ``options`` at the answer position.

    ``response_prefix`` is the start of the assistant's reply (e.g. "The quality of the image is"); the option
    words follow it after ``sep`` (default: a space after a word, nothing when the prefix is empty).
    """

    question: str
    options: tuple[str, ...]
    response_prefix: str = ""
    sep: str | None = None

    @property
    def separator(self) -> str:
        return default_separator(self.response_prefix) if self.sep is None else self.sep


@dataclass
class OptionLogProbs:
    """``logprobs[b, q, k]``: log p(option k | images b, query q) over the full vocabulary, float32.

    Queries with fewer options than the widest are padded with ``-inf``. ``vocab`` holds the whole
    log-distribution at the answer position ([B, Q, V]) when asked for. ``missing_mass[b, q]``: the option
    probability a server's top-k list did not report and that was filled in (0 for an in-process model, whose
    log-probabilities are exact). ``failed[b, q]``: no answer could be had (a server that failed after its retries);
    those rows of ``logprobs`` are NaN, and a reward scores them as failed (``None``), never as a number.
    """

    logprobs: torch.Tensor
    options: list[list[tuple[str, ...]]] = field(default_factory=list)
    vocab: torch.Tensor | None = None
    missing_mass: torch.Tensor | None = None
    failed: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.missing_mass is None:
            self.missing_mass = torch.zeros(self.logprobs.shape[:2])
        if self.failed is None:
            self.failed = torch.zeros(self.logprobs.shape[:2], dtype=torch.bool)


class VLM:
    """A loaded vision-language model with its processor; see the module docstring."""

    def __init__(self, model: Any, processor: Any, *, batch_size: int = 16) -> None:
        self.model = model
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.batch_size = batch_size
        self.prefix = PrefixEncoder(model, processor)
        template = getattr(processor, "chat_template", None) or getattr(self.tokenizer, "chat_template", None) or ""
        # thinking templates (Qwen3-VL): switched off so that the answer position is the rating word
        self._template_kwargs = {"enable_thinking": False} if "enable_thinking" in str(template) else {}
        self._render_cached = functools.lru_cache(maxsize=4096)(self.render)  # same prompts recur every batch

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- prompts ---------------------------------------------------------------------------------------
    def render(self, n_images: int, question: str, response_prefix: str = "", system: str | None = None) -> str:
        """The full chat text: optional system turn, user turn with ``n_images`` images then ``question``,
        assistant turn start, then ``response_prefix``."""
        content: list[dict[str, str]] = [{"type": "image"} for _ in range(n_images)]
        content.append({"type": "text", "text": question})
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": [{"type": "text", "text": system}]})
        messages.append({"role": "user", "content": content})
        text = self.processor.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **self._template_kwargs
        )
        return text + response_prefix

    def candidate_ids(self, query: OptionQuery, system: str | None = None) -> list[int]:
        context = self._render_cached(0, query.question, query.response_prefix, system)
        return resolve_candidates(self.tokenizer, context, query.options, query.separator)

    # -- option log-probabilities ----------------------------------------------------------------------
    @torch.inference_mode()
    def option_logprobs(
        self,
        images: Sequence[ImageGroup],
        queries: Sequence[OptionQuery] | Sequence[Sequence[OptionQuery]],
        *,
        system: str | None = None,
        reuse_prefix: bool = True,
        return_vocab: bool = False,
    ) -> OptionLogProbs:
        """Log-probabilities of each query's options for each image group, one forward pass per batch.

        ``queries`` is either one list asked about every group, or one list per group (same length for all).
        With ``reuse_prefix`` the images are encoded once per group and their KV cache serves all queries (used
        when there are several queries and every group has images; otherwise the plain path is as fast).
        """
        per_group = _per_group_queries(images, queries)
        n_q = len(per_group[0]) if per_group else 0
        resolved = {q: self.candidate_ids(q, system) for q in dict.fromkeys(q for qs in per_group for q in qs)}
        ids = [[resolved[q] for q in qs] for qs in per_group]  # each distinct query resolved once per call
        k_max = max((len(i) for row in ids for i in row), default=0)
        out = torch.full((len(images), n_q, k_max), -math.inf)
        vocab_out: list[torch.Tensor] = []
        reuse_prefix = reuse_prefix and n_q > 1 and all(len(g) > 0 for g in images)
        groups_per_batch = max(1, self.batch_size // max(n_q, 1))
        for start in range(0, len(images), groups_per_batch):
            chunk = range(start, min(len(images), start + groups_per_batch))
            texts = [
                [self._render_cached(len(images[g]), q.question, q.response_prefix, system) for q in per_group[g]]
                for g in chunk
            ]
            imgs = [list(images[g]) for g in chunk]
            with fp32_answer_head(self.model):
                if reuse_prefix:
                    logp = self._logprobs_shared_prefix(imgs, texts)
                else:
                    logp = self._logprobs_plain(imgs, texts)
            out[start : start + len(chunk)] = gather_candidates(logp, [ids[g] for g in chunk], k_max).view(
                len(chunk), n_q, k_max
            )
            if return_vocab:
                vocab_out.append(logp.view(len(chunk), n_q, -1).cpu())
        options = [[q.options for q in qs] for qs in per_group]
        vocab = torch.cat(vocab_out) if return_vocab and vocab_out else None
        return OptionLogProbs(out, options, vocab)

    def _logprobs_plain(self, images: list[list[Image.Image]], texts: list[list[str]]) -> torch.Tensor:
        """Each (group, query) as one full sequence; rows are group-major. Returns [R, V] fp32 log-probs (device)."""
        flat_texts = [t for row in texts for t in row]
        flat_images = [img for g, row in zip(images, texts, strict=True) for _ in row for img in g]
        inputs = self.processor(text=flat_texts, images=flat_images or None, padding=True, return_tensors="pt").to(
            self.device
        )
        logits = self.model(**inputs, use_cache=False, logits_to_keep=1).logits[:, -1]
        return torch.log_softmax(logits.float(), dim=-1)

    def _logprobs_shared_prefix(self, images: list[list[Image.Image]], texts: list[list[str]]) -> torch.Tensor:
        prefixes, suffixes = [], []
        for row in texts:
            parts = [split_at_images(t, self.prefix.vision_end) for t in row]
            prefixes.append(parts[0][0])
            suffixes.append([s for _, s in parts])
            if any(p != parts[0][0] for p, _ in parts):
                raise ValueError("queries about one image group must share the text before the images")
        logits = self.prefix.suffix_logits(prefixes, images, suffixes)
        return torch.log_softmax(logits.float(), dim=-1)

    # -- generation ------------------------------------------------------------------------------------
    @torch.inference_mode()
    def generate(
        self,
        images: Sequence[ImageGroup],
        prompts: Sequence[str],
        *,
        system: str | None = None,
        max_new_tokens: int = 256,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> list[str]:
        """Free-text answers, one per (image group, prompt) pair; batched with left padding."""
        if len(images) != len(prompts):
            raise ValueError(f"generate: {len(images)} image groups but {len(prompts)} prompts; pass one of each")
        if seed is not None:
            torch.manual_seed(seed)
        answers: list[str] = []
        for start in range(0, len(prompts), self.batch_size):
            groups = [list(g) for g in images[start : start + self.batch_size]]
            texts = [self.render(len(g), p, "", system) for g, p in zip(groups, prompts[start:], strict=False)]
            flat = [img for g in groups for img in g]
            inputs = self.processor(text=texts, images=flat or None, padding=True, return_tensors="pt").to(self.device)
            gen_kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": do_sample}
            if do_sample:
                gen_kwargs.update(temperature=temperature, top_p=top_p)
            out = self.model.generate(**inputs, **gen_kwargs, pad_token_id=self.tokenizer.pad_token_id)
            new = out[:, inputs["input_ids"].shape[1] :]
            answers.extend(self.tokenizer.batch_decode(new, skip_special_tokens=True))
        return answers


def _per_group_queries(
    images: Sequence[ImageGroup], queries: Sequence[OptionQuery] | Sequence[Sequence[OptionQuery]]
) -> list[list[OptionQuery]]:
    if not queries:
        raise ValueError("option_logprobs: no queries given")
    if isinstance(queries[0], OptionQuery):
        shared = list(queries)  # type: ignore[arg-type]
        return [shared for _ in images]
    per = [list(q) for q in queries]  # type: ignore[arg-type]
    if len(per) != len(images):
        raise ValueError(f"option_logprobs: {len(images)} image groups but {len(per)} query lists; pass one per group")
    if len({len(q) for q in per}) > 1:
        raise ValueError("option_logprobs: every image group needs the same number of queries")
    return per
