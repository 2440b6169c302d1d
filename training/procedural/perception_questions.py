"""Q-Bench A1-format questions whose answers are known by construction, singles and pairs, over procedural scenes
(:mod:`training.procedural.scenes`) and distorted photos: the families and their questions are in docs/qbench.md.

>>> q = question_at(0, 0, size=32)
>>> sorted(q) == ["candidates", "concern", "correct_ans", "family", "images", "question", "type"]
True
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageFilter

from reward.core.errors import UserError, close_match
from reward.data.files import atomic_write_json, atomic_write_jsonl
from training.procedural.scenes import DIMENSIONS, render, sample_scene

logger = logging.getLogger(__name__)

PHOTOS_TRAIN = ("astronaut", "chelsea", "rocket", "camera", "brick", "grass", "immunohistochemistry", "page")
PHOTOS_HELDOUT = ("coffee", "gravel", "moon")
FIRST, SECOND = "The first image", "The second image"

Rendered = tuple[list[Image.Image], str, list[str], str]  # images, question, candidates, correct answer


@functools.lru_cache(maxsize=32)
def _photo(name: str) -> np.ndarray:
    import skimage.data

    arr = getattr(skimage.data, name)()
    if arr.ndim == 2:
        arr = np.repeat(arr[..., None], 3, axis=2)
    return arr[..., :3].astype(np.float32) / 255.0


def _crop(rng: np.random.Generator, size: int, photos: Sequence[str]) -> np.ndarray:
    """A random square crop (40-90% of the shorter side) of a random photo, resized to ``size``, in [0, 1]."""
    arr = _photo(photos[int(rng.integers(len(photos)))])
    h, w = arr.shape[:2]
    side = int(min(h, w) * rng.uniform(0.4, 0.9))
    y, x = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
    img = Image.fromarray(np.round(arr[y : y + side, x : x + side] * 255).astype(np.uint8))
    return np.asarray(img.resize((size, size), Image.BICUBIC), dtype=np.float32) / 255.0


def _img(arr: np.ndarray) -> Image.Image:
    return Image.fromarray(np.round(np.clip(arr, 0.0, 1.0) * 255).astype(np.uint8))


def _dark(arr: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return arr * rng.uniform(0.2, 0.35)


def _noisy(arr: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return arr + rng.normal(0.0, rng.uniform(0.15, 0.25), arr.shape)


def _blurry(arr: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    radius = arr.shape[0] * rng.uniform(0.04, 0.06)
    return np.asarray(_img(arr).filter(ImageFilter.GaussianBlur(radius)), dtype=np.float32) / 255.0


def _scene(rng: np.random.Generator, size: int, **levels: int) -> Image.Image:
    spec = sample_scene(rng)
    return render(spec, {**{d: int(rng.integers(1, 6)) for d in DIMENSIONS}, **levels}, size)


def _scene_pair(rng: np.random.Generator, size: int, dim: str, low: int, high: int) -> tuple[Image.Image, ...]:
    spec = sample_scene(rng)
    base = {d: int(rng.integers(1, 6)) for d in DIMENSIONS}
    return render(spec, {**base, dim: low}, size), render(spec, {**base, dim: high}, size)


def _order(rng: np.random.Generator, worse: Image.Image, better: Image.Image) -> tuple[list[Image.Image], bool]:
    """The two images in a random order; True when ``better`` comes first."""
    first = bool(rng.integers(2))
    return ([better, worse] if first else [worse, better]), first


def scene_dim(rng: np.random.Generator, size: int, photos: Sequence[str]) -> Rendered:
    dim = bool(rng.integers(2))
    img = _scene(rng, size, lighting=int(rng.integers(1, 3)) if dim else int(rng.integers(4, 6)))
    return [img], "Is the lighting of this image dim?", ["Yes", "No"], "Yes" if dim else "No"


def scene_lighting(rng: np.random.Generator, size: int, photos: Sequence[str]) -> Rendered:
    k = int(rng.integers(3))
    img = _scene(rng, size, lighting=(1, 3, 5)[k])
    return [img], "How is the lighting of this image?", ["Dim", "Moderate", "Bright"], ("Dim", "Moderate", "Bright")[k]


def _photo_yes_no(effect: Callable[[np.ndarray, np.random.Generator], np.ndarray], question: str) -> Callable:
    def family(rng: np.random.Generator, size: int, photos: Sequence[str]) -> Rendered:
        arr = _crop(rng, size, photos)
        yes = bool(rng.integers(2))
        return [_img(effect(arr, rng) if yes else arr)], question, ["Yes", "No"], "Yes" if yes else "No"

    return family


def photo_distortion(rng: np.random.Generator, size: int, photos: Sequence[str]) -> Rendered:
    arr = _crop(rng, size, photos)
    names = ["Noise", "Blur", "Underexposure", "No obvious distortion"]
    k = int(rng.integers(4))
    out = (_noisy, _blurry, _dark, lambda a, r: a)[k](arr, rng)
    return [_img(out)], "What is the most obvious distortion in this image?", names, names[k]


def pair_brighter(rng: np.random.Generator, size: int, photos: Sequence[str]) -> Rendered:
    if rng.integers(2):
        dark, bright = _scene_pair(rng, size, "lighting", int(rng.integers(1, 3)), int(rng.integers(4, 6)))
    else:
        arr = _crop(rng, size, photos)
        dark, bright = _img(_dark(arr, rng)), _img(arr)
    images, first = _order(rng, dark, bright)
    return images, "Which image is brighter?", [FIRST, SECOND], FIRST if first else SECOND


def pair_first_brighter(rng: np.random.Generator, size: int, photos: Sequence[str]) -> Rendered:
    images, _, _, correct = pair_brighter(rng, size, photos)
    answer = "Yes" if correct == FIRST else "No"
    return images, "Is the first image brighter than the second image?", ["Yes", "No"], answer


def pair_noisier(rng: np.random.Generator, size: int, photos: Sequence[str]) -> Rendered:
    arr = _crop(rng, size, photos)
    clean, noisy = _img(arr), _img(_noisy(arr, rng))
    images, first = _order(rng, clean, noisy)
    return images, "Which image is noisier?", [FIRST, SECOND], FIRST if first else SECOND


def pair_cluttered(rng: np.random.Generator, size: int, photos: Sequence[str]) -> Rendered:
    tidy, cluttered = _scene_pair(rng, size, "layout", 5, 1)
    images, first = _order(rng, tidy, cluttered)
    return images, "Which image is more cluttered?", [FIRST, SECOND], FIRST if first else SECOND


def pair_both_dim(rng: np.random.Generator, size: int, photos: Sequence[str]) -> Rendered:
    k = int(rng.integers(3))  # 0: both dim, 1: first dim only, 2: second dim only
    a, b = _crop(rng, size, photos), _crop(rng, size, photos)
    a = _dark(a, rng) if k in (0, 1) else a
    b = _dark(b, rng) if k in (0, 2) else b
    return [_img(a), _img(b)], "Are both images dim?", ["Yes", "No"], "Yes" if k == 0 else "No"


def pair_sharpness(rng: np.random.Generator, size: int, photos: Sequence[str]) -> Rendered:
    arr = _crop(rng, size, photos)
    k = int(rng.integers(3))  # 0: first sharper, 1: the same, 2: first blurrier
    sharp, blurred = _img(arr), _img(_blurry(arr, rng))
    images = [sharp, blurred] if k == 0 else [sharp, sharp] if k == 1 else [blurred, sharp]
    names = ["Sharper", "About the same", "Blurrier"]
    return images, "How is the sharpness of the first image compared with the second image?", names, names[k]


# name -> (renderer, type, concern)
FAMILIES: dict[str, tuple[Callable[..., Rendered], int, int]] = {
    "scene-dim": (scene_dim, 0, 1),
    "photo-blurry": (_photo_yes_no(_blurry, "Is this image blurry?"), 0, 0),
    "photo-noisy": (_photo_yes_no(_noisy, "Is this image noisy?"), 0, 0),
    "photo-distortion": (photo_distortion, 1, 0),
    "scene-lighting": (scene_lighting, 2, 1),
    "pair-brighter": (pair_brighter, 1, 1),
    "pair-noisier": (pair_noisier, 1, 0),
    "pair-cluttered": (pair_cluttered, 1, 1),
    "pair-first-brighter": (pair_first_brighter, 0, 1),
    "pair-both-dim": (pair_both_dim, 0, 3),
    "pair-sharpness": (pair_sharpness, 2, 0),
}


def _photos(which: str) -> tuple[str, ...]:
    table = {"train": PHOTOS_TRAIN, "heldout": PHOTOS_HELDOUT, "all": PHOTOS_TRAIN + PHOTOS_HELDOUT}
    if which not in table:
        raise UserError(f"photos={which!r}: use train, heldout or all")
    return table[which]


def check_families(families: Sequence[str] | None) -> tuple[str, ...]:
    names = tuple(families) if families else tuple(FAMILIES)
    unknown = [f for f in names if f not in FAMILIES]
    if unknown:
        hint = close_match(unknown[0], list(FAMILIES))
        raise UserError(
            f"unknown question famil{'y' if len(unknown) == 1 else 'ies'} {unknown}.{hint} "
            f"Known: {', '.join(FAMILIES)}"
        )
    return names


def question_at(
    seed: int, index: int, size: int = 64, families: Sequence[str] | None = None, photos: str = "train"
) -> dict[str, Any]:
    """Question number ``index`` of the stream ``seed`` (random access; same on every machine): a dict with the
    PIL ``images``, ``question``, ``candidates``, ``correct_ans``, ``type``, ``concern`` and ``family``."""
    names = check_families(families)
    rng = np.random.default_rng([seed, index, 11])
    family = names[int(rng.integers(len(names)))]
    render_fn, qtype, concern = FAMILIES[family]
    images, question, candidates, correct = render_fn(rng, size, _photos(photos))
    row = {"images": images, "question": question, "candidates": candidates, "correct_ans": correct}
    return {**row, "type": qtype, "concern": concern, "family": family}


def write_questions(
    out: str | Path,
    n: int,
    *,
    seed: int = 0,
    size: int = 64,
    families: Sequence[str] | None = None,
    photos: str = "train",
    fmt: str = "json",
) -> Path:
    """Write ``n`` questions and their images under ``out`` as an LLVisionQA file (``questions.json`` list or
    ``questions.jsonl``); returns the file's path."""
    families = check_families(families)  # fail before writing anything
    if fmt not in ("json", "jsonl"):
        raise UserError(f"fmt={fmt!r}: use json or jsonl")
    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        q = question_at(seed, i, size, families, photos)
        paths = [f"images/{i:05d}_{k}.png" for k in range(len(q["images"]))]
        for rel, im in zip(paths, q.pop("images"), strict=True):
            im.save(out / rel)
        rows.append({"id": f"{seed}-{i}", "img_path": paths[0] if len(paths) == 1 else paths, **q})
    path = out / f"questions.{fmt}"
    atomic_write_json(path, rows) if fmt == "json" else atomic_write_jsonl(path, rows)
    logger.info("wrote %d questions to %s", n, path)
    return path
