"""The file formats the datasets are distributed in: CSV (LF or CRLF, quoted commas), whitespace text, Excel
``.xlsx`` (openpyxl), MATLAB ``.mat`` (scipy), with every problem named by file and line.

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
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from reward.core.errors import UserError
from reward.data.manifest import ManifestError

__all__ = ["number", "read_csv", "read_mat", "read_text_rows", "read_xlsx"]


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


def read_csv(path: Path, needed: Sequence[str] = ()) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line, row)`` for each data row of a CSV file with a header (cells as text, header names stripped); the
    line is where the row starts in the file. CRLF line ends and quoted cells with commas are read as written."""
    with path.open("r", encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        header = [h.strip() for h in next(reader, [])]
        _check_columns(path, header, needed)
        start = reader.line_num + 1
        for cells in reader:
            if any(c.strip() for c in cells):
                yield start, dict(zip(header, (c.strip() for c in cells), strict=False))
            start = reader.line_num + 1


def read_text_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """``(line, fields)`` of a whitespace-separated text file (blank lines left out)."""
    with path.open("r", encoding="utf-8-sig", errors="replace") as handle:
        for line, text in enumerate(handle, start=1):
            fields = text.split()
            if fields:
                yield line, fields


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
        for number_, cells in enumerate(rows, start=2):
            if any(c is not None and str(c).strip() for c in cells):
                yield number_, dict(zip(header, cells, strict=False))
    finally:
        book.close()


def read_mat(path: Path, key: str) -> Any:
    """The variable ``key`` of a MATLAB ``.mat`` file (v4 to v7, read by scipy), squeezed to a flat array."""
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
    return data[key]
