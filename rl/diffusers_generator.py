"""The diffusers inpainting generators (``sd15-inpaint``, ``sdxl-inpaint``, ``flux-fill``; see :mod:`rl.generators`):
the candidates of several items in one pipeline call."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING
from PIL import Image

from reward.core.config import BATCH, SIDE, TOKENS, parse
from reward.vlm.loading import resolve_dtype
from rl.devices import process_device
from rl.generators import MASK_MISMATCH, Seeds, prepare_call

PIPELINES = {  # generator name -> diffusers pipeline class
    "sd15-inpaint": "StableDiffusionInpaintPipeline",
    "sdxl-inpaint": "StableDiffusionXLInpaintPipeline",
    "flux-fill": "FluxFillPipeline",
}


@dataclass
class DiffusersConfig:
    name: str = field(default=MISSING, metadata={"help": "sd15-inpaint | sdxl-inpaint | flux-fill"})
    path: str = field(default=MISSING, metadata={"help": "pipeline directory (from_pretrained)"})
    device: str | None = field(
        default=None,
        metadata={"help": "null: this process's own GPU (cpu without one); cuda:N; 'cuda:{local_rank+4}'; a list"},
    )
    dtype: str = field(
        default="auto",
        metadata={"help": "auto: bf16 on a GPU that supports it, fp32 elsewhere; or float32 / float16 / bfloat16"},
    )
    steps: int = field(default=30, metadata={"help": "num_inference_steps", "range": (1, 10_000)})
    guidance: float = field(default=7.5, metadata={"help": "guidance_scale", "range": (0, None)})
    strength: float = field(
        default=1.0, metadata={"help": "1.0: the masked region is painted from noise", "range": (0, 1, True)}
    )
    negative_prompt: str | None = field(default=None, metadata={"help": "SD1.5/SDXL only"})
    batch_size: int = field(
        default=4, metadata={"help": "items per pipeline call (each with n candidates)", "range": BATCH}
    )
    size_multiple: int = field(
        default=8,
        metadata={
            "help": "the pipeline works at the image size rounded down to this (16 for FLUX)",
            "range": (1, 1024),
        },
    )
    max_size: int = field(
        default=1024,
        metadata={
            "help": "longer sides are scaled down to this for the pipeline, the output scaled back",
            "range": SIDE,
        },
    )
    paste_back: bool = field(
        default=True, metadata={"help": "keep the original pixels outside the mask (the VAE round trip alters them)"}
    )
    max_prompt_tokens: int | None = field(
        default=None,
        metadata={"help": "null: the text encoder's limit (CLIP 77; FLUX: max_sequence_length)", "range": TOKENS},
    )
    max_sequence_length: int = field(
        default=512,
        metadata={
            "help": "FLUX Fill: T5 tokens of the prompt (at most 512; T5 pads to it, cost follows)",
            "range": (1, 512),
        },
    )
    mask_mismatch: str = field(
        default="resize", metadata={"help": "resize (with a warning) or error", "choices": MASK_MISMATCH}
    )
    repeat_items: bool = field(
        default=True, metadata={"help": "one row per candidate (exact reproduction); false: num_images_per_prompt"}
    )


def cut_to_tokens(tokenizer: Any, text: str, budget: int) -> tuple[str, bool]:
    """``text`` cut to its first ``budget`` tokens (special tokens not counted), at the end of the last whole token
    in the original string: the cut text keeps its case and spacing (a CLIP round trip would lower-case it)."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) <= budget:
        return text, False
    try:
        offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        return text[: offsets[budget - 1][1]].rstrip(), True
    except (NotImplementedError, KeyError, TypeError, ValueError):  # a slow tokenizer: whole words
        words = text.split(" ")
        low, high = 0, len(words)
        while low < high:  # the most words whose tokens fit
            mid = (low + high + 1) // 2
            if len(tokenizer(" ".join(words[:mid]), add_special_tokens=False)["input_ids"]) <= budget:
                low = mid
            else:
                high = mid - 1
        return " ".join(words[:low]), True


