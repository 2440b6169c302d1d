"""A dataset source as manifest rows: read its files, split it, flip a DMOS, find each image, name what is missing.

:func:`open_dataset` gives the rows a ratings manifest would hold (``{"image", "dimension", "mos", ...}``, image paths
relative to the dataset folder) with the line of the dataset's file each came from, or a ``ManifestError`` naming
the file, the line and the image for a row that cannot be used; :func:`reward.data.load_ratings` then fails on it
or, with ``skip_bad``, skips and counts it, exactly as for a JSONL manifest. Every row is higher-is-better on the
dataset's ``scale`` (a DMOS ``d`` becomes ``low + high - d``, the value read kept as ``dmos``) and carries its
``dataset`` and ``split``, its ``std``, its annotators' ``distribution`` where the dataset has one, and the rest
the files say (``prompt``, ``reference``, ...).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from reward.core.errors import MissingInputError
from reward.core.registry import UnknownNameError
from reward.data.datasets.finder import AmbiguousImage, Finder, ImageNotFound
from reward.data.datasets.records import Record, Table
from reward.data.datasets.registry import DATASETS
from reward.data.datasets.source import DatasetSource, parse_source
from reward.data.datasets.splits import DEFAULT_SEED, FRACTIONS, seeded_split
from reward.data.manifest import ManifestError, iter_jsonl

__all__ = ["OpenedDataset", "check_source", "mos_range_of", "open_dataset", "pair_items"]

logger = logging.getLogger(__name__)

Item = tuple[int, dict | ManifestError]


@dataclass
class OpenedDataset:
    """The rows of one dataset split (see the module docstring) and what the outputs record about them."""

    source: DatasetSource  # with its split
    folder: Path  # resolved; the rows' image paths are relative to it
    file: str  # the metadata file read
    items: list[Item]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def scale(self) -> tuple[float, float]:
        low, high = self.info["scale"]
        return float(low), float(high)


def _split(table: Table, meta: dict[str, Any], seed: int) -> tuple[dict[int, str], str, int | None]:
    """Each record's split (by position), the rule that gave it and the seed used (``None``: official)."""
    given = [r.split for r in table.records]
    if table.records and all(given):
        return dict(enumerate(given)), table.split_rule or "official", None  # type: ignore[arg-type]
    kind = meta["split"] if meta["split"] in ("reference", "prompt") else "image"
    keys = [(r.group if kind != "image" and r.group else r.image) for r in table.records]
    parts = seeded_split(keys, seed)
    share = "/".join(f"{round(100 * f)}" for f in FRACTIONS)
    rule = f"seeded by {kind} (seed {seed}; {share} of {len(parts)} {kind}s into train/val/test)"
    return {i: parts[k] for i, k in enumerate(keys)}, rule, seed


def _row(record: Record, image: str, dim: str, meta: dict[str, Any], split: str, name: str) -> dict[str, Any]:
    low, high = meta["scale"]
    raw = record.scores[dim]
    row: dict[str, Any] = {"image": image, "dimension": dim}
    if meta["higher_is_better"]:
        row["mos"] = raw
    else:
        row["mos"], row["dmos"] = low + high - raw, raw
    row.update(dataset=name, split=split)
    if dim in record.std:
        row["std"] = record.std[dim]
    if record.distribution is not None and dim == meta["dimensions"][0]:
        row["distribution"] = record.distribution
    row.update({k: v for k, v in record.extra.items() if k not in row})
    return row


def _scored_row(
    record: Record, image: str, dim: str, meta: dict[str, Any], split: str, name: str
) -> dict[str, Any] | ManifestError:
    """The row of ``record`` for ``dim``, or the error naming a value outside the dataset's scale (a wrong file, or
    a dataset read with another one's rule): never written on a scale it is not on."""
    low, high = meta["scale"]
    raw = record.scores[dim]
    if not low <= raw <= high:
        return ManifestError(
            f"{record.where}: {dim} {raw:g} is outside {name}'s scale [{low:g}, {high:g}]; check that the file is "
            f"{meta['title']}'s own, or pass skip_bad=true to skip and count such rows"
        )
    return _row(record, image, dim, meta, split, name)


