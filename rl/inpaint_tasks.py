"""Inpainting tasks (image, mask, base prompt) for GRPO and Best-of-N: read, grouped, split, shown to the policy.

Manifests are read by ``reward.data.load_inpainting`` (bad rows named by ``file:line``, skipped and counted with
``skip_bad``). Each task belongs to a group, its row's ``scene`` or else its source image (by pixels), so that
:func:`split_heldout` never puts one scene or image on both sides of a split (SA-IQA §4.1 splits by scene).
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, ImageFilter

from reward.core.errors import UserError
from reward.data import SkippedRow, load_inpainting, load_prompts
from reward.data.images import DEFAULT_MAX_PIXELS, ImageError, load_image
from reward.data.manifest import ManifestError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Task:
    """One inpainting task: RGB image, ``L`` mask (255 = repaint), base prompt, a stable id (``source:line``) and
    its group (``scene:NAME`` from the row's ``scene`` field, else ``image:DIGEST`` of its pixels)."""

    id: str
    image: Image.Image
    mask: Image.Image
    prompt: str
    group: str = ""

    @functools.cached_property
    def key(self) -> str:
        """The task known by its content (pixels, mask, prompt), not by where its manifest lies: its generator seeds
        come from this, so a moved or copied task folder gives the same images."""
        h = hashlib.blake2b(digest_size=8)
        for im in (self.image, self.mask):
            h.update(f"{im.size}{im.mode}".encode() + im.tobytes())
        return h.hexdigest() + hashlib.blake2b(self.prompt.encode(), digest_size=4).hexdigest()


def load_tasks(
    source: Any,
    *,
    skip_bad: bool = False,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    image_root: str | Path | None = None,
    allow_absolute_paths: bool = False,
) -> tuple[list[Task], list[SkippedRow]]:
    """The usable tasks of a manifest (JSONL, datasets folder or in-memory dataset) and the skipped rows; image and
    mask paths relative to the manifest's folder or ``image_root`` (absolute only with ``allow_absolute_paths``)."""
    result = load_inpainting(
        source,
        skip_bad=skip_bad,
        check_images=False,
        max_pixels=max_pixels,
        image_root=image_root,
        allow_absolute_paths=allow_absolute_paths,
        skip_key="skip_bad",
    )
    tasks, skipped = [], list(result.skipped)
    for row in result.rows:
        try:
            image = load_image(row.image, max_pixels=max_pixels)
            mask = load_image(row.mask, max_pixels=max_pixels).convert("L")
        except (FileNotFoundError, ImageError) as err:
            if not skip_bad:
                raise ManifestError(
                    f"{row.where}: {err} (or pass skip_bad=true to skip and count such rows)"
                ) from None
            logger.warning("%s: skipped (%s)", row.where, err)
            skipped.append(SkippedRow(row.line, f"{row.where}: {err}"))
            continue
        scene = row.extra.get("scene")
        group = f"scene:{scene}"  # else a digest of the pixels: tasks cut from one image share it whatever its name
        if scene in (None, ""):
            group = (
                "image:"
                + hashlib.blake2b(image.tobytes() + f"{image.size}{image.mode}".encode(), digest_size=8).hexdigest()
            )
        tasks.append(Task(row.where, image, mask, row.prompt, group))
    if skipped:
        logger.warning("%s: %d bad rows skipped, %d tasks kept", result.source, len(skipped), len(tasks))
    return tasks, skipped


def split_heldout(tasks: Sequence[Task], n_heldout: int) -> tuple[list[Task], list[Task]]:
    """Hold out whole groups from the end of the list until at least ``n_heldout`` tasks are held out: no scene or
    source image is on both sides. Order is kept on both sides.

    >>> im = [Image.new("RGB", (4, 4), (v, 0, 0)) for v in range(3)]
    >>> ts = [Task(str(i), im[g], im[g], "p", f"g{g}") for i, g in enumerate([0, 1, 1, 2, 2])]
    >>> train, held = split_heldout(ts, 1)
    >>> [t.id for t in train], [t.id for t in held]
    (['0', '1', '2'], ['3', '4'])
    """
    if n_heldout <= 0:
        return list(tasks), []
    sizes = Counter(t.group for t in tasks)
    held_groups: set[str] = set()
    count = 0
    for t in reversed(tasks):
        if count >= n_heldout:
            break
        if t.group not in held_groups:
            held_groups.add(t.group)
            count += sizes[t.group]
    train = [t for t in tasks if t.group not in held_groups]
    held = [t for t in tasks if t.group in held_groups]
    if not train:
        raise UserError(
            f"holding out {n_heldout} tasks by whole scene / source image leaves no training task ({len(tasks)} tasks "
            f"in {len({t.group for t in tasks})} groups); give eval_data=TASKS.jsonl or lower eval_tasks"
        )
    return train, held


def heldout_problems(settings: Any, *, prompts: bool = False) -> list[str]:
    """``eval_tasks`` against the rows of ``data`` (counted, no image read; ``prompts``: a prompts manifest, as
    Flow-GRPO's sd3 reads), said with the settings' other problems before anything loads; a file that does not read
    is left to the tasks' loading, which names it. ``settings``: GRPO's or Flow-GRPO's (the same data keys)."""
    if settings.eval_data or settings.eval.every <= 0:
        return []
    paths = {"image_root": settings.image_root, "allow_absolute_paths": settings.allow_absolute_paths}
    try:
        if prompts:
            rows = len(load_prompts(settings.data, skip_bad=False).rows)
        else:
            rows = len(load_inpainting(settings.data, skip_bad=False, check_images=False, **paths).rows)
    except (ValueError, OSError):
        return []
    if rows >= 2 * settings.eval_tasks:
        return []
    return [
        f"eval_tasks={settings.eval_tasks}: data={settings.data} holds {rows} tasks, too few to hold out that many "
        f"and train on the rest (at most {rows // 2}); lower eval_tasks, give eval_data=TASKS.jsonl, or eval.every=0"
    ]


def task_split(settings: Any, with_eval: bool, load: Callable[..., Any] = load_tasks) -> tuple[list, list, int]:
    """Training and held-out tasks (read by ``load``: inpainting tasks, or Flow-GRPO's prompts), and the number of
    bad rows; held out by whole scene / source image, and a held-out set given as ``eval_data`` shares no scene or
    image with the training tasks. ``settings``: GRPO's or Flow-GRPO's (the same data keys)."""
    paths = {"image_root": settings.image_root, "allow_absolute_paths": settings.allow_absolute_paths}
    read = {"skip_bad": settings.skip_bad, "max_pixels": settings.max_decode_pixels, **paths}
    train, skipped = load(settings.data, **read)
    n_bad = len(skipped)
    heldout: list[Any] = []
    if with_eval and settings.eval_data:
        heldout, skipped_eval = load(settings.eval_data, **read)
        n_bad += len(skipped_eval)
        shared = {task.group for task in heldout} & {task.group for task in train}
        if shared:
            raise UserError(
                f"eval_data={settings.eval_data} shares {len(shared)} scene(s) / source image(s) with "
                f"data={settings.data} (e.g. {sorted(shared)[0]}): held-out rewards would measure memory, not "
                "generalisation; remove them"
            )
    elif with_eval:
        train, heldout = split_heldout(train, settings.eval_tasks)
    if not train:
        raise UserError(f"{settings.data}: no usable tasks ({n_bad} bad rows); see the warnings above")
    return train, heldout, n_bad


def policy_view(task: Task, mode: str = "masked") -> Image.Image:
    """The image a VLM policy is shown: ``masked`` (the region to invent filled with grey, as the inpainting model
    receives it), ``outline`` (the whole image with the mask's outline drawn in red) or ``original``.

    >>> t = Task("t", Image.new("RGB", (8, 8), (255, 0, 0)), Image.new("L", (8, 8), 255), "p")
    >>> policy_view(t).getpixel((4, 4)), policy_view(t, "original").getpixel((4, 4))
    ((128, 128, 128), (255, 0, 0))
    """
    if mode == "original":
        return task.image
    mask = task.mask.convert("L")
    if mask.size != task.image.size:
        mask = mask.resize(task.image.size, Image.Resampling.NEAREST)
    mask = mask.point(lambda v: 255 if v >= 128 else 0)
    if mode == "masked":
        return Image.composite(Image.new("RGB", task.image.size, (128, 128, 128)), task.image, mask)
    edge = mask.filter(ImageFilter.FIND_EDGES).filter(ImageFilter.MaxFilter(3))  # outline
    return Image.composite(Image.new("RGB", task.image.size, (255, 0, 0)), task.image, edge)
