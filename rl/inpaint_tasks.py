"""Inpainting tasks (image, mask, base prompt) for GRPO and Best-of-N, and procedural task sets for CPU runs.

Manifests are read by ``reward.data.load_inpainting``: bad rows are named by ``file:line``; with ``skip_bad`` they
are skipped and counted, otherwise the first one fails. A mask of another size than its image is kept here and
resized (with a warning) or refused by the generator (``generator.mask_mismatch``).

Example::

    python rl/tasks.py out=/tmp/tasks n=16 size=64     # writes /tmp/tasks/tasks.jsonl
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from reward.data import SkippedRow, load_inpainting
from reward.data.files import atomic_write_jsonl
from reward.data.images import DEFAULT_MAX_PIXELS, ImageError, load_image, to_rgb

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Task:
    """One inpainting task: RGB image, ``L`` mask (255 = repaint), base prompt, and a stable id (``source:line``)."""

    id: str
    image: Image.Image
    mask: Image.Image
    prompt: str


def _open(ref: Any, max_pixels: int | None) -> Image.Image:
    """A manifest's image reference as RGB: a path, a PIL image, or a lazily decoded dataset cell (``.load``)."""
    if isinstance(ref, Image.Image):
        return to_rgb(ref)
    if hasattr(ref, "load") and not isinstance(ref, str | Path):
        return ref.load(max_pixels)
    return load_image(ref, max_pixels=max_pixels)


def load_tasks(
    source: Any, *, skip_bad: bool = True, max_pixels: int | None = DEFAULT_MAX_PIXELS
) -> tuple[list[Task], list[SkippedRow]]:
    """The usable tasks of a manifest (JSONL, datasets folder or in-memory dataset) and the skipped rows."""
    result = load_inpainting(source, skip_bad=skip_bad, check_images=False, max_pixels=max_pixels)
    tasks, skipped = [], list(result.skipped)
    jsonl = str(result.source).endswith(".jsonl")
    for row in result.rows:
        where = f"{result.source}:{row.line}" if jsonl else f"{result.source} row {row.line}"
        try:
            image = _open(row.image, max_pixels)
            mask = _open(row.mask, max_pixels).convert("L")
        except (FileNotFoundError, ImageError) as err:
            if not skip_bad:
                raise ValueError(f"{where}: {err}") from err
            logger.warning("%s: skipped (%s)", where, err)
            skipped.append(SkippedRow(row.line, f"{where}: {err}"))
            continue
        tasks.append(Task(where, image, mask, row.prompt))
    if skipped:
        logger.warning("%s: %d bad rows skipped, %d tasks kept", result.source, len(skipped), len(tasks))
    return tasks, skipped


def write_procedural_tasks(
    out_dir: str | Path, n: int, *, size: int = 64, seed: int = 0, mask_fraction: float = 0.6
) -> Path:
    """``n`` procedural rooms (random levels) with a centred mask covering ``mask_fraction`` of each side and the
    scene's description as base prompt; returns the ``tasks.jsonl`` path (image paths relative to it)."""
    from training.procedural.scenes import describe, render, sample_scene
    from training.procedural.synthetic import sample_levels

    if n < 1 or not 0 < mask_fraction <= 1:
        raise ValueError(f"need n >= 1 and 0 < mask_fraction <= 1, got n={n}, mask_fraction={mask_fraction}")
    root = Path(out_dir)
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "masks").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows = []
    margin = round(size * (1 - mask_fraction) / 2)
    for k in range(n):
        spec = sample_scene(rng)
        levels = sample_levels(rng)
        image, mask = f"images/t{k:04d}.png", f"masks/t{k:04d}.png"
        render(spec, levels, size).save(root / image)
        m = Image.new("L", (size, size), 0)
        m.paste(255, (margin, margin, size - margin, size - margin))
        m.save(root / mask)
        rows.append({"image": image, "mask": mask, "prompt": describe(spec, levels)})
    return atomic_write_jsonl(root / "tasks.jsonl", rows)