def work_size(size: tuple[int, int], max_size: int, multiple: int) -> tuple[int, int]:
    """The (width, height) a pipeline works an image of ``size`` at: its longer side scaled down to ``max_size``,
    each side rounded down to ``multiple``.

    >>> work_size((1000, 750), 512, 16)
    (512, 384)
    """
    w, h = size
    scale = min(1.0, max_size / max(w, h))
    return max(multiple, int(w * scale) // multiple * multiple), max(multiple, int(h * scale) // multiple * multiple)


class DiffusersGenerator:
    """A diffusers inpainting pipeline. The candidates of items of the same working size share one call, one row per
    candidate with its own seed (``repeat_items=true``, reproducible one by one), or with ``num_images_per_prompt``
    (``repeat_items=false``)."""

    def __init__(self, cfg: DiffusersConfig | dict[str, Any], pipe: Any = None) -> None:
        import diffusers
        import torch

        self.cfg = cfg = cfg if isinstance(cfg, DiffusersConfig) else parse(DiffusersConfig, cfg, where="generator")
        self.name = cfg.name
        self.device = process_device(cfg.device, where="generator.device")
        if pipe is None:
            cls = getattr(diffusers, PIPELINES[cfg.name])
            kwargs: dict[str, Any] = {"dtype": resolve_dtype(cfg.dtype, torch.device(self.device))}
            if "safety_checker" in inspect.signature(cls.__init__).parameters:
                kwargs.update(safety_checker=None, requires_safety_checker=False)
            pipe = cls.from_pretrained(cfg.path, **kwargs)
        self.pipe = pipe.to(self.device)
        self.pipe.set_progress_bar_config(disable=True)
        self._accepts = set(inspect.signature(self.pipe.__call__).parameters)
        self.t5 = "prompt_2" in self._accepts and "max_sequence_length" in self._accepts  # FLUX: T5 reads prompt_2
        tokenizer = getattr(self.pipe, "tokenizer", None)
        clip = getattr(tokenizer, "model_max_length", 77) if tokenizer is not None else 77
        self.clip_tokens = int(min(clip, 100_000))
        self.max_prompt_tokens = int(
            cfg.max_prompt_tokens or (cfg.max_sequence_length if self.t5 else self.clip_tokens)
        )

    def truncate(self, prompts: Sequence[str]) -> tuple[list[str], list[bool]]:
        """Cut each prompt to what its text encoder reads (special tokens included): T5's ``max_sequence_length``
        for FLUX Fill (its end token counted), CLIP's 77 (begin and end tokens counted) otherwise."""
        tokenizer = getattr(self.pipe, "tokenizer_2" if self.t5 else "tokenizer", None)
        if tokenizer is None:
            return list(prompts), [False] * len(prompts)
        budget = self.max_prompt_tokens - (1 if self.t5 else 2)
        pairs = [cut_to_tokens(tokenizer, p, budget) for p in prompts]
        return [p for p, _ in pairs], [c for _, c in pairs]

    def clip_prompts(self, prompts: Sequence[str]) -> list[str]:
        """FLUX: what CLIP reads (its first 75 tokens; only its pooled vector is used), cut here without a warning."""
        tokenizer = getattr(self.pipe, "tokenizer", None)
        if tokenizer is None:
            return list(prompts)
        return [cut_to_tokens(tokenizer, p, self.clip_tokens - 2)[0] for p in prompts]

    def inpaint(
        self,
        images: Sequence[Image.Image],
        masks: Sequence[Image.Image],
        prompts: Sequence[str],
        n: int = 1,
        seed: Seeds = 0,
    ) -> list[list[Image.Image]]:
        import torch

        images, masks, seeds = prepare_call(images, masks, prompts, n, seed, self.cfg.mask_mismatch)
        out: list[list[Image.Image]] = [[] for _ in images]
        groups: dict[tuple[int, int], list[int]] = {}
        for i, im in enumerate(images):
            groups.setdefault(work_size(im.size, self.cfg.max_size, self.cfg.size_multiple), []).append(i)
        for (w, h), idx in groups.items():
            for start in range(0, len(idx), self.cfg.batch_size):
                chunk = idx[start : start + self.cfg.batch_size]
                gens = [torch.Generator("cpu").manual_seed(seeds[i] + j) for i in chunk for j in range(n)]
                # with num_images_per_prompt the pipelines sample each item's masked-image latents with the
                # generator of the item's *index* (diffusers' _encode_vae_image), not of the candidate, so a
                # candidate drawn alone differs; one row per candidate keeps one generator per candidate throughout
                rows = [i for i in chunk for _ in range(n)] if self.cfg.repeat_items else chunk
                kwargs = {
                    "prompt": [prompts[i] for i in rows],
                    "image": [images[i].resize((w, h), Image.Resampling.BICUBIC) for i in rows],
                    "mask_image": [masks[i].resize((w, h), Image.Resampling.NEAREST) for i in rows],
                    "height": h,
                    "width": w,
                    "num_images_per_prompt": 1 if self.cfg.repeat_items else n,
                    "generator": gens,
                    "num_inference_steps": self.cfg.steps,
                    "guidance_scale": self.cfg.guidance,
                    "strength": self.cfg.strength,
                    "output_type": "pil",
                }
                if self.t5:  # the whole expanded prompt to T5, CLIP's share to CLIP
                    kwargs["prompt_2"] = kwargs["prompt"]
                    kwargs["prompt"] = self.clip_prompts(kwargs["prompt_2"])
                    kwargs["max_sequence_length"] = self.cfg.max_sequence_length
                if self.cfg.negative_prompt is not None and "negative_prompt" in self._accepts:
                    kwargs["negative_prompt"] = [self.cfg.negative_prompt] * len(rows)
                result = self.pipe(**{k: v for k, v in kwargs.items() if k in self._accepts}).images
                for k, i in enumerate(chunk):
                    for j in range(n):
                        im = result[k * n + j].convert("RGB")
                        im = im.resize(images[i].size, Image.Resampling.BICUBIC) if im.size != images[i].size else im
                        if self.cfg.paste_back:  # the original pixels outside the mask (diffusers' own overlay)
                            im = self.pipe.image_processor.apply_overlay(masks[i], images[i], im).convert("RGB")
                        out[i].append(im)
        return out
