"""Vision-language models: load a checkpoint, read answer-token log-probabilities, generate text.

``VLM.option_logprobs`` is the primitive every scorer uses (ARCHITECTURE.md, "One primitive underneath"): the
log-probabilities of named candidate tokens at the answer position, one forward pass per batch, the image prefix
encoded once for every question about the same images (``reuse_prefix=True``).
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

from reward.vlm import IMAGE
from reward.vlm.answer_head import fp32_answer_head, gather_candidates
from reward.vlm.inputs import (
    ImagePreparer,
    PreparedImages,
    device_preprocessing,
    encode,
    fast_image_processor,
    to_device,
)
from reward.vlm.prefix import suffix_logits
from reward.vlm.tokens import default_separator, resolve_candidates
from reward.vlm.vision_attention import batched_vision_attention

logger = logging.getLogger(__name__)

ImageGroup = Sequence[Image.Image]
WINDOW_BATCHES = 8  # image groups prepared (and ordered by visual token count) this many batches at a time


def content_parts(n_images: int, question: str) -> list[dict[str, Any]]:
    r"""The user turn's content parts: the images where ``question`` places them with :data:`IMAGE` (one marker per
    image, e.g. Q-Bench+'s "The first image: <image>"), else every image first and then the text.

    >>> [p.get("text", "<img>") for p in content_parts(2, "Brighter?\nThe first image: <image>\nThe second: <image>")]
    ['Brighter?\nThe first image: ', '<img>', '\nThe second: ', '<img>']
    >>> [p.get("text", "<img>") for p in content_parts(1, "Rate it.")]
    ['<img>', 'Rate it.']
    """
    markers = question.count(IMAGE)
    if not markers:
        return [*({"type": "image"} for _ in range(n_images)), {"type": "text", "text": question}]
    if markers != n_images:
        raise ValueError(f"the question places {markers} image(s) with {IMAGE!r} but {n_images} are given")
    parts: list[dict[str, Any]] = []
    for i, chunk in enumerate(question.split(IMAGE)):
        if chunk:
            parts.append({"type": "text", "text": chunk})
        if i < n_images:
            parts.append({"type": "image"})
    return parts


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
    """``logprobs[b, q, k]``: log p(option k | images b, query q) over the full vocabulary, float32 (``-inf``:
    padding). ``vocab``: the whole log-distribution [B, Q, V] when asked for; ``missing_mass``: the most option
    probability a server's top-k list could have left out (0 in process); ``failed``: no usable answer (NaN rows,
    scored as failed, never as a number)."""

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
        try:  # the torchvision twin of the image processor, same settings (None: none); optional
            self._fast: Any = fast_image_processor(processor.image_processor)
        except Exception as err:  # noqa: BLE001 - the processor itself always works
            logger.warning("no fast image processor (%s); the PIL one runs on the host", err)
            self._fast = None
        self._device_failed = False  # the image processor failed on the device once: the host one from then on
        merged = processor._merge_kwargs(tokenizer_init_kwargs=self.tokenizer.init_kwargs)
        self._image_settings = merged["images_kwargs"]  # what processor(images=...) passes its image processor
        template = getattr(processor, "chat_template", None) or getattr(self.tokenizer, "chat_template", None) or ""
        # thinking templates (Qwen3-VL): switched off so that the answer position is the rating word
        self._template_kwargs = {"enable_thinking": False} if "enable_thinking" in str(template) else {}
        self._render_cached = functools.lru_cache(maxsize=4096)(self.render)  # same prompts recur every batch

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- prompts ---------------------------------------------------------------------------------------
    def render(self, n_images: int, question: str, response_prefix: str = "", system: str | None = None) -> str:
        """The full chat text: optional system turn, user turn with ``n_images`` images and ``question`` (images
        first, or where the question places them with :data:`IMAGE`), assistant turn start, ``response_prefix``."""
        content = content_parts(n_images, question)
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": [{"type": "text", "text": system}]})
        messages.append({"role": "user", "content": content})
        text = self.processor.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **self._template_kwargs
        )
        return text + response_prefix

    def candidate_ids(self, query: OptionQuery, system: str | None = None) -> list[int]:
        question = query.question.replace(IMAGE, "")  # the text around the answer position, without images
        context = self._render_cached(0, question, query.response_prefix, system)
        return resolve_candidates(self.tokenizer, context, query.options, query.separator)

    # -- option log-probabilities ----------------------------------------------------------------------
    @torch.inference_mode()
    def option_logprobs(
        self,
        images: Sequence[ImageGroup | PreparedImages],
        queries: Sequence[OptionQuery] | Sequence[Sequence[OptionQuery]],
        *,
        system: str | None = None,
        reuse_prefix: bool = True,
        return_vocab: bool = False,
    ) -> OptionLogProbs:
        """Log-probabilities of each query's options for each image group (PIL images, or :meth:`image_preparer`'s
        ``PreparedImages``), one forward pass per batch. ``queries``: one list for every group, or one per group (same
        length); ``reuse_prefix``: each group's images encoded once for all its queries."""
        if not queries:
            raise ValueError("option_logprobs: no queries given")
        shared = isinstance(queries[0], OptionQuery)
        per_group = [list(queries) if shared else list(qs) for qs in (images if shared else queries)]  # type: ignore
        if len(per_group) != len(images) or len({len(q) for q in per_group}) > 1:
            raise ValueError(
                "option_logprobs: pass one query list for all image groups, or one per group (same length)"
            )
        if not per_group:  # no image: no row, each query's options still resolved (the shape says how many)
            flat = list(queries) if shared else []
            k = max((len(self.candidate_ids(q, system)) for q in flat), default=0)  # type: ignore[arg-type]
            return OptionLogProbs(torch.empty(0, len(flat), k))
        n_q = len(per_group[0])
        resolved = {q: self.candidate_ids(q, system) for q in dict.fromkeys(q for qs in per_group for q in qs)}
        ids = [[resolved[q] for q in qs] for qs in per_group]  # each distinct query resolved once per call
        k_max = max((len(i) for row in ids for i in row), default=0)
        out = torch.full((len(images), n_q, k_max), -math.inf)
        vocab_out: list[torch.Tensor | None] = [None] * len(images)
        reuse_prefix = reuse_prefix and n_q > 1 and all(_n_images(g) > 0 for g in images)
        groups_per_batch = max(1, self.batch_size // max(n_q, 1))
        window = groups_per_batch * WINDOW_BATCHES
        for w_start in range(0, len(images), window):  # images prepared a window at a time: bounded memory
            members = list(range(w_start, min(len(images), w_start + window)))
            prepared = dict(zip(members, self._prepare([images[g] for g in members]), strict=True))
            members = self._batch_order(members, prepared)
            for b_start in range(0, len(members), groups_per_batch):
                chunk = members[b_start : b_start + groups_per_batch]
                texts = [
                    [
                        self._render_cached(_n_images(images[g]), q.question, q.response_prefix, system)
                        for q in per_group[g]
                    ]
                    for g in chunk
                ]
                logp = self._chunk_logprobs([prepared[g] for g in chunk], texts, reuse_prefix)
                picked = gather_candidates(logp, [ids[g] for g in chunk], k_max).view(len(chunk), n_q, k_max)
                out[torch.tensor(chunk)] = picked
                if return_vocab:
                    for g, v in zip(chunk, logp.view(len(chunk), n_q, -1).cpu(), strict=True):
                        vocab_out[g] = v
        options = [[q.options for q in qs] for qs in per_group]
        vocab = torch.stack(vocab_out) if return_vocab and vocab_out else None  # type: ignore[arg-type]
        return OptionLogProbs(out, options, vocab)

    def _batch_order(self, members: list[int], prepared: dict[int, PreparedImages]) -> list[int]:
        """The image groups of a window in batch order: similar visual token counts together (less padding)."""
        return sorted(members, key=lambda g: prepared[g].size)

    def image_preparer(self) -> ImagePreparer | None:
        """The image processor as a picklable callable for DataLoader workers (group -> ``PreparedImages``), or
        ``None`` when it runs on the GPU instead (then pass the PIL images)."""
        return None if self._device_preprocessing() else self._preparer()

    def _preparer(self, device: torch.device | None = None) -> ImagePreparer:
        """The image processor (the fast one on ``device`` if given) with the settings the processor gives it."""
        visual = getattr(getattr(self.model, "model", None), "visual", None)
        dtype = getattr(visual, "dtype", None)  # the vision tower's (the model's where it has none)
        dtype = dtype if isinstance(dtype, torch.dtype) else next(self.model.parameters()).dtype
        image_processor = self._fast if device else self.processor.image_processor
        return ImagePreparer(image_processor, dtype, device, self._image_settings)

    def _prepare(self, groups: Sequence[ImageGroup | PreparedImages]) -> list[PreparedImages]:
        """Every group as ``PreparedImages``: the PIL ones through the image processor (on the GPU where it can run
        there, else on the host, one call per group)."""
        todo = [i for i, g in enumerate(groups) if not isinstance(g, PreparedImages)]
        result: list[Any] = list(groups)
        pil = [list(groups[i]) for i in todo]
        prepared = None
        if todo and self._device_preprocessing():
            try:
                prepared = self._preparer(self.device).many(pil)
            except Exception as err:  # noqa: BLE001 - an optional accelerator path: the host one always works
                logger.warning(
                    "the image processor on %s failed (%s); it runs on the host from now on", self.device, err
                )
                self._device_failed = True
        for i, p in zip(todo, prepared or (self._preparer().many(pil) if todo else []), strict=True):
            result[i] = p
        return result

    def _chunk_logprobs(
        self, groups: list[PreparedImages], texts: list[list[str]], reuse_prefix: bool
    ) -> torch.Tensor:
        """[rows, V] fp32 log-probs on the device for one batch of groups (rows group-major): the shared image
        prefix encoded once (:mod:`reward.vlm.prefix`), or each (group, query) as one full sequence."""
        pin = self.device.type == "cuda"  # batches built in pinned memory, copied without blocking
        with fp32_answer_head(self.model), batched_vision_attention(self.model):
            if reuse_prefix:
                logits = suffix_logits(self.model, self.processor, groups, texts, pin)
            else:
                flat = [g for g, row in zip(groups, texts, strict=True) for _ in row]
                inputs = encode(self.processor, [t for row in texts for t in row], flat, pin=pin)
                inputs = to_device(inputs, self.device)
                logits = self.model(**inputs, use_cache=False, logits_to_keep=1).logits[:, -1]
        return torch.log_softmax(logits.float(), dim=-1)

    def _device_preprocessing(self) -> bool:
        """Whether the image processor runs on the model's GPU (torchvision there, and it has not failed)."""
        if self._device_failed:
            return False
        return device_preprocessing(self._fast or self.processor.image_processor, self.device) is None

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
        top_k: int | None = None,
        seed: int | None = None,
    ) -> list[str]:
        """Free-text answers, one per (image group, prompt) pair; batched with left padding (``top_k``: sampling from
        the k likeliest tokens; ``None``: the checkpoint's generation config, else transformers' 50)."""
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
                gen_kwargs.update({"top_k": top_k} if top_k is not None else {})
            out = self.model.generate(**inputs, **gen_kwargs, pad_token_id=self.tokenizer.pad_token_id)
            new = out[:, inputs["input_ids"].shape[1] :]
            answers.extend(self.tokenizer.batch_decode(new, skip_special_tokens=True))
        return answers


def _n_images(group: ImageGroup | PreparedImages) -> int:
    return group.n_images if isinstance(group, PreparedImages) else len(group)
