"""A procedural SA-BENCH stand-in (scenes of :mod:`training.procedural.scenes` with known levels 1-5 of layout,
harmony, lighting, distortion): :func:`write_benchmark` writes a fixed benchmark in docs/datasets.md's manifest
formats; :func:`example_at` is example ``index`` of an endless stream, fresh images every step (the
``data.train=synthetic`` stream: a fixed set of a few hundred is memorised by a tiny VLM).
Deterministic given the seed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from reward.data.files import atomic_write_json, atomic_write_jsonl
from training.procedural.scenes import DIMENSIONS, EFFECTS, SceneSpec, describe, object_mask, render, sample_scene

logger = logging.getLogger(__name__)

DEFAULT_WEIGHTS: dict[str, float] = {"layout": 0.4, "harmony": 0.3, "lighting": 0.2, "distortion": 0.1}


def sample_levels(rng: np.random.Generator) -> dict[str, int]:
    """Independent uniform levels 1..5, one per dimension."""
    return {name: int(rng.integers(1, 6)) for name in DIMENSIONS}


def sample_mos(levels: Mapping[str, int], rng: np.random.Generator, noise: float = 0.25) -> dict[str, float]:
    """A continuous MOS per dimension: the level plus Gaussian noise of std ``noise``, clipped to [1, 5]."""
    return {name: float(np.clip(level + rng.normal(0.0, noise), 1.0, 5.0)) for name, level in levels.items()}


@dataclass(frozen=True)
class Example:
    """One streamed training example: the image, its true levels and a noisy continuous MOS per dimension."""

    image: Image.Image
    levels: dict[str, int]
    mos: dict[str, float]
    index: int


def example_at(seed: int, index: int, size: int = 64, mos_noise: float = 0.25) -> Example:
    """Example number ``index`` of the stream ``seed``: random access, the same on every machine and worker."""
    rng = np.random.default_rng([seed, index])
    spec = sample_scene(rng)
    levels = sample_levels(rng)
    return Example(render(spec, levels, size), levels, sample_mos(levels, rng, mos_noise), index)


@dataclass(frozen=True)
class AnnotatorPanel:
    """Simulated raters: integer ratings ``round(mos + bias + N(0, noise))`` clipped to 1..5.

    The last ``unreliable`` annotators answer uniformly at random (their SRCC against the MOS is low); good
    annotators give an outlier (the far end of the scale) with probability ``outlier_rate``.
    """

    n_annotators: int = 5
    noise: float = 0.5
    bias_std: float = 0.2
    unreliable: int = 1
    outlier_rate: float = 0.03

    def __post_init__(self) -> None:
        if self.n_annotators < 1 or not 0 <= self.unreliable < self.n_annotators:
            raise ValueError(
                "need n_annotators >= 1 and 0 <= unreliable < n_annotators, "
                f"got n_annotators={self.n_annotators}, unreliable={self.unreliable}"
            )

    @property
    def names(self) -> list[str]:
        return [f"a{j}" for j in range(self.n_annotators)]

    @property
    def unreliable_names(self) -> list[str]:
        return self.names[self.n_annotators - self.unreliable :]


def simulate_ratings(mos: float, panel: AnnotatorPanel, biases: np.ndarray, rng: np.random.Generator) -> list[int]:
    """One integer rating per annotator of ``panel`` for an item whose true MOS is ``mos``."""
    ratings = []
    for j in range(panel.n_annotators):
        if j >= panel.n_annotators - panel.unreliable:
            ratings.append(int(rng.integers(1, 6)))
        elif rng.random() < panel.outlier_rate:
            ratings.append(1 if mos >= 3 else 5)
        else:
            ratings.append(int(np.clip(np.rint(mos + biases[j] + rng.normal(0.0, panel.noise)), 1, 5)))
    return ratings


def preference(levels: Mapping[str, float], weights: Mapping[str, float] = DEFAULT_WEIGHTS) -> float:
    """The true overall quality: ``sum_d weights[d] * levels[d]``.

    >>> preference({"layout": 5, "harmony": 1, "lighting": 1, "distortion": 1})
    2.6
    """
    return round(sum(weights[d] * float(levels[d]) for d in weights), 12)


def pair_label(
    levels_a: Mapping[str, float],
    levels_b: Mapping[str, float],
    rng: np.random.Generator,
    *,
    weights: Mapping[str, float] = DEFAULT_WEIGHTS,
    noise_scale: float = 0.3,
    tie_margin: float = 0.15,
) -> str:
    """``"a"``, ``"b"`` or ``"tie"`` (within ``tie_margin``): the sign of ``preference(a) - preference(b) +
    Logistic(0, noise_scale)``, a Bradley-Terry model away from ties."""
    delta = preference(levels_a, weights) - preference(levels_b, weights) + rng.logistic(0.0, noise_scale)
    return "tie" if abs(delta) < tie_margin else "a" if delta > 0 else "b"


@dataclass(frozen=True)
class BenchmarkPaths:
    """Where :func:`write_benchmark` put each file (all manifests sit in ``root``; image paths relative to it)."""

    root: Path
    images: Path
    masks: Path
    ratings: Path  # {"image", "dimension", "mos", "scene"}: true continuous MOS
    raw_ratings: Path  # {"image", "dimension", "annotator", "rating", "scene"}: simulated panel
    pairs: Path  # {"a", "b", "label"}
    inpainting: Path  # {"image", "mask", "prompt"}
    levels: Path  # {"image", "scene", "variant", "levels": {dimension: level}}
    metadata: Path  # benchmark.json


def _write_task(
    root: Path, stem: str, spec: SceneSpec, levels: dict[str, int], size: int, mask: Image.Image
) -> dict[str, str]:
    """Write ``images/STEM.png`` and ``masks/STEM.png``; the task's row ``{"image", "mask", "prompt"}``."""
    image, mask_file = f"images/{stem}.png", f"masks/{stem}.png"
    render(spec, levels, size).save(root / image)
    mask.save(root / mask_file)
    return {"image": image, "mask": mask_file, "prompt": describe(spec, levels)}


