"""``hf:NAME_OR_DIR[:SPLIT]``: a Hugging Face ``datasets`` dataset read wherever a ratings manifest is accepted.

``NAME_OR_DIR`` is a ``save_to_disk`` folder (a ``Dataset`` or a ``DatasetDict``), a folder ``datasets.load_dataset``
reads (parquet, arrow, csv or json files) or a Hub dataset name (read from the cache offline). ``SPLIT`` picks one
split; without it the command's default applies (``train`` for SFT training data, ``test`` for its test data, all
splits concatenated for evaluation), and a dataset of one split uses that one. The columns holding the image, the MOS
and the dimension are settings (:class:`HfColumns`); without a dimension column every row is rated on ``quality``.

Example:
    >>> parse_hf("hf:/data/my-ratings:test"), parse_hf("ratings.jsonl")
    (DatasetSource(name='hf', folder='/data/my-ratings', split='test', dimension=None), None)
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reward.core.errors import MissingInputError
from reward.core.sources import PREFIX, DatasetSource, parse_hf
from reward.data.manifest import ManifestError

__all__ = ["HfColumns", "check_hf", "open_hf", "parse_hf"]

logger = logging.getLogger(__name__)

_SPLIT_NAMES = {"val": ("validation", "val", "valid", "dev"), "test": ("test",), "train": ("train",)}


@dataclass
class HfColumns:
    """The columns of an ``hf:`` dataset that hold what a ratings row needs."""

    image: str = field(
        default="image",
        metadata={"help": "images: datasets' Image feature, or paths relative to the dataset's folder"},
    )
    mos: str = field(default="mos", metadata={"help": "the mean opinion score of each row"})
    dimension: str = field(
        default="dimension",
        metadata={"help": 'each row\'s dimension name; a dataset without this column is rated on "quality"'},
    )


def check_hf(source: DatasetSource) -> DatasetSource:
    """Fail now (before any model loads) when the source names a local folder that does not exist."""
    name = source.folder
    local = Path(name).expanduser().exists() or name.startswith(("/", ".", "~")) or name.count("/") > 1
    if local and not Path(name).expanduser().is_dir():
        raise MissingInputError(
            f"{source}: the folder {name} does not exist; give a folder written by datasets' save_to_disk, "
            "a folder of parquet/arrow files, or a Hub dataset name"
        )
    return source


def _read(source: DatasetSource) -> Any:
    """The ``Dataset`` or ``DatasetDict`` the source names; what ``datasets`` cannot read is refused in one line,
    naming the file and line of a local folder's malformed file where :func:`_malformed_line` finds it."""
    import datasets

    folder = Path(source.folder).expanduser()
    try:
        if (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file():
            return datasets.load_from_disk(str(folder))
        return datasets.load_dataset(str(folder) if folder.is_dir() else source.folder)
    except Exception as err:  # noqa: BLE001 - datasets' own errors and its parsers' alike
        while (inner := err.__cause__ or err.__context__) is not None and inner is not err:
            err = inner  # the parser's reason, which datasets wraps in its own
        text = str(err).splitlines()[0][:200] if str(err) else ""
        where = _malformed_line(folder) if folder.is_dir() else None
        error = ManifestError if folder.is_dir() else MissingInputError
        raise error(
            f"{source}: datasets cannot read {where or f'{source.folder} ({type(err).__name__}: {text})'}; give a "
            "save_to_disk folder, a folder of parquet/arrow/json/csv files (fixed where named) or a downloaded Hub "
            "dataset name (HF_DATASETS_OFFLINE=1 reads the cache)"
        ) from None


def _malformed_line(folder: Path) -> str | None:
    """``FILE:LINE: what`` of the first line of a JSON Lines, JSON or CSV file under ``folder`` that is not UTF-8, not
    JSON or not a CSV row of the header's width (``None``: none found)."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".csv")):
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as err:
            line = path.read_bytes()[: err.start].count(b"\n") + 1
            return f"{path}:{line}: not UTF-8 text"
        if path.suffix == ".csv":
            reader = csv.reader(text.splitlines())
            try:
                rows = list(reader)
            except csv.Error as err:
                return f"{path}:{reader.line_num}: not a readable CSV row ({err})"
            for number, row in enumerate(rows[1:], start=2):
                if row and len(row) != len(rows[0]):
                    return f"{path}:{number}: {len(row)} fields, the header has {len(rows[0])}"
            continue
        for number, line in enumerate(text.splitlines() if path.suffix == ".jsonl" else [text], start=1):
            try:
                if line.strip():
                    json.loads(line)
            except json.JSONDecodeError as err:
                return f"{path}:{err.lineno if path.suffix == '.json' else number}: not JSON ({err.msg})"
    return None


def _pick_split(source: DatasetSource, data: Any, default_split: str) -> tuple[Any, str]:
    """The split named (a single table: the one it was saved from), else the command's default."""
    import datasets

    if not isinstance(data, datasets.DatasetDict):
        own = str(data.split) if getattr(data, "split", None) else None
        if source.split in (None, "all", own):
            return data, source.split or "all"
        has = f"one table, saved from split {own!r}" if own else "one table without splits"
        fix = PREFIX + source.folder + (f":{own}" if own else "")
        raise ManifestError(f"{source}: no split {source.split!r}; it has {has}: pass {fix}")
    wanted = source.split or (next(iter(data)) if len(data) == 1 else default_split)
    if wanted == "all" and "all" not in data:
        return _concatenated(source, data), "all"
    for name in (wanted,) if source.split else _SPLIT_NAMES.get(wanted, (wanted,)):
        if name in data:
            return data[name], name
    example = f"{PREFIX}{source.folder}:{next(iter(data))}"
    raise ManifestError(f"{source}: no split {wanted!r}; it has {', '.join(data)}: name one, e.g. {example}")


def _concatenated(source: DatasetSource, data: Any) -> Any:
    """Every split of ``data`` as one table; splits whose columns differ in type (a MOS stored as float in one and as
    string in another) are refused naming the columns and each split's type."""
    import datasets

    columns = dict.fromkeys(c for split in data.values() for c in split.features)
    kinds = {c: {name: _kind(split.features.get(c)) for name, split in data.items()} for c in columns}
    if clash := {c: k for c, k in kinds.items() if len(set(k.values())) > 1}:
        said = "; ".join(f"{c!r}: " + ", ".join(f"{n} {t}" for n, t in k.items()) for c, k in clash.items())
        raise ManifestError(
            f"{source}: its splits disagree on the type of column(s) {said}; name one split ({PREFIX}{source.folder}:"
            f"{next(iter(data))}), or save every split with one type (e.g. Dataset.cast_column)"
        )
    try:
        return datasets.concatenate_datasets(list(data.values()))
    except ValueError as err:  # what else datasets cannot align
        raise ManifestError(f"{source}: its splits cannot be read as one table ({err}); name one split") from None


def _kind(feature: Any) -> str:
    """A column's type as said to users: ``float64``, ``string``, ``Image``; ``absent``."""
    return "absent" if feature is None else str(getattr(feature, "dtype", None) or type(feature).__name__)


def open_hf(
    source: DatasetSource, columns: HfColumns | Mapping[str, str] | None = None, *, default_split: str = "all"
) -> tuple[Any, Path | None, dict[str, Any]]:
    """The dataset's chosen split with columns ``image``, ``mos`` and ``dimension`` (renamed from ``columns``), the
    folder its image paths are relative to (``None`` for a Hub name), and what the outputs record about it."""
    check_hf(source)
    cols = columns if isinstance(columns, HfColumns) else HfColumns(**dict(columns or {}))
    ds, split = _pick_split(source, _read(source), default_split)
    for key in ("image", "mos"):
        if getattr(cols, key) not in ds.column_names:
            raise ManifestError(
                f"{source}: no column {getattr(cols, key)!r} for the {key} (columns: {', '.join(ds.column_names)}); "
                f"name it with data_columns.{key}=COLUMN (SFT: data.columns.{key}=COLUMN)"
            )
    wanted = {cols.image: "image", cols.mos: "mos"}
    if cols.dimension in ds.column_names:
        wanted[cols.dimension] = "dimension"
    ds = ds.select_columns(list(wanted)).rename_columns({k: v for k, v in wanted.items() if k != v})
    if "dimension" not in ds.column_names:
        ds = ds.add_column("dimension", ["quality"] * len(ds))
    folder = Path(source.folder).expanduser()
    info = {
        "dataset": str(source),
        "split": split,
        "split_rule": "as stored" if split != "all" else "all splits",
        "scale": None,
        "columns": asdict(cols),
        "images": len(ds),
    }
    logger.info("%s: %d rows (split %s; columns %s)", source, len(ds), split, asdict(cols))
    return ds, folder.resolve() if folder.is_dir() else None, info
