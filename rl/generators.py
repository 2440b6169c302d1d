"""Inpainting generators behind one interface: ``inpaint(images, masks, prompts, n, seed) -> list[list[Image]]``.

- ``procedural``: a procedural interior whose quality levels follow the prompt's words (:mod:`rl.prompt_levels`), so
  prompt choices change quality in a known way on CPU;
- ``sd15-inpaint``, ``sdxl-inpaint``, ``flux-fill``: diffusers pipelines, the candidates of several items in one call.

Prompts are cut at a token boundary of the user's own text to what the text encoder reads (:func:`text_budget`, which
GRPO's ``max_completion_length`` follows): CLIP's 77 tokens; FLUX Fill's T5 ``max_sequence_length`` (CLIP, only a
pooled vector there, reads the first 77).

Candidate ``j`` of item ``i`` is drawn with seed ``seeds[i] + j`` (``seed`` is one int or one per item), so any
candidate is reproduced by ``inpaint([image], [mask], [prompt], n=1, seed=seeds[i] + j)``.

Example:
    >>> from PIL import Image
    >>> gen = build_generator({"name": "procedural"})
    >>> out = gen.inpaint([Image.new("RGB", (32, 32))], [Image.new("L", (32, 32), 255)], ["a bright room"], n=2)
    >>> len(out[0]), out[0][0].size
    (2, (32, 32))
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from omegaconf import MISSING
from PIL import Image

from reward.core.config import BATCH, FRACTION, SIDE, TOKENS, parse, to_plain
from reward.core.errors import ConfigError
from reward.core.registry import Registry
from reward.vlm.loading import resolve_dtype
from rl.devices import process_device
from rl.prompt_levels import levels_from_prompt

logger = logging.getLogger(__name__)

Seeds = int | Sequence[int]
MASK_MISMATCH = ("resize", "error")

if TYPE_CHECKING:

    class Generator(Protocol):
        """An inpainting model: ``n`` candidates per (image, mask, prompt), each reproducible from its seed."""

        name: str
        max_prompt_tokens: int

        def inpaint(
            self,
            images: Sequence[Image.Image],
            masks: Sequence[Image.Image],
            prompts: Sequence[str],
            n: int = 1,
            seed: Seeds = 0,
        ) -> list[list[Image.Image]]: ...

        def truncate(self, prompts: Sequence[str]) -> tuple[list[str], list[bool]]: ...


def item_seeds(seed: Seeds, n_items: int) -> list[int]:
    """One base seed per item: an int is shared by every item; a sequence must have one per item."""
    if isinstance(seed, int | np.integer):
        return [int(seed)] * n_items
    seeds = [int(s) for s in seed]
    if len(seeds) != n_items:
        raise ValueError(f"got {len(seeds)} seeds for {n_items} items; pass one int or one seed per item")
    return seeds


def prepare_call(
    images: Sequence[Image.Image],
    masks: Sequence[Image.Image],
    prompts: Sequence[str],
    n: int,
    seed: Seeds,
    on_mismatch: str,
) -> tuple[list[Image.Image], list[Image.Image], list[int]]:
    """Checked inputs of one ``inpaint`` call: RGB images, binary ``L`` masks (255 = repaint) of their image's size
    (another size resized with a warning, or refused with ``on_mismatch="error"``), one base seed per item."""
    if not len(images) == len(masks) == len(prompts):
        raise ValueError(f"got {len(images)} images, {len(masks)} masks and {len(prompts)} prompts; give one of each")
    if n < 1:
        raise ValueError(f"n must be >= 1 candidates per item, got {n}")
    out = []
    for i, (image, mask) in enumerate(zip(images, masks, strict=True)):
        mask = mask.convert("L")
        if mask.size != image.size:
            if on_mismatch == "error":
                raise ValueError(
                    f"item {i}: mask is {mask.size} but image is {image.size}; resize the mask, or set "
                    "generator.mask_mismatch=resize to resize it automatically"
                )
            warnings.warn(f"item {i}: mask {mask.size} resized to its image's size {image.size}", stacklevel=3)
            mask = mask.resize(image.size, Image.Resampling.NEAREST)
        out.append(mask.point(lambda v: 255 if v >= 128 else 0))
    return [im.convert("RGB") for im in images], out, item_seeds(seed, len(images))


# ---------------------------------------------------------------------------------------------- procedural


@dataclass
class ProceduralConfig:
    name: str = "procedural"
    render_size: int = field(
        default=256,
        metadata={
            "help": "the scene is rendered at most this many pixels a side, then resized to the image",
            "range": SIDE,
        },
    )
    max_prompt_tokens: int = field(
        default=77,
        metadata={"help": "words; longer prompts are truncated (and counted by the callers)", "range": TOKENS},
    )
    mask_mismatch: str = field(default="resize", metadata={"help": "resize (with a warning) or error"})
    level_jitter: float = field(
        default=0.25,
        metadata={
            "help": "per candidate and dimension: chance the level moves one step up or down",
            "range": FRACTION,
        },
    )
    jitter_by_prompt: bool = field(
        default=False,
        metadata={
            "help": (
                "true: the draws also depend on the prompt, so candidate j of different tasks moves "
                "independently (Best-of-N over many tasks); false: candidate j moves alike in every task"
            )
        },
    )

    def __post_init__(self) -> None:
        if self.mask_mismatch not in MASK_MISMATCH:
            raise ConfigError(f"generator.mask_mismatch={self.mask_mismatch!r}: use resize or error")


def candidate_levels(
    prompt: str, seed: int, level_jitter: float, by_prompt: bool = False
) -> tuple[Any, dict[str, int]]:
    """The scene and the true quality levels of the ``procedural`` candidate drawn with ``seed`` for ``prompt``
    (the prompt's levels, each moved +-1 with chance ``level_jitter``, as a diffusion model's candidates vary): what
    the generator paints, so a run can be judged by its known truth. ``by_prompt``: the generator's
    ``jitter_by_prompt``."""
    import zlib

    from training.procedural.scenes import sample_scene

    rng = np.random.default_rng([seed, zlib.crc32(prompt.encode("utf-8"))] if by_prompt else seed)
    spec = sample_scene(rng)
    levels = {}
    for dim, level in levels_from_prompt(prompt).items():
        move = int(rng.choice((-1, 1))) if rng.random() < level_jitter else 0
        levels[dim] = min(5, max(1, level + move))
    return spec, levels


class ProceduralGenerator:
    """Paints the masked region of any image with a procedural scene at the prompt's quality levels."""

    def __init__(self, cfg: ProceduralConfig | dict[str, Any]) -> None:
        self.cfg = cfg = cfg if isinstance(cfg, ProceduralConfig) else parse(ProceduralConfig, cfg, where="generator")
        self.name = cfg.name
        self.max_prompt_tokens = cfg.max_prompt_tokens

    def truncate(self, prompts: Sequence[str]) -> tuple[list[str], list[bool]]:
        out, cut = [], []
        for p in prompts:
            words = p.split()
            cut.append(len(words) > self.max_prompt_tokens)
            out.append(" ".join(words[: self.max_prompt_tokens]) if cut[-1] else p)
        return out, cut

    def inpaint(
        self,
        images: Sequence[Image.Image],
        masks: Sequence[Image.Image],
        prompts: Sequence[str],
        n: int = 1,
        seed: Seeds = 0,
    ) -> list[list[Image.Image]]:
        from training.procedural.scenes import render

        images, masks, seeds = prepare_call(images, masks, prompts, n, seed, self.cfg.mask_mismatch)
        out = []
        for image, mask, prompt, base in zip(images, masks, prompts, seeds, strict=True):
            side = min(max(image.size), self.cfg.render_size)
            candidates = []
            for j in range(n):
                spec, levels = candidate_levels(prompt, base + j, self.cfg.level_jitter, self.cfg.jitter_by_prompt)
                scene = render(spec, levels, side)
                scene = scene.resize(image.size, Image.Resampling.BILINEAR) if scene.size != image.size else scene
                candidates.append(Image.composite(scene, image, mask))
            out.append(candidates)
        return out