def _duplicates(rows: list[tuple[int, dict[str, Any]]], file: str) -> int:
    """Rows that rate an image on a dimension already rated with another value: counted, and said in one warning."""
    first: dict[tuple[str, str], tuple[int, float]] = {}
    clashes = []
    for line, row in rows:
        key = (row["image"], row["dimension"])
        if key in first and first[key][1] != row["mos"]:
            clashes.append((line, key, first[key], row["mos"]))
        first.setdefault(key, (line, row["mos"]))
    if clashes:
        line, (image, dim), (line0, mos0), mos = clashes[0]
        logger.warning(
            "%s: %d rows rate an image again with another value (first: line %d rates %s on %s %g, line %d %g); "
            "both are kept, as the dataset gives them",
            file,
            len(clashes),
            line,
            image,
            dim,
            mos,
            line0,
            mos0,
        )
    return len(clashes)


def check_source(source: str | DatasetSource | None) -> DatasetSource | None:
    """The dataset ``source`` names (``None`` when it is a path), checked without reading it: a registered name
    (else the known ones are listed), a valid split and an existing folder; commands call this before any work.

    >>> check_source("kadid1k:/data")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    reward.core.registry.UnknownNameError: unknown dataset 'kadid1k'. Did you mean 'kadid10k'? Known datasets: ...
    """
    src = parse_source(source) if not isinstance(source, DatasetSource) else source
    if src is None:
        return None
    if src.name == "hf":  # a datasets dataset (reward.data.hf): its folder checked, a Hub name read when used
        from reward.data.hf import HfSource, check_hf

        check_hf(HfSource(src.folder, src.split))
        return src
    try:
        meta = DATASETS.get(src.name).meta
    except UnknownNameError as err:
        raise UnknownNameError(
            f"{err} (If {str(source)!r} is meant as a file or folder: it does not exist.)"
        ) from None
    if not Path(src.folder).expanduser().is_dir():
        raise MissingInputError(
            f"{src}: the folder {src.folder} does not exist; give the folder you unpacked {meta['title']} into"
        )
    return src


def open_dataset(
    source: str | DatasetSource, *, default_split: str = "all", seed: int = DEFAULT_SEED
) -> OpenedDataset:
    """The rows of ``source`` (``NAME:FOLDER[:SPLIT]``; ``default_split`` when it names none) as described in the
    module docstring. An unknown name lists the known ones; a missing folder or metadata file is named."""
    src = check_source(source)
    if src is None:
        raise ValueError(f"{source!r} is not a dataset source NAME:FOLDER[:SPLIT]")
    src = src.with_default(default_split)
    entry = DATASETS.get(src.name)
    meta = entry.meta
    folder = Path(src.folder).expanduser()
    finder = Finder(folder)
    table: Table = entry.load()(finder.folder, finder)
    splits, rule, seed_used = _split(table, meta, seed)
    dims = [d for d in meta["dimensions"] if any(d in r.scores for r in table.records)]
    items: list[Item] = [(line, err) for line, err in table.errors]
    kept = 0
    for i, record in enumerate(table.records):
        if src.split != "all" and splits[i] != src.split:
            continue
        kept += 1
        try:
            image = finder.image(record.image, meta["images"])
        except ImageNotFound:
            where = ", ".join(f"{d}/" for d in meta["images"])
            items.append(
                (
                    record.line,
                    ManifestError(
                        f"{record.where}: image {record.image!r} not found below {finder.folder} (looked in {where} "
                        "and for its file name anywhere below); add it, or pass skip_bad=true to skip and count "
                        "such rows"
                    ),
                )
            )
            continue
        except AmbiguousImage as err:
            items.append((record.line, ManifestError(f"{record.where}: {err}; keep one copy below {finder.folder}")))
            continue
        for dim in dims:
            if dim in record.scores:
                items.append((record.line, _scored_row(record, image, dim, meta, splits[i], src.name)))
    if not kept:
        raise MissingInputError(
            f"{src}: no image in split {src.split!r} ({len(table.records)} read from {table.file}, split {rule}); "
            f"choose another split: train, val, test or all"
        )
    low, high = meta["scale"]
    duplicates = _duplicates([(line, item) for line, item in items if isinstance(item, dict)], table.file)
    info = {
        "dataset": src.name,
        "title": meta["title"],
        "folder": str(finder.folder),
        "split": src.split,
        "split_rule": rule,
        "seed": seed_used,
        "split_sizes": dict(sorted(Counter(splits.values()).items())),
        "file": table.file,
        "scale": [low, high],
        "higher_is_better": meta["higher_is_better"],
        "values": "as read" if meta["higher_is_better"] else f"DMOS flipped: mos = {low:g} + {high:g} - dmos",
        "dimensions": dims,
        "images": kept,
        "duplicates": duplicates,  # rows rating an image again with another value (kept; warned about)
    }
    logger.info("%s: %d images from %s (split %s: %s)", src, kept, table.file, src.split, rule)
    return OpenedDataset(src, finder.folder, table.file, items, info)