def centred_mask(size: int, fraction: float) -> Image.Image:
    """A square ``L`` mask (255 = repaint) centred in a ``size`` image, covering ``fraction`` of each side.

    >>> m = centred_mask(10, 0.6)
    >>> m.getbbox(), m.getpixel((5, 5)), m.getpixel((0, 0))
    ((2, 2, 8, 8), 255, 0)
    """
    margin = round(size * (1 - fraction) / 2)
    mask = Image.new("L", (size, size), 0)
    mask.paste(255, (margin, margin, size - margin, size - margin))
    return mask


def write_inpainting_tasks(
    out_dir: str | Path, n: int, *, size: int = 64, seed: int = 0, mask_fraction: float = 0.6
) -> Path:
    """``n`` procedural rooms (random levels), a centred mask and the scene's description as prompt, for GRPO and
    Best-of-N on CPU; returns the ``tasks.jsonl`` path (image paths relative to it)."""
    if n < 1 or not 0 < mask_fraction <= 1:
        raise ValueError(f"need n >= 1 and 0 < mask_fraction <= 1, got n={n}, mask_fraction={mask_fraction}")
    root = Path(out_dir)
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "masks").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    mask = centred_mask(size, mask_fraction)
    rows = [_write_task(root, f"t{k:04d}", sample_scene(rng), sample_levels(rng), size, mask) for k in range(n)]
    return atomic_write_jsonl(root / "tasks.jsonl", rows)


