"""``NAME:FOLDER[:SPLIT][:DIMENSION]``: a public dataset named where a manifest is accepted, read into its rows
(``hf:NAME_OR_DIR[:SPLIT]``, :mod:`reward.data.hf`, is parsed here too). A value naming an existing path is a path.

:func:`open_dataset` gives the rows a ratings manifest would hold, higher-is-better on the dataset's scale (a DMOS
``d`` becomes ``low + high - d``, kept as ``dmos``), as ``(line, where, row)`` items; a row that cannot be used is its
``ManifestError`` instead (raised, or counted with ``skip_bad``).

Example:
    >>> parse_source("kadid10k:/data/kadid10k:test"), str(parse_source("sa-bench:/d:full:layout"))
    (DatasetSource(name='kadid10k', folder='/data/kadid10k', split='test', dimension=None), 'sa-bench:/d:all:layout')
    >>> parse_source("runs/ratings.jsonl") is None, mos_range_of("spaq:/tmp"), mos_range_of("ratings.jsonl")
    (True, (0.0, 100.0), (1.0, 5.0))
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from reward.core.errors import MissingInputError, UserError, close_match
from reward.core.sources import DatasetSource, parse_source
from reward.data.datasets.splits import DEFAULT_SEED, FRACTIONS, seeded_split
from reward.data.manifest import ManifestError, iter_jsonl

if TYPE_CHECKING:  # the readers' types: imported when a dataset is read
    from reward.data.datasets.formats import Record

__all__ = ["DatasetSource", "check_source", "mos_range_of", "open_dataset", "parse_source"]

logger = logging.getLogger(__name__)

Item = tuple[int, str, dict | ManifestError]  # (line, "file:line", the row or why it cannot be used)


def check_source(source: str | DatasetSource | None) -> DatasetSource | None:
    """The dataset ``source`` names (``None`` for a path), checked without reading it: a known name (else the known
    ones are listed), a valid split and an existing folder. Commands call this before any work.

    >>> check_source("kadid1k:/data")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    reward.core.errors.UserError: unknown dataset 'kadid1k'. Did you mean 'kadid10k'? Known datasets: ...
    """
    src = source if isinstance(source, DatasetSource) else parse_source(source)
    if src is None:
        return None
    if src.name == "hf":  # a datasets dataset: its folder checked, a Hub name read when used
        from reward.data.hf import check_hf

        check_hf(src)
        return src
    from reward.data.datasets.registry import DATASETS  # read when a value names a dataset, not for a path

    hint = f" (If {str(source)!r} is meant as a file or folder: it does not exist.)"
    meta = DATASETS.get(src.name, hint=hint).meta
    title, dims = meta["title"], meta["dimensions"]
    if src.dimension is not None and src.dimension not in dims:
        raise UserError(
            f"{src}: {title} has no dimension {src.dimension!r}.{close_match(src.dimension, dims)} Its "
            f"dimensions: {', '.join(dims)}"
        )
    if not Path(src.folder).expanduser().is_dir():
        raise MissingInputError(
            f"{src}: the folder {src.folder} does not exist; give the folder you unpacked {title} into"
        )
    return src


def _split(records: list[Record], meta: dict[str, Any], rule: str | None, seed: int) -> tuple[list[str], str, Any]:
    """Each record's split, the rule that gave it and the seed used (``None``: official)."""
    if records and all(r.split for r in records):
        return [r.split for r in records], rule or "official", None  # type: ignore[misc]
    kind = meta["split"] if meta["split"] in ("reference", "prompt") else "image"
    keys = [(r.group if kind != "image" and r.group else r.image) for r in records]
    parts = seeded_split(keys, seed)
    share = "/".join(f"{round(100 * f)}" for f in FRACTIONS)
    return (
        [parts[k] for k in keys],
        f"seeded by {kind} (seed {seed}; {share} of {len(parts)} {kind}s into train/val/test)",
        seed,
    )