def pair_items(opened: OpenedDataset, *, per_image: int = 5, seed: int = DEFAULT_SEED) -> list[Item]:
    """Preference pairs from the MOS (``quality``) of a dataset split: each image paired with ``per_image`` others
    drawn with ``seed``, ``label`` the one with the higher MOS (``tie`` when equal), sides drawn at random; the MOS
    of both are kept. A row the dataset could not give (a missing image) is passed on as its error.

    >>> rows = [(i + 1, {"image": f"{i}.png", "dimension": "quality", "mos": float(i % 3)}) for i in range(4)]
    >>> opened = OpenedDataset(DatasetSource("x", "/d", "all"), Path("/d"), "x.csv", rows, {"dimensions": ["quality"]})
    >>> pairs = [p for _, p in pair_items(opened, per_image=1)]
    >>> all((p["label"] == "a") == (p["mos_a"] > p["mos_b"]) for p in pairs), len(pairs)
    (True, 4)
    """
    main = opened.info["dimensions"][0]
    errors = [(line, item) for line, item in opened.items if isinstance(item, ManifestError)]
    rows = [item for _, item in opened.items if isinstance(item, dict) and item["dimension"] == main]
    rng = np.random.default_rng(seed)
    seen: set[tuple[int, int]] = set()
    pairs: list[Item] = []
    n = len(rows)
    for i in range(n):
        others = [j for j in rng.permutation(n)[: per_image + 1].tolist() if j != i][:per_image]
        for j in others:
            key = (min(i, j), max(i, j))
            if key in seen:
                continue
            seen.add(key)
            a, b = (rows[i], rows[j]) if rng.random() < 0.5 else (rows[j], rows[i])
            label = "tie" if a["mos"] == b["mos"] else "a" if a["mos"] > b["mos"] else "b"
            pair = {"a": a["image"], "b": b["image"], "label": label, "mos_a": a["mos"], "mos_b": b["mos"]}
            pairs.append((len(pairs) + 1, pair))
    return errors + pairs


def mos_range_of(source: Any, default: tuple[float, float] = (1.0, 5.0)) -> tuple[float, float]:
    """The MOS scale of ``source``: a dataset's own (``NAME:FOLDER``, or a JSONL manifest whose rows all name one
    dataset, as ``python reward/dataset_manifest.py`` writes them), else ``default``.

    >>> mos_range_of("spaq:/tmp"), mos_range_of("ratings.jsonl")
    ((0.0, 100.0), (1.0, 5.0))
    """
    src = check_source(source)
    if src is not None and src.name == "hf":
        return default
    if src is not None:
        low, high = DATASETS.get(src.name).meta["scale"]
        return float(low), float(high)
    path = Path(str(source)) if isinstance(source, str | Path) else None
    if path is None or not path.is_file():
        return default
    names: set[Any] = set()
    for _, row in iter_jsonl(path):
        names.add(row.get("dataset") if isinstance(row, dict) else None)
        if len(names) > 1:
            return default
    name = next(iter(names), None)
    if isinstance(name, str) and name in DATASETS:
        low, high = DATASETS.get(name).meta["scale"]
        return float(low), float(high)
    return default
