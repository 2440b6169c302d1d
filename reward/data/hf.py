"""``hf:NAME_OR_DIR[:SPLIT]``: a Hugging Face ``datasets`` dataset read wherever a ratings manifest is accepted.

``NAME_OR_DIR`` is a folder written by ``save_to_disk`` (a ``Dataset`` or a ``DatasetDict``), a local folder that
``datasets.load_dataset`` reads (parquet, arrow, csv or json files, or a dataset script), or a Hub dataset name
(read from the Hugging Face cache when offline). ``SPLIT`` picks one split; without it the command's default applies
(``train`` for SFT training data, ``test`` for its test data, all splits concatenated for evaluation), and a dataset
with one split uses that one. The columns holding the image, the MOS and the dimension are settings
(:class:`HfColumns`); a dataset without a dimension column is rated on ``quality``, as datasets read by name are.

Example:
    >>> parse_hf("hf:/data/my-ratings:test"), parse_hf("ratings.jsonl")
    (HfSource(name='/data/my-ratings', split='test'), None)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reward.core.errors import MissingInputError
from reward.data.manifest import ManifestError

__all__ = ["DEFAULT_DIMENSION", "PREFIX", "HfColumns", "HfSource", "check_hf", "open_hf", "parse_hf"]

logger = logging.getLogger(__name__)

PREFIX = "hf:"
DEFAULT_DIMENSION = "quality"  # the dimension of a dataset without a dimension column
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


@dataclass(frozen=True)
class HfSource:
    """A ``datasets`` dataset: its folder or Hub name, and the split (``None``: the command's default)."""

    name: str
    split: str | None = None

    def __str__(self) -> str:
        return PREFIX + self.name + (f":{self.split}" if self.split else "")


def parse_hf(value: Any) -> HfSource | None:
    """The ``hf:`` source written in ``value``, or ``None`` for anything else (a path, a dataset by name).

    >>> parse_hf("hf:org/ratings"), parse_hf("hf:org/ratings:validation").split
    (HfSource(name='org/ratings', split=None), 'validation')
    """
    if not isinstance(value, str) or not value.startswith(PREFIX) or Path(value).exists():
        return None
    rest = value[len(PREFIX) :]
    head, sep, tail = rest.rpartition(":")
    if sep and head and tail and "/" not in tail and "\\" not in tail and not Path(rest).exists():
        return HfSource(head, tail)
    return HfSource(rest)


def _is_local(name: str) -> bool:
    return Path(name).expanduser().exists() or name.startswith(("/", ".", "~")) or name.count("/") > 1


def check_hf(source: HfSource) -> HfSource:
    """Fail now (before any model loads) when the source names a folder that does not exist."""
    if _is_local(source.name) and not Path(source.name).expanduser().is_dir():
        raise MissingInputError(
            f"{source}: the folder {source.name} does not exist; give a folder written by datasets' save_to_disk, "
            "a folder of parquet/arrow files, or a Hub dataset name"
        )
    return source


def columns_of(columns: HfColumns | Mapping[str, str] | None) -> HfColumns:
    if columns is None:
        return HfColumns()
    return columns if isinstance(columns, HfColumns) else HfColumns(**dict(columns))


def _read(source: HfSource) -> Any:
    """The ``Dataset`` or ``DatasetDict`` the source names; a folder whose files ``datasets`` cannot parse (a
    malformed JSONL or CSV line, bytes that are not UTF-8, a damaged save_to_disk folder) is refused in one line
    naming the file and line where :func:`_malformed_line` finds it."""
    import datasets
    import pyarrow

    folder = Path(source.name).expanduser()
    try:
        if folder.is_dir() and ((folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()):
            return datasets.load_from_disk(str(folder))
        return datasets.load_dataset(str(folder) if folder.is_dir() else source.name)
    except (FileNotFoundError, ConnectionError, ValueError) as err:
        if folder.is_dir() and not isinstance(err, FileNotFoundError | ConnectionError):
            raise _unparsed(source, folder, err) from None
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise MissingInputError(
            f"{source}: datasets cannot read {source.name} ({first}); give a save_to_disk folder, a folder of "
            "parquet/arrow files, or a Hub dataset name that is downloaded (HF_DATASETS_OFFLINE=1 reads the cache)"
        ) from None
    except (OSError, datasets.exceptions.DatasetsError, pyarrow.ArrowException) as err:
        raise _unparsed(source, folder, err) from None


def _unparsed(source: HfSource, folder: Path, err: BaseException) -> ManifestError:
    """The one-line refusal of files ``datasets`` could not parse: the file and line when found, else its reason."""
    where = _malformed_line(folder) if folder.is_dir() else None
    return ManifestError(
        f"{source}: datasets cannot read {where or f'{source.name} ({_first_cause(err)})'}; fix or remove that "
        "file, or give a save_to_disk folder or a folder of parquet/arrow files"
    )


def _first_cause(err: BaseException) -> str:
    """The innermost reason of a chained error, on one line (``datasets`` wraps the parser's in its own)."""
    while (inner := err.__cause__ or err.__context__) is not None and inner is not err:
        err = inner
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text[:200]}" if text else type(err).__name__


def _malformed_line(folder: Path) -> str | None:
    """``FILE:LINE: what`` of the first line of a JSON Lines or CSV file under ``folder`` that does not parse as
    UTF-8 JSON / a CSV row of the header's width (``None``: none found)."""
    import csv
    import json

    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".csv")):
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as err:
            line = path.read_bytes()[: err.start].count(b"\n") + 1
            return f"{path}:{line}: not UTF-8 text"
        if path.suffix == ".csv":
            try:
                rows = list(csv.reader(text.splitlines()))
            except csv.Error as err:
                return f"{path}: {err}"
            width = len(rows[0]) if rows else 0
            for number, row in enumerate(rows[1:], start=2):
                if row and len(row) != width:
                    return f"{path}:{number}: {len(row)} fields, the header has {width}"
            continue
        lines = text.splitlines() if path.suffix == ".jsonl" else [text]
        for number, line in enumerate(lines, start=1):
            try:
                if line.strip():
                    json.loads(line)
            except json.JSONDecodeError as err:
                return f"{path}:{err.lineno if path.suffix == '.json' else number}: not JSON ({err.msg})"
    return None