def write_benchmark(
    out_dir: str | Path,
    n_scenes: int,
    *,
    size: int = 64,
    seed: int = 0,
    variants_per_scene: int = 1,
    n_annotators: int = 5,
    panel: AnnotatorPanel | None = None,
    mos_noise: float = 0.25,
    n_pairs: int | None = None,
    weights: Mapping[str, float] = DEFAULT_WEIGHTS,
    noise_scale: float = 0.3,
    tie_margin: float = 0.15,
) -> BenchmarkPaths:
    """Render ``n_scenes`` scenes x ``variants_per_scene`` quality variants and write every manifest.

    A scene is one room; its variants show it at independently drawn levels (like SA-BENCH's many generations per
    photo), so a scene-level split keeps them together. ``n_pairs`` defaults to twice the number of images.
    """
    if n_scenes < 1 or variants_per_scene < 1:
        raise ValueError(f"need n_scenes >= 1 and variants_per_scene >= 1, got {n_scenes}, {variants_per_scene}")
    if set(weights) != set(DIMENSIONS):
        raise ValueError(f"weights must name exactly the dimensions {list(DIMENSIONS)}, got {sorted(weights)}")
    panel = panel or AnnotatorPanel(n_annotators=n_annotators, unreliable=1 if n_annotators > 1 else 0)
    root = Path(out_dir)
    files = ("ratings.jsonl", "raw_ratings.jsonl", "pairs.jsonl", "inpainting.jsonl", "levels.jsonl", "benchmark.json")
    paths = BenchmarkPaths(root, root / "images", root / "masks", *(root / f for f in files))
    paths.images.mkdir(parents=True, exist_ok=True)
    paths.masks.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    biases = rng.normal(0.0, panel.bias_std, size=panel.n_annotators)
    ratings, raw, inpainting, level_rows = [], [], [], []
    for s in range(n_scenes):
        scene = f"s{s:04d}"
        spec: SceneSpec = sample_scene(rng)
        for k in range(variants_per_scene):
            levels = sample_levels(rng)
            mos = sample_mos(levels, rng, mos_noise)
            task = _write_task(root, f"{scene}_v{k}", spec, levels, size, object_mask(spec, levels, 0, size))
            image = task["image"]
            level_rows.append({"image": image, "scene": scene, "variant": k, "levels": levels})
            inpainting.append(task)
            for d in DIMENSIONS:
                ratings.append({"image": image, "dimension": d, "mos": round(mos[d], 4), "scene": scene})
                for name, r in zip(panel.names, simulate_ratings(mos[d], panel, biases, rng), strict=True):
                    raw.append({"image": image, "dimension": d, "annotator": name, "rating": r, "scene": scene})
    n_images = len(level_rows)
    pairs = []
    for _ in range(n_pairs if n_pairs is not None else 2 * n_images if n_images > 1 else 0):
        i, j = rng.choice(n_images, size=2, replace=False)
        a, b = level_rows[int(i)], level_rows[int(j)]
        label = pair_label(
            a["levels"], b["levels"], rng, weights=weights, noise_scale=noise_scale, tie_margin=tie_margin
        )
        pairs.append({"a": a["image"], "b": b["image"], "label": label})
    for path, rows in zip(files, (ratings, raw, pairs, inpainting, level_rows), strict=False):
        atomic_write_jsonl(root / path, rows)
    preference = {"weights": dict(weights), "noise_scale": noise_scale, "tie_margin": tie_margin}
    facts = {"seed": seed, "size": size, "n_scenes": n_scenes, "variants_per_scene": variants_per_scene}
    atomic_write_json(paths.metadata, _metadata(paths, facts, n_images, mos_noise, preference, panel, biases))
    logger.info("wrote %d images of %d scenes, %d pairs to %s", n_images, n_scenes, len(pairs), root)
    return paths


def _metadata(
    paths: BenchmarkPaths,
    facts: dict[str, Any],
    n_images: int,
    mos_noise: float,
    preference: dict[str, Any],
    panel: AnnotatorPanel,
    biases: np.ndarray,
) -> dict[str, Any]:
    """``benchmark.json``: how the benchmark was made (its rules, the panel, the files)."""
    weights, noise_scale = preference["weights"], preference["noise_scale"]
    return {
        "generator": "training.procedural.synthetic",
        **facts,
        "n_images": n_images,
        "dimensions": list(DIMENSIONS),
        "levels": {"1": "bad", "2": "poor", "3": "fair", "4": "good", "5": "excellent"},
        "mos": f"level + N(0, {mos_noise}) clipped to [1, 5]",
        "preference": {
            "weights": weights,
            "utility": "sum_d weights[d] * level[d]",
            "noise": "logistic",
            "noise_scale": noise_scale,
            "tie_margin": preference["tie_margin"],
            "bradley_terry_weights": {d: w / noise_scale for d, w in weights.items()},
        },
        "annotators": {
            **asdict(panel),
            "names": panel.names,
            "unreliable_names": panel.unreliable_names,
            "biases": [round(float(b), 4) for b in biases],
        },
        "effects": asdict(EFFECTS),
        "files": {k: str(Path(v).relative_to(paths.root)) for k, v in asdict(paths).items() if k != "root"},
    }