def _row(record: Record, image: str, dim: str, meta: dict[str, Any], split: str, name: str) -> dict | ManifestError:
    """The row of ``record`` for ``dim`` (a DMOS flipped), or the error naming a value outside the dataset's scale (a
    wrong file, or another dataset's): never written on a scale it is not on."""
    (low, high), raw, flip = meta["scale"], record.scores[dim], not meta["higher_is_better"]
    if not low <= raw <= high:
        return ManifestError(
            f"{record.where}: {dim} {raw:g} is outside {name}'s scale [{low:g}, {high:g}]; check that the file is "
            f"{meta['title']}'s own, or pass skip_bad=true to skip and count such rows"
        )
    row = {"image": image, "dimension": dim, "mos": low + high - raw if flip else raw} | (
        {"dmos": raw} if flip else {}
    )
    row |= {"dataset": name, "split": split} | ({"std": record.std[dim]} if dim in record.std else {})
    if record.distribution is not None and dim == meta["dimensions"][0]:
        row["distribution"] = record.distribution
    return row | {k: v for k, v in record.extra.items() if k not in row}


def _duplicates(items: list[Item], file: str) -> int:
    """Rows rating an image on a dimension already rated with another value: counted, and said in one warning."""
    first: dict[tuple[str, str], tuple[int, float]] = {}
    clashes = []
    for line, _, row in items:
        if isinstance(row, dict):
            line0, mos0 = first.setdefault((row["image"], row["dimension"]), (line, row["mos"]))
            if mos0 != row["mos"]:
                clashes.append(
                    f"line {line} rates {row['image']} on {row['dimension']} {row['mos']:g}, line {line0} {mos0:g}"
                )
    if clashes:
        logger.warning(
            "%s: %d rows rate an image again with another value (first: %s); both are kept, as the dataset gives them",
            file,
            len(clashes),
            clashes[0],
        )
    return len(clashes)


def open_dataset(
    source: str | DatasetSource, *, default_split: str = "all", pairs: bool = False, seed: int = DEFAULT_SEED
) -> tuple[str, Path, dict[str, Any], list[Item]]:
    """The source with its split, its folder (the rows' image paths are relative to it), what outputs record about
    it and its items, see the module docstring; with ``pairs`` the preference pairs drawn from its MOS
    (:func:`_pairs`). An unknown name lists the known ones; a missing folder or metadata file is named."""
    from reward.data.datasets.finder import Finder
    from reward.data.datasets.registry import DATASETS

    src = check_source(source)
    if src is None or src.name == "hf":
        raise ValueError(f"{source!r} is not a dataset source NAME:FOLDER[:SPLIT]")
    src = src.with_default(default_split)
    entry = DATASETS.get(src.name)
    meta, finder = entry.meta, Finder(Path(src.folder).expanduser())
    table = entry.load()(finder, meta)
    splits, rule, seed_used = _split(table.records, meta, table.split_rule, seed)
    dims = [d for d in meta["dimensions"] if any(d in r.scores for r in table.records)]
    items: list[Item] = [(line, f"{table.file}:{line}", err) for line, err in table.errors]
    kept = 0
    for record, split in zip(table.records, splits, strict=True):
        if src.split not in ("all", split) or src.dimension not in (None, *record.scores):
            continue
        kept += 1
        try:
            image = finder.image(record.image, meta["images"])
        except LookupError as err:
            image = ManifestError(f"{record.where}: {err}; keep one copy below {finder.folder}")
        if image is None:
            image = ManifestError(
                f"{record.where}: image {record.image!r} not found below {finder.folder} (looked in "
                f"{', '.join(f'{d}/' for d in meta['images'])} and for its file name anywhere below); add it, or pass "
                "skip_bad=true to skip and count such rows"
            )
        if isinstance(image, ManifestError):
            items.append((record.line, record.where, image))
            continue
        for dim in (d for d in dims if d in record.scores and src.dimension in (None, d)):
            items.append((record.line, record.where, _row(record, image, dim, meta, split, src.name)))
    if not kept:
        raise MissingInputError(
            f"{src}: no image in split {src.split!r} ({len(table.records)} read from {table.file}, split {rule}); "
            f"choose another split: train, val, test or all"
        )
    low, high = meta["scale"]
    info = {
        "dataset": src.name,
        "title": meta["title"],
        "folder": str(finder.folder),
        "split": src.split,
        "split_rule": rule,
        "seed": seed_used,
        "split_sizes": dict(sorted(Counter(splits).items())),
        "file": table.file,
        "scale": [low, high],
        "higher_is_better": meta["higher_is_better"],
        "values": "as read" if meta["higher_is_better"] else f"DMOS flipped: mos = {low:g} + {high:g} - dmos",
        "dimensions": [src.dimension] if src.dimension else dims,
        "images": kept,
        "duplicates": _duplicates(items, table.file),  # rows rating an image again with another value (kept)
    } | table.info
    logger.info("%s: %d images from %s (split %s: %s)", src, kept, table.file, src.split, rule)
    if pairs:
        info["pairs"] = "drawn from the MOS: each image with 5 others (seeded), the higher MOS preferred"
        items = _pairs(items, dims[0], str(src), seed=seed)
    return str(src), finder.folder, info, items