def _pick_split(source: HfSource, data: Any, default_split: str) -> tuple[Any, str]:
    import datasets

    if not isinstance(data, datasets.DatasetDict):  # one table: a split named must be the one it was saved from
        own = str(data.split) if getattr(data, "split", None) else None
        if source.split in (None, "all", own):
            return data, source.split or "all"
        has = f"one table, saved from split {own!r}" if own else "one table without splits"
        fix = f"{PREFIX}{source.name}:{own}" if own else f"{PREFIX}{source.name}"
        raise ManifestError(f"{source}: no split {source.split!r}; it has {has}: pass {fix}")
    splits = list(data)
    if source.split == "all" and "all" not in data:
        return datasets.concatenate_datasets([data[s] for s in splits]), "all"
    if source.split is not None:
        if source.split not in data:
            raise ManifestError(f"{source}: no split {source.split!r}; it has {', '.join(splits)}")
        return data[source.split], source.split
    if len(splits) == 1:
        return data[splits[0]], splits[0]
    if default_split == "all":
        return datasets.concatenate_datasets([data[s] for s in splits]), "all"
    for name in _SPLIT_NAMES.get(default_split, (default_split,)):
        if name in data:
            return data[name], name
    raise ManifestError(
        f"{source}: no {default_split!r} split among {', '.join(splits)}; name one, e.g. {source}:{splits[0]}"
    )


def open_hf(
    source: HfSource, columns: HfColumns | Mapping[str, str] | None = None, *, default_split: str = "all"
) -> tuple[Any, Path | None, dict[str, Any]]:
    """The dataset's chosen split with columns ``image``, ``mos`` and ``dimension`` (renamed from ``columns``), the
    folder its image paths are relative to (``None`` for a Hub name), and what the outputs record about it."""
    check_hf(source)
    cols = columns_of(columns)
    ds, split = _pick_split(source, _read(source), default_split)
    present = list(ds.column_names)
    for key in ("image", "mos"):
        name = getattr(cols, key)
        if name not in present:
            raise ManifestError(
                f"{source}: no column {name!r} for the {key} (columns: {', '.join(present)}); name it with "
                f"data_columns.{key}=COLUMN (SFT: data.columns.{key}=COLUMN)"
            )
    wanted = {cols.image: "image", cols.mos: "mos"}
    if cols.dimension in present:
        wanted[cols.dimension] = "dimension"
    ds = ds.select_columns(list(wanted)).rename_columns({k: v for k, v in wanted.items() if k != v})
    if "dimension" not in wanted.values():
        ds = ds.add_column("dimension", [DEFAULT_DIMENSION] * len(ds))
    folder = Path(source.name).expanduser()
    base = folder.resolve() if folder.is_dir() else None
    info = {
        "dataset": str(source),
        "split": split,
        "split_rule": "as stored" if split != "all" else "all splits",
        "scale": None,
        "columns": asdict(cols),
        "images": len(ds),
    }
    logger.info("%s: %d rows (split %s; columns %s)", source, len(ds), split, asdict(cols))
    return ds, base, info
