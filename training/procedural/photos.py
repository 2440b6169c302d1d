"""Real photos with synthetic distortions (docs/photos.md): the ``data.train=distorted-photos`` stream (a random
native-scale crop of a training photo, one of blur, noise, JPEG, pixelation, exposure at level 1-5 or none, its MOS
from :data:`CALIBRATION`, KADID-10k-shaped, or :func:`calibration_from_kadid`'s exact means) and the held-out set of
the quarter of photos :func:`split_photos` keeps out (:func:`write_heldout`).

>>> [round(v, 1) for v in CALIBRATION["blur"]]
[4.4, 3.8, 3.1, 2.3, 1.6]
>>> sorted(LEVELS) == sorted(CALIBRATION) == sorted(DISTORTIONS)
True
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageFilter

from reward.core.errors import MissingInputError
from reward.data.files import atomic_write_json, atomic_write_jsonl

logger = logging.getLogger(__name__)

DIMENSION = "quality"
PHOTO_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
HELDOUT_FRACTION = 0.25

# Natural photographs shipped inside installed packages (package, folder inside it, file names). Synthetic test
# patterns (chessboards, logos, phantoms, colour wheels), document scans and already-blurred photos are left out.
SKIMAGE_PHOTOS = tuple(
    "astronaut.png brick.png camera.png cell.png chelsea.png coffee.png coins.png grass.png gravel.png "
    "hubble_deep_field.jpg ihc.png moon.png motorcycle_left.png motorcycle_right.png retina.jpg rocket.jpg".split()
)
PACKAGE_PHOTOS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("skimage", "data", SKIMAGE_PHOTOS),
    ("matplotlib", "mpl-data/sample_data", ("grace_hopper.jpg",)),
    ("sklearn", "datasets/images", ("china.jpg", "flower.jpg")),
)

# Distortion parameters at levels 1..5 (KADID-10k's ranges, for crops seen at native scale).
LEVELS: dict[str, tuple[float, ...]] = {
    "blur": (0.7, 1.2, 1.8, 2.8, 4.5),  # Gaussian sigma in pixels
    "noise": (0.03, 0.05, 0.08, 0.12, 0.18),  # white Gaussian noise std, fraction of the 0-255 range
    "jpeg": (40, 20, 10, 6, 3),  # JPEG quality
    "pixelate": (2, 3, 4, 6, 8),  # block size in pixels
    "brighten": (1.3, 1.6, 2.0, 2.6, 3.4),  # gamma: x ** (1 / g)
    "darken": (1.3, 1.6, 2.0, 2.6, 3.4),  # gamma: x ** g
}
DISTORTIONS: tuple[str, ...] = tuple(LEVELS)
# MOS (1-5, higher is better) of each type at levels 1..5: the shape of KADID-10k's per-level means (see above).
CALIBRATION: dict[str, tuple[float, ...]] = {
    "blur": (4.4, 3.8, 3.1, 2.3, 1.6),
    "noise": (4.1, 3.5, 2.9, 2.3, 1.8),
    "jpeg": (4.3, 3.8, 3.0, 2.2, 1.5),
    "pixelate": (4.3, 3.7, 3.0, 2.3, 1.7),
    "brighten": (4.4, 4.1, 3.7, 3.2, 2.7),
    "darken": (4.3, 3.8, 3.2, 2.6, 2.0),
}
PRISTINE_MOS = 4.7  # an undistorted crop: above every distorted level
STREAM_SHARDS = 32  # independent streams the DataLoader workers of a GPU run can draw in parallel
KADID_TYPES = {"blur": 1, "jpeg": 10, "noise": 11, "brighten": 16, "darken": 17, "pixelate": 21}  # KADID-10k ids


def package_photos() -> list[Path]:
    """The natural photographs of :data:`PACKAGE_PHOTOS` that are installed here."""
    import importlib.util

    found = []
    for package, folder, names in PACKAGE_PHOTOS:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(next(iter(spec.submodule_search_locations))) / folder
        found.extend(root / n for n in names if (root / n).is_file())
    return found


def discover_photos(folder: str | Path | None = None, min_side: int = 0) -> list[Path]:
    """Photos in ``folder`` (recursively) or, for ``None``, the package photos; those under ``min_side`` left out."""
    if folder is None:
        paths, where = package_photos(), "installed packages (scikit-image, matplotlib, scikit-learn)"
    else:
        root = Path(folder)
        if not root.is_dir():
            raise MissingInputError(f"data.photos={folder}: no such folder; point it at a folder of photos")
        paths, where = sorted(p for p in root.rglob("*") if p.suffix.lower() in PHOTO_SUFFIXES), str(root)
    usable = []
    for p in paths:
        with Image.open(p) as im:
            if min(im.size) >= min_side:
                usable.append(p)
            else:
                logger.warning("photo %s is %dx%d, smaller than the %d-pixel crop: not used", p, *im.size, min_side)
    if len(usable) < 2:
        raise ValueError(
            f"found {len(usable)} usable photo(s) in {where} (at least {min_side}x{min_side} pixels, suffixes "
            f"{', '.join(PHOTO_SUFFIXES)}); need 2 or more (one held out). Pass data.photos=DIR with more photos."
        )
    return usable


def split_photos(photos: Sequence[Path], fraction: float = HELDOUT_FRACTION) -> tuple[list[Path], list[Path]]:
    """``(train, heldout)``: a ``fraction`` (at least one) held out, chosen by a hash of the names (the same
    everywhere, whatever the order).

    >>> train, held = split_photos([Path(f"p{i}.png") for i in range(8)])
    >>> len(train), len(held), set(train) & set(held)
    (6, 2, set())
    """
    ranked = sorted(photos, key=lambda p: hashlib.sha256(p.name.encode()).hexdigest())
    n_held = min(len(ranked) - 1, max(1, round(fraction * len(ranked))))
    return sorted(ranked[n_held:]), sorted(ranked[:n_held])


def load_photo(path: Path, side: int | None = None) -> Image.Image:
    """The photo in RGB; with ``side``, downscaled (area filter) to that shorter side: a sharper reference with
    more scene in each crop (the distortions come after, never resampled)."""
    with Image.open(path) as im:
        image = im.convert("RGB")
    if side is not None and min(image.size) > side:
        scale = side / min(image.size)
        image = image.resize(
            (max(side, round(image.width * scale)), max(side, round(image.height * scale))), Image.Resampling.BOX
        )
    return image


def random_crop(image: Image.Image, size: int | tuple[int, int], rng: np.random.Generator) -> Image.Image:
    """A random ``size`` crop at native scale (``size``: a side, or ``(width, height)``)."""
    w, h = (size, size) if isinstance(size, int) else size
    if image.width < w or image.height < h:
        raise ValueError(f"cannot crop {w}x{h} from a {image.width}x{image.height} image")
    x, y = int(rng.integers(image.width - w + 1)), int(rng.integers(image.height - h + 1))
    return image.crop((x, y, x + w, y + h))


def distort(image: Image.Image, kind: str, level: int, rng: np.random.Generator) -> Image.Image:
    """``image`` with distortion ``kind`` at ``level`` (1 = mild .. 5 = strong; parameters in :data:`LEVELS`)."""
    if kind not in LEVELS:
        raise ValueError(f"unknown distortion {kind!r}; known: {', '.join(DISTORTIONS)}")
    if not 1 <= level <= len(LEVELS[kind]):
        raise ValueError(f"distortion level must be 1..{len(LEVELS[kind])}, got {level}")
    p = LEVELS[kind][level - 1]
    if kind == "blur":
        return image.filter(ImageFilter.GaussianBlur(p))
    if kind == "jpeg":
        buf = io.BytesIO()
        image.save(buf, format="JPEG", quality=int(p))
        return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    if kind == "pixelate":
        small = image.resize((max(1, image.width // int(p)), max(1, image.height // int(p))), Image.Resampling.BOX)
        return small.resize(image.size, Image.Resampling.NEAREST)
    x = np.asarray(image, dtype=np.float32) / 255.0
    if kind == "noise":
        x = x + rng.normal(0.0, p, x.shape).astype(np.float32)
    else:  # exposure
        x = x ** (1.0 / p) if kind == "brighten" else x**p
    return Image.fromarray(np.clip(np.rint(x * 255.0), 0, 255).astype(np.uint8))


@dataclass(frozen=True)
class DistortedPhoto:
    image: Image.Image
    mos: float
    kind: str  # a distortion of DISTORTIONS, or "pristine"
    level: int  # 0 for pristine
    photo: str  # file name of the source photo


def distorted_example(
    photo: Image.Image,
    name: str,
    rng: np.random.Generator,
    crop: int,
    calibration: Mapping[str, Sequence[float]] = CALIBRATION,
    pristine_mos: float = PRISTINE_MOS,
) -> DistortedPhoto:
    """A random crop of ``photo``, pristine or distorted (every type and level and pristine equally likely)."""
    kinds = list(calibration)
    n_levels = len(calibration[kinds[0]])
    choice = int(rng.integers(1 + len(kinds) * n_levels))
    image = random_crop(photo, crop, rng)
    if choice == 0:
        return DistortedPhoto(image, pristine_mos, "pristine", 0, name)
    kind, level = kinds[(choice - 1) // n_levels], 1 + (choice - 1) % n_levels
    return DistortedPhoto(distort(image, kind, level, rng), float(calibration[kind][level - 1]), kind, level, name)


def load_calibration(path: str | Path | None) -> dict[str, tuple[float, ...]]:
    """The built-in :data:`CALIBRATION`, or a JSON file ``{type: [mos at level 1..5]}`` (same types, monotone)."""
    if path is None:
        return dict(CALIBRATION)
    table = json.loads(Path(path).read_text())
    problems = [f"{k}: not a distortion (known: {', '.join(DISTORTIONS)})" for k in table if k not in LEVELS]
    for kind, values in table.items():
        falling = all(a >= b for a, b in zip(values, values[1:], strict=False))
        if kind in LEVELS and (len(values) != len(LEVELS[kind]) or not falling):
            problems.append(f"{kind}: need {len(LEVELS[kind])} MOS values falling with the level, got {values}")
    if problems or not table:
        raise ValueError(f"data.calibration={path}: " + ("; ".join(problems) or "empty table"))
    return {k: tuple(float(v) for v in vals) for k, vals in table.items()}


def calibration_from_kadid(dmos_csv: str | Path) -> dict[str, list[float]]:
    """Per-type, per-level mean DMOS from KADID-10k's ``dmos.csv`` (``I01_01_03.png``: image 1, type 1, level 3),
    for the types of :data:`KADID_TYPES`."""
    from reward.data.datasets.formats import number, read_csv, rows_of
    from reward.data.manifest import ManifestError

    sums: dict[tuple[int, int], list[float]] = {}
    for line, row in rows_of(read_csv(Path(dmos_csv), ["dist_img", "dmos"])):
        parts = Path(row["dist_img"]).stem.split("_")
        if len(parts) != 3 or not all(p.isdigit() for p in parts[1:]):
            raise ManifestError(f"{dmos_csv}:{line}: {row['dist_img']!r} is not a KADID-10k name like I01_01_03.png")
        value = number(row["dmos"], f"{dmos_csv}:{line}", "dmos")
        sums.setdefault((int(parts[1]), int(parts[2])), []).append(value)
    out = {}
    for kind, t in KADID_TYPES.items():
        levels = [np.mean(sums[(t, lvl)]) for lvl in range(1, 6) if (t, lvl) in sums]
        if len(levels) == 5:
            out[kind] = [round(float(v), 3) for v in levels]
    if not out:
        raise ValueError(f"{dmos_csv}: no rows of KADID-10k types {sorted(KADID_TYPES.values())} at levels 1-5")
    return out


class PhotoStream:
    """Endless fresh distorted crops of ``photos``: example ``index`` of stream ``seed`` is the same everywhere."""

    def __init__(
        self,
        photos: Sequence[Path],
        crop: int,
        seed: int = 0,
        calibration: Mapping[str, Sequence[float]] = CALIBRATION,
        side: int | None = None,
    ) -> None:
        self.names = [p.name for p in photos]
        self.images = [load_photo(p, side) for p in photos]
        self.crop, self.seed, self.calibration = crop, seed, calibration

    def example_at(self, index: int) -> DistortedPhoto:
        rng = np.random.default_rng([self.seed, index])
        i = int(rng.integers(len(self.images)))
        return distorted_example(self.images[i], self.names[i], rng, self.crop, self.calibration)

    def __iter__(self) -> Iterator[DistortedPhoto]:
        index = 0
        while True:
            yield self.example_at(index)
            index += 1


def shard_seed(seed: int, shard: int) -> int:
    """The seed of shard ``shard`` of stream ``seed`` (shard 0 is the stream itself).

    >>> shard_seed(3, 0), shard_seed(3, 1) == 3 + 2**32
    (3, True)
    """
    return seed + shard * 2**32


def training_photos(folder: str | Path | None, crop: int) -> list[Path]:
    """The photos the stream draws from: every usable photo except the held-out ones."""
    return split_photos(discover_photos(folder, min_side=crop))[0]


def write_heldout(
    out_dir: str | Path,
    folder: str | Path | None = None,
    *,
    crop: int = 112,
    crops_per_photo: int = 2,
    seed: int = 0,
    calibration: Mapping[str, Sequence[float]] = CALIBRATION,
    side: int | None = None,
) -> Path:
    """Distorted versions of the held-out photos as a ratings manifest (``out_dir/ratings.jsonl``): each of
    ``crops_per_photo`` crops pristine and at every type and level, rows with ``photo``, ``distortion``, ``level``."""
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    heldout = split_photos(discover_photos(folder, min_side=crop))[1]
    rows = []
    for p in heldout:
        photo = load_photo(p, side)
        for c in range(crops_per_photo):
            rng = np.random.default_rng([seed, c, int(hashlib.sha256(p.name.encode()).hexdigest()[:8], 16)])
            base = random_crop(photo, crop, rng)
            variants = [("pristine", 0, base, PRISTINE_MOS)] + [
                (k, lvl, distort(base, k, lvl, rng), float(calibration[k][lvl - 1]))
                for k in calibration
                for lvl in range(1, len(calibration[k]) + 1)
            ]
            for kind, level, image, mos in variants:
                name = f"images/{p.stem}_c{c}_{kind}{level}.png"
                image.save(out / name)
                row = {"image": name, "dimension": DIMENSION, "mos": mos}
                rows.append({**row, "photo": p.name, "distortion": kind, "level": level})
    manifest = atomic_write_jsonl(out / "ratings.jsonl", rows)
    names = ", ".join(p.name for p in heldout)
    logger.info("held-out set: %d images of %d photos (%s) in %s", len(rows), len(heldout), names, manifest)
    return manifest


def brisque_scores(images: Sequence[Image.Image]) -> np.ndarray:
    """BRISQUE (Mittal et al. 2012; the ``brisque`` package's LIVE-trained model) per image: lower is better."""
    from brisque import BRISQUE

    model = BRISQUE(url=False)
    return np.array([_brisque(model, im) for im in images])


def _brisque(model: Any, image: Image.Image) -> float:
    """``BRISQUE.score`` of brisque 0.2.0, its features flattened (1-element arrays its ``float()`` rejects under
    numpy 2)."""
    import cv2
    import skimage.color

    gray = skimage.color.rgb2gray(np.asarray(image.convert("RGB")))
    half = cv2.resize(gray, None, fx=0.5, fy=0.5, interpolation=cv2.INTER_CUBIC)
    with np.errstate(invalid="ignore", divide="ignore"):  # flat images: undefined (NaN), handled by the caller
        features = [
            np.asarray(f, dtype=np.float64).item()
            for g in (gray, half)
            for f in model.calculate_brisque_features(g, kernel_size=7, sigma=7 / 6)
        ]
    return float(model.calculate_image_quality_score(np.array(features)))


def evaluate_brisque(manifest: str | Path, out_dir: str | Path | None = None) -> dict[str, Any]:
    """SRCC/PLCC/KRCC of BRISQUE against the MOS of a ratings manifest (BRISQUE negated: higher is better)."""
    from reward.data import load_image, load_ratings
    from reward.eval.metrics import krcc, plcc, srcc

    rows = load_ratings(manifest).rows
    raw = brisque_scores([load_image(r.image) for r in rows])
    failed = ~np.isfinite(raw)  # its model fit fails on flat images (strong pixelation): ranked as the worst
    pred = -np.where(failed, np.nanmax(raw[~failed]) + 1.0, raw) if (~failed).any() else np.zeros(len(raw))
    mos = np.array([r.mos for r in rows])
    correlations = {"srcc": srcc(pred, mos), "plcc": plcc(pred, mos), "krcc": krcc(pred, mos)}
    metrics = {"peer": "brisque", **correlations, "n": len(rows), "undefined": int(failed.sum())}
    if out_dir is not None:
        atomic_write_json(Path(out_dir) / "brisque_metrics.json", metrics)
    return metrics