# ---------------------------------------------------------------------------------------------- diffusers

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
    mask_mismatch: str = field(default="resize", metadata={"help": "resize (with a warning) or error"})
    repeat_items: bool = field(
        default=True, metadata={"help": "one row per candidate (exact reproduction); false: num_images_per_prompt"}
    )

    __post_init__ = ProceduralConfig.__post_init__


def text_budget(cfg: Any) -> int:
    """Tokens of prompt text a generator reads, from its config alone (nothing loaded): ``max_prompt_tokens`` when
    set, else CLIP's 77 (SD1.5/SDXL), T5's ``max_sequence_length`` (FLUX Fill) or the procedural generator's words.

    >>> text_budget({"name": "flux-fill"}), text_budget({"name": "sd15-inpaint"}), text_budget({"name": "procedural"})
    (512, 77, 77)
    """
    values = to_plain(cfg)
    name = str(values.get("name"))
    if values.get("max_prompt_tokens"):
        return int(values["max_prompt_tokens"])
    if name == "flux-fill":
        return int(values.get("max_sequence_length") or DiffusersConfig.max_sequence_length)
    if name == "procedural":
        return ProceduralConfig.max_prompt_tokens
    return 77


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

    def _clip_prompts(self, prompts: Sequence[str]) -> list[str]:
        """FLUX: what CLIP reads (its first 75 tokens; only its pooled vector is used), cut here without a warning."""
        tokenizer = getattr(self.pipe, "tokenizer", None)
        if tokenizer is None:
            return list(prompts)
        return [cut_to_tokens(tokenizer, p, self.clip_tokens - 2)[0] for p in prompts]

    def _work_size(self, size: tuple[int, int]) -> tuple[int, int]:
        w, h = size
        scale = min(1.0, self.cfg.max_size / max(w, h))
        m = self.cfg.size_multiple
        return max(m, int(w * scale) // m * m), max(m, int(h * scale) // m * m)

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
            groups.setdefault(self._work_size(im.size), []).append(i)
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
                    kwargs["prompt"] = self._clip_prompts(kwargs["prompt_2"])
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


# ---------------------------------------------------------------------------------------------- registry


GENERATORS = Registry("generator", required=("description", "config"))
GENERATORS.register(
    "procedural",
    ProceduralGenerator,
    config=ProceduralConfig,
    description="procedural interior painted at the prompt's levels (CPU)",
)
for name, what in (
    ("sd15-inpaint", "Stable Diffusion 1.5 inpainting"),
    ("sdxl-inpaint", "Stable Diffusion XL inpainting"),
    ("flux-fill", "FLUX.1 Fill"),
):
    GENERATORS.register(name, DiffusersGenerator, config=DiffusersConfig, description=f"{what} (diffusers)")


def generator_config(name: str) -> type | None:
    """The settings dataclass of the registered generator ``name`` (the ``generator`` config group's option)."""
    return GENERATORS.get(name).meta["config"] if name in GENERATORS else None


def build_generator(cfg: Any) -> Generator:
    """Build the generator named by ``cfg["name"]`` from its config node; unknown names list the known ones."""
    values = to_plain(cfg)
    return GENERATORS.get(str(values.get("name"))).load()(values)


def inpaint_each(
    generator: Generator,
    images: Sequence[Image.Image],
    masks: Sequence[Image.Image],
    prompts: Sequence[str],
    n: int = 1,
    seed: Seeds = 0,
) -> tuple[list[list[Image.Image] | None], list[str]]:
    """One batched call; if it fails, item by item, so one bad item costs only itself.

    Returns the candidates per item (``None`` where the item failed) and the error messages of the failures.
    """
    seeds = item_seeds(seed, len(images))
    try:
        return list(generator.inpaint(images, masks, prompts, n=n, seed=seeds)), []
    except Exception as err:  # noqa: BLE001 - any generator error: retry per item to isolate it
        if len(images) == 1:
            logger.warning("generation failed: %s", err)
            return [None], [f"item 0: {err}"]
        logger.warning("batched generation failed (%s); retrying item by item", err)
    out: list[list[Image.Image] | None] = []
    errors = []
    for i in range(len(images)):
        try:
            out.append(generator.inpaint([images[i]], [masks[i]], [prompts[i]], n=n, seed=[seeds[i]])[0])
        except Exception as err:  # noqa: BLE001
            logger.warning("generation failed for item %d: %s", i, err)
            out.append(None)
            errors.append(f"item {i}: {err}")
    return out, errors


def generator_has_device(name: str) -> bool:
    """Whether the registered generator ``name`` takes a ``device`` setting (placed by :mod:`rl.devices`)."""
    return name in GENERATORS and any(
        f.name == "device" for f in dataclasses.fields(GENERATORS.get(name).meta["config"])
    )
