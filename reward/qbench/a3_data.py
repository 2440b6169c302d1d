"""Q-Bench A3's released IQA files: a JSON list of ``{"img_path": "<file name>", "gt_score": "3.83"}``.

As released in ``Q-Future/Q-Bench`` (``a3_iqa_databases/jsons/*.json``): ``gt_score`` is a string in most files
(``"2.82 "`` with a trailing space in ``cgi.json``) and a number in others; Q-Align's test files name the image
``image`` instead of ``img_path``. Both are read. The images sit in each dataset's own folder, not beside the JSON:
an image is read relative to the JSON's folder, else found by its file name anywhere below that folder (put the JSON
in, or above, the dataset's image folder). ``livec.json`` keeps LIVE Challenge's 7 training images (1169 rows), as
released. Each row is rated on the dimension ``quality`` (the MOS, as for a dataset read by name).

Example:
    >>> a3_row({"img_path": "10004473376.jpg", "gt_score": "3.83 "}, "koniq.json:2")
    {'image': '10004473376.jpg', 'dimension': 'quality', 'mos': 3.83}
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from reward.core.errors import MissingInputError
from reward.data import ManifestResult, RatingRow, SkippedRow
from reward.data.datasets.finder import Finder
from reward.data.datasets.formats import number
from reward.data.manifest import ManifestError, resolve_image_path
from reward.qbench.a1_questions import json_list_items

__all__ = ["A3_EXAMPLE", "a3_row", "is_a3_json", "load_a3_json"]

logger = logging.getLogger(__name__)

A3_EXAMPLE = '[{"img_path": "00001.jpg", "gt_score": "48.86"}, ...]'


def is_a3_json(path: Any) -> bool:
    """Whether ``path`` is a ``.json`` file (a JSON list, as A3's are; manifests are ``.jsonl``)."""
    return isinstance(path, str | Path) and str(path).lower().endswith(".json") and Path(path).is_file()


def a3_row(item: dict, where: str) -> dict[str, Any]:
    """An A3 row as a ratings-manifest row: ``image``, the dimension ``quality`` and ``mos`` as a number."""
    image = item.get("img_path", item.get("image"))
    if not isinstance(image, str) or not image.strip():
        raise ManifestError(f"{where}: no 'img_path' (or 'image'); rows look like {A3_EXAMPLE}.")
    return {"image": image.strip(), "dimension": "quality", "mos": number(item.get("gt_score"), where, "'gt_score'")}


def _image(folder: Path, finder: Finder, rel: str, where: str) -> tuple[Path, str]:
    """The image's path and its name relative to ``folder`` (as written, else found by its file name below it)."""
    resolve_image_path(folder, rel, where=where)  # no absolute path, no climbing out
    try:
        found = finder.image(rel)
    except LookupError as err:
        raise ManifestError(f"{where}: {err}; keep one copy below {folder}") from None
    if found is None:
        raise ManifestError(
            f"{where}: image {rel!r} not found at {folder / rel} nor by its file name anywhere below {folder}; put "
            "the JSON in (or above) the dataset's image folder, or pass skip_bad=true to skip and count such rows"
        )
    return folder / found, Path(os.path.normpath(found)).as_posix()


def load_a3_json(path: str | Path, *, skip_bad: bool = False) -> ManifestResult[RatingRow]:
    """The rows of an A3 JSON file (see the module docstring); a bad row fails naming ``file:line``, or with
    ``skip_bad`` is skipped and counted. Images are found (not decoded) now."""
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(f"A3 file {str(path)!r} does not exist; pass a Q-Bench A3 JSON list like {A3_EXAMPLE}")
    folder = path.resolve().parent
    finder = Finder(folder)
    rows: list[RatingRow] = []
    skipped: list[SkippedRow] = []
    for line, item in json_list_items(path):
        where = f"{path}:{line}"
        try:
            if isinstance(item, ManifestError):
                raise item
            row = a3_row(item, where)
            image, key = _image(folder, finder, row["image"], where)
            rows.append(RatingRow(image, "quality", row["mos"], line, where=where, key=key))
        except ManifestError as err:
            if not skip_bad:
                raise
            logger.warning("skipping bad row: %s", err)
            skipped.append(SkippedRow(line, str(err)))
    if not rows:
        first = f"; first problem: {skipped[0].reason}" if skipped else ""
        raise ManifestError(f"{path}: no usable row{first}")
    if skipped:
        logger.warning("%s: skipped %d of %d rows (skip_bad=true)", path, len(skipped), len(rows) + len(skipped))
    return ManifestResult(rows, skipped, str(path), {"format": "Q-Bench A3 JSON", "file": str(path)})