def _pairs(items: list[Item], main: str, name: str, *, per_image: int = 5, seed: int = DEFAULT_SEED) -> list[Item]:
    """Preference pairs from the MOS of ``main``: each image paired with ``per_image`` others drawn with ``seed``,
    ``label`` the higher MOS (``tie`` when equal), sides drawn at random, both MOS kept. A row the dataset could not
    give is passed on as its error.

    >>> rows = [(i + 1, "", {"image": f"{i}.png", "dimension": "q", "mos": float(i % 3)}) for i in range(4)]
    >>> pairs = [p for _, _, p in _pairs(rows, "q", "x", per_image=1)]
    >>> all((p["label"] == "a") == (p["mos_a"] > p["mos_b"]) for p in pairs), len(pairs)
    (True, 4)
    """
    errors = [item for item in items if isinstance(item[2], ManifestError)]
    rows = [row for _, _, row in items if isinstance(row, dict) and row["dimension"] == main]
    rng = np.random.default_rng(seed)
    seen: set[tuple[int, int]] = set()
    pairs: list[Item] = []
    for i in range(len(rows)):
        for j in [j for j in rng.permutation(len(rows))[: per_image + 1].tolist() if j != i][:per_image]:
            if (min(i, j), max(i, j)) in seen:
                continue
            seen.add((min(i, j), max(i, j)))
            a, b = (rows[i], rows[j]) if rng.random() < 0.5 else (rows[j], rows[i])
            label = "tie" if a["mos"] == b["mos"] else "a" if a["mos"] > b["mos"] else "b"
            pair = {"a": a["image"], "b": b["image"], "label": label, "mos_a": a["mos"], "mos_b": b["mos"]}
            pairs.append((len(pairs) + 1, f"{name} pair {len(pairs) + 1}", pair))
    return errors + pairs


def mos_range_of(source: Any, default: tuple[float, float] = (1.0, 5.0)) -> tuple[float, float]:
    """The MOS scale of ``source``: a dataset's own (``NAME:FOLDER``, or a JSONL manifest whose rows all name one
    dataset, as ``reward/dataset_manifest.py`` writes them), else ``default``."""
    src = check_source(source)
    name: Any = src.name if src is not None else None
    path = Path(str(source)) if src is None and isinstance(source, str | Path) else None
    if path is not None and path.is_file():
        names = set()
        for _, row in iter_jsonl(path):
            names.add(row.get("dataset") if isinstance(row, dict) else None)
            if len(names) > 1:
                break
        name = next(iter(names)) if len(names) == 1 else None
    if not isinstance(name, str):
        return default
    from reward.data.datasets.registry import DATASETS  # a dataset named: its scale, if the registry knows it

    if name in DATASETS:
        low, high = DATASETS.get(name).meta["scale"]
        return float(low), float(high)
    return default
