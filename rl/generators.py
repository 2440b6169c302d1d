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
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from PIL import Image

from reward.core.config import FRACTION, SIDE, TOKENS, parse, to_plain
from reward.core.registry import Registry, import_path
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
    mask_mismatch: str = field(
        default="resize", metadata={"help": "resize (with a warning) or error", "choices": MASK_MISMATCH}
    )
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
        return int(values.get("max_sequence_length") or 512)  # DiffusersConfig's default
    if name == "procedural":
        return ProceduralConfig.max_prompt_tokens
    return 77


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
    GENERATORS.register(
        name,
        "rl.diffusers_generator:DiffusersGenerator",  # imported only when chosen, as its settings
        config="rl.diffusers_generator:DiffusersConfig",
        description=f"{what} (diffusers)",
    )


def generator_config(name: str) -> type | None:
    """The settings dataclass of the registered generator ``name`` (the ``generator`` config group's option)."""
    if name not in GENERATORS:
        return None
    config = GENERATORS.get(name).meta["config"]
    return import_path(config) if isinstance(config, str) else config


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
    config = generator_config(name)
    return config is not None and any(f.name == "device" for f in dataclasses.fields(config))
