"""Raw annotator ratings -> a MOS manifest, as SA-BENCH made its own (SA-IQA §3.1.4, App. D.1).

    perceptual-rewards mos raw=RAW_RATINGS.jsonl [out=DIR scale=[1,5] skip_bad=true]

:func:`read_raw_ratings` (one row per annotator, or grouped ``"ratings"``), :func:`~reward.data.raters.aggregate`
(ratings with ``|z| > z_threshold`` within their image replaced by the mean, once; the groups where the rule cannot
fire counted), :func:`~reward.data.raters.annotator_reliability` (SRCC below 0.6: flagged for review, never
dropped) and :func:`split_scenes` (a seeded scene-level split, 4:1); :func:`write_mos` writes train/test.jsonl,
annotators.json.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from reward.core.errors import UserError
from reward.data.manifest import ManifestError, iter_jsonl
from reward.data.raters import MosRow, RawRating, aggregate, annotator_reliability, max_abs_z

logger = logging.getLogger(__name__)
RAW_EXAMPLE = '{"image": "images/a.png", "dimension": "lighting", "annotator": "a0", "rating": 4}'


def split_scenes(
    scenes: Iterable[str], *, ratio: tuple[int, int] = (4, 1), seed: int = 0
) -> tuple[set[str], set[str]]:
    """Split scene ids into (train, test) in the ratio ``train:test``, deterministically for a seed.

    Scenes are ordered by ``sha256(f"{seed}:{scene}")`` and the first ``round(n * test / (train + test))`` go to
    test (at least one on each side when there are two or more scenes).

    >>> train, test = split_scenes([f"s{i}" for i in range(10)])
    >>> len(train), len(test), train & test
    (8, 2, set())
    """
    if len(ratio) != 2 or min(ratio) < 0 or sum(ratio) <= 0:
        raise ValueError(f"ratio must be two non-negative numbers (train, test) such as (4, 1), got {ratio}")
    unique = sorted(set(scenes), key=lambda scene: hashlib.sha256(f"{seed}:{scene}".encode()).hexdigest())
    n_test = round(len(unique) * ratio[1] / sum(ratio))
    if len(unique) >= 2 and min(ratio) > 0:
        n_test = min(max(n_test, 1), len(unique) - 1)
    return set(unique[n_test:]), set(unique[:n_test])


def split_rows(
    rows: Sequence[MosRow], *, ratio: tuple[int, int] = (4, 1), seed: int = 0
) -> tuple[list[MosRow], list[MosRow]]:
    """Scene-level split of MOS rows (see :func:`split_scenes`)."""
    _, test = split_scenes((r.scene for r in rows), ratio=ratio, seed=seed)
    return [r for r in rows if r.scene not in test], [r for r in rows if r.scene in test]


# ---------------------------------------------------------------------------------------------- files


def _number(value: Any, where: str, scale: tuple[float, float]) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ManifestError(f"{where}: rating must be a finite number, got {value!r}; write it unquoted, e.g. 4.")
    if not scale[0] <= float(value) <= scale[1]:
        raise ManifestError(f"{where}: rating {value!r} is outside the scale {scale}; fix the row or pass scale=.")
    return float(value)


def _parse(row: dict, where: str, scale: tuple[float, float]) -> list[RawRating]:
    missing = [k for k in ("image", "dimension") if not isinstance(row.get(k), str) or not row[k].strip()]
    if "rating" not in row and "ratings" not in row:
        missing.append("rating")
    if missing:
        raise ManifestError(f"{where}: missing or empty field(s) {missing}; a row looks like {RAW_EXAMPLE}.")
    scene = row.get("scene")
    if scene is not None and not isinstance(scene, str):
        raise ManifestError(f"{where}: 'scene' must be a string, got {scene!r}.")
    image, dimension = row["image"], row["dimension"]
    if "rating" in row:
        annotator = row.get("annotator")
        if annotator is not None and not isinstance(annotator, str | int):
            raise ManifestError(f"{where}: 'annotator' must be a string, got {annotator!r}.")
        name = None if annotator is None else str(annotator)
        return [RawRating(image, dimension, name, _number(row["rating"], where, scale), scene)]
    ratings = row["ratings"]
    if isinstance(ratings, dict):
        return [RawRating(image, dimension, str(k), _number(v, where, scale), scene) for k, v in ratings.items()]
    if isinstance(ratings, list) and ratings:
        return [RawRating(image, dimension, None, _number(v, where, scale), scene) for v in ratings]
    raise ManifestError(f"{where}: 'ratings' must be a non-empty list or an {{annotator: rating}} object.")


def read_raw_ratings(
    path: str | Path, *, scale: tuple[float, float] = (1.0, 5.0), skip_bad: bool = False
) -> tuple[list[RawRating], list[dict[str, Any]]]:
    """Read raw ratings; return (ratings, skipped) where skipped lists ``{"line", "reason"}`` of bad rows.

    A bad row (invalid JSON, missing field, rating not a number or outside ``scale``, an annotator rating the
    same image and dimension twice) raises :class:`reward.data.manifest.ManifestError` (a ``ValueError``) naming the
    file and line, or is skipped and reported with ``skip_bad=True``.
    """
    ratings: list[RawRating] = []
    skipped: list[dict[str, Any]] = []
    seen: dict[tuple[str, str, str], int] = {}
    for line, row in iter_jsonl(path):
        where = f"{path}:{line}"
        try:
            if isinstance(row, ManifestError):
                raise row
            parsed = _parse(row, where, scale)
            for r in parsed:
                key = (r.image, r.dimension, r.annotator)
                if r.annotator is not None and key in seen:
                    raise ManifestError(
                        f"{where}: annotator {r.annotator!r} already rated {r.image!r} ({r.dimension}) on line "
                        f"{seen[key]}; keep one rating per annotator, image and dimension."
                    )
            for r in parsed:
                if r.annotator is not None:
                    seen[(r.image, r.dimension, r.annotator)] = line
        except ManifestError as err:
            if not skip_bad:
                raise
            skipped.append({"line": line, "reason": str(err)})
            continue
        ratings.extend(parsed)
    if skipped:
        logger.warning("%s: skipped %d bad row(s), first: %s", path, len(skipped), skipped[0]["reason"])
    return ratings, skipped


@dataclass(frozen=True)
class MosPaths:
    """Files written by :func:`write_mos` and the report it also wrote to ``report_path``."""

    train: Path
    test: Path
    report_path: Path
    report: dict[str, Any] = field(repr=False)


def _rebase(image: str, src: Path, dst: Path, where: str) -> str:
    absolute = (src / image).resolve()
    try:
        return absolute.relative_to(dst.resolve()).as_posix()
    except ValueError:
        raise UserError(
            f"{where}: image {image!r} ({absolute}) is outside the output folder out={dst}; manifests keep their "
            f"images inside their own folder: write the MOS files next to the raw ratings (leave out= unset) or in a "
            f"folder above them (out={src})"
        ) from None


def write_mos(
    raw_path: str | Path,
    out_dir: str | Path | None = None,
    *,
    scale: tuple[float, float] = (1.0, 5.0),
    z_threshold: float = 2.0,
    ddof: int = 0,
    srcc_threshold: float = 0.6,
    ratio: tuple[int, int] = (4, 1),
    seed: int = 0,
    skip_bad: bool = False,
) -> MosPaths:
    """Raw ratings -> ``train.jsonl``, ``test.jsonl`` (``{"image", "dimension", "mos", "std", "n_ratings",
    "n_outliers", "scene"}``) and ``annotators.json`` in ``out_dir`` (default: the raw file's folder).

    Image paths are rewritten relative to ``out_dir``, which must contain the images.
    """
    raw_path = Path(raw_path)
    out = Path(out_dir) if out_dir is not None else raw_path.parent
    ratings, skipped = read_raw_ratings(raw_path, scale=scale, skip_bad=skip_bad)
    if not ratings:
        raise UserError(f"{raw_path}: no usable ratings (skipped {len(skipped)} bad rows); see {RAW_EXAMPLE}")
    rows = aggregate(ratings, z_threshold=z_threshold, ddof=ddof)
    reliability = annotator_reliability(ratings, rows, threshold=srcc_threshold)
    train, test = split_rows(rows, ratio=ratio, seed=seed)
    images = {r.image: _rebase(r.image, raw_path.parent, out, str(raw_path)) for r in rows}  # before any file is made
    out.mkdir(parents=True, exist_ok=True)
    paths = {"train": out / "train.jsonl", "test": out / "test.jsonl"}
    for name, part in (("train", train), ("test", test)):
        with paths[name].open("w", encoding="utf-8") as handle:
            for r in part:
                row = asdict(r) | {"image": images[r.image]}
                row["mos"], row["std"] = round(row["mos"], 6), round(row["std"], 6)
                handle.write(json.dumps(row) + "\n")
    cannot_fire = sum(max_abs_z(r.n_ratings, ddof) <= z_threshold for r in rows)
    if cannot_fire == len(rows):
        logger.warning(
            "%s: every image has too few ratings for |z| > %g (5 ratings reach at most 2.0); no outlier can be "
            "replaced",
            raw_path,
            z_threshold,
        )
    report = {
        "source": str(raw_path),
        "n_ratings": len(ratings),
        "n_items": len(rows),
        "skipped_rows": skipped,
        "srcc_threshold": srcc_threshold,
        "annotators": reliability,
        "flagged": [name for name, a in reliability.items() if a["flagged"]],
        "outliers": {
            "z_threshold": z_threshold,
            "ddof": ddof,
            "replaced": sum(r.n_outliers for r in rows),
            "items_with_outliers": sum(r.n_outliers > 0 for r in rows),
            "groups_that_cannot_fire": cannot_fire,
        },
        "split": {
            "ratio": list(ratio),
            "seed": seed,
            "train_items": len(train),
            "test_items": len(test),
            "train_scenes": len({r.scene for r in train}),
            "test_scenes": len({r.scene for r in test}),
        },
    }
    report_path = out / "annotators.json"
    report_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if report["flagged"]:
        logger.warning("annotators flagged for review (SRCC < %g): %s", srcc_threshold, report["flagged"])
    return MosPaths(paths["train"], paths["test"], report_path, report)


@dataclass
class MosSettings:
    """``python training/mos.py``'s settings (configs/mos.yaml)."""

    raw: str = field(
        default=MISSING,
        metadata={"help": 'raw ratings (JSONL: {"image", "dimension", "annotator", "rating"} or "ratings": [...])'},
    )
    out: str | None = field(
        default=None, metadata={"help": "folder of train.jsonl, test.jsonl, annotators.json (null: the raw file's)"}
    )
    scale: list[float] = field(default_factory=lambda: [1.0, 5.0], metadata={"help": "the rating scale [low, high]"})
    z_threshold: float = field(
        default=2.0,
        metadata={
            "help": "a rating with |z| above this within its image is replaced by the mean",
            "range": (0, None, True),
        },
    )
    ddof: int = field(
        default=0, metadata={"help": "the std's delta degrees of freedom (0: population std)", "range": (0, 1)}
    )
    srcc_threshold: float = field(
        default=0.6,
        metadata={
            "help": "annotators whose SRCC with the MOS is below this are flagged for review",
            "range": (-1, 1),
        },
    )
    ratio: list[int] = field(
        default_factory=lambda: [4, 1], metadata={"help": "train:test scenes", "range": (0, 1000)}
    )
    seed: int = field(default=0, metadata={"help": "the scene split's seed"})
    skip_bad: bool = field(default=False, metadata={"help": "true: skip (and count) bad rows instead of failing"})

    def problems(self) -> list[str]:
        """A scale of two bounds, low below high; a ratio of two shares of at least 1."""
        problems = []
        if len(self.scale) != 2 or not self.scale[0] < self.scale[1]:
            problems.append(f"scale={self.scale}: give [low, high] with low < high, e.g. scale=[1,5]")
        if len(self.ratio) != 2 or min(self.ratio) < 1:
            problems.append(f"ratio={self.ratio}: give [train, test] scene shares, e.g. ratio=[4,1]")
        return problems


def run(settings: MosSettings) -> MosPaths:
    """What ``python training/mos.py raw=FILE ...`` does: :func:`write_mos` with ``settings``."""
    same = {k: getattr(settings, k) for k in ("z_threshold", "ddof", "srcc_threshold", "seed", "skip_bad")}
    scale, ratio = (
        (float(settings.scale[0]), float(settings.scale[1])),
        (int(settings.ratio[0]), int(settings.ratio[1])),
    )
    paths = write_mos(settings.raw, settings.out, scale=scale, ratio=ratio, **same)
    logger.info("wrote %s, %s and %s", paths.train, paths.test, paths.report_path)
    return paths


if __name__ == "__main__":  # python training/mos.py raw=RAW.jsonl [out=DIR scale=[1,5] ...]
    from reward.core.cli import main

    main(
        "mos",
        run,
        schema=MosSettings,
        doc="perceptual-rewards mos raw=RAW_RATINGS.jsonl [out=DIR scale=[1,5] skip_bad=true]",
    )
