"""The SA-IQA scorer folder's format: ``sa_iqa.json``, written by ``training/sft.py`` and read by ``reward=sa-iqa``.

This module is the one owner of that file (write, read, version check). It lives in ``reward`` because both sides
use it (``training`` may import ``reward``, not the reverse). A scorer folder holds:

- the model (or a LoRA adapter, with ``base_model`` set) and its processor, written by their libraries;
- ``sa_iqa.json`` (:func:`write_metadata`): ``format`` (``sa-iqa-scorer/1``), the rendered ``queries`` per dimension
  (``question``, ``response_prefix``), ``level_words`` and ``level_values``, and provenance (``prompt_type``, ``tag``,
  ``dimensions`` with their definitions, ``base_model``, ``trained_from``);
- optionally ``fusion_weights.json`` (:mod:`reward.rewards.fusion_weights`, written by ``fusion/fit.py``): with it
  the fused score is SA-IQA eq. 3, without it the plain mean of the dimensions;
- other files written at export (e.g. a model card) sit beside these; the reader ignores them.

Example:
    >>> import tempfile
    >>> meta = {"queries": {"layout": {"question": "Q", "response_prefix": "P"}}, "level_words": ["good", "bad"],
    ...         "level_values": [5.0, 1.0]}
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = write_metadata(d, meta)
    ...     read_metadata(d)["format"]
    'sa-iqa-scorer/1'
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reward.core.errors import MissingInputError, UserError
from reward.data.files import atomic_write_json

__all__ = ["FORMAT", "METADATA", "ScorerFormatError", "read_metadata", "write_metadata"]

METADATA = "sa_iqa.json"
FORMAT_NAME = "sa-iqa-scorer"
VERSION = 1
FORMAT = f"{FORMAT_NAME}/{VERSION}"
REQUIRED = ("queries", "level_words", "level_values")


class ScorerFormatError(UserError):
    """An ``sa_iqa.json`` this toolkit cannot read; the message names the file and the fix."""


def write_metadata(scorer_dir: str | Path, meta: Mapping[str, Any]) -> Path:
    """Write ``scorer_dir/sa_iqa.json`` with the current ``format`` tag (checked as :func:`read_metadata` will)."""
    record = {"format": FORMAT, **{k: v for k, v in meta.items() if k != "format"}}
    _check(record, Path(scorer_dir) / METADATA)
    Path(scorer_dir).mkdir(parents=True, exist_ok=True)
    return atomic_write_json(Path(scorer_dir) / METADATA, record)


def read_metadata(path: str | Path) -> dict[str, Any]:
    """``sa_iqa.json`` of a scorer folder, refused when it is missing, of another format or a newer version, or
    lacks the queries, level words or values."""
    meta_path = Path(path) / METADATA
    if not meta_path.is_file():
        raise MissingInputError(
            f"{path} is not an SA-IQA scorer directory: {METADATA} is missing. Point reward.model at the "
            "scorer/ folder that training/sft.py writes in its out= folder."
        )
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as err:
        raise ScorerFormatError(
            f"{meta_path}: not JSON ({err.msg} at line {err.lineno}); rewrite it with training/sft.py"
        ) from None
    if not isinstance(meta, dict):
        raise ScorerFormatError(f"{meta_path}: not a JSON object; rewrite it with training/sft.py")
    _check(meta, meta_path)
    return meta


def _check(meta: Mapping[str, Any], where: Path) -> None:
    tag = meta.get("format")
    name, _, version = str(tag).partition("/")
    if name != FORMAT_NAME or not version.isdigit():
        raise ScorerFormatError(f"{where}: format {tag!r} is not {FORMAT!r}; rewrite the scorer with training/sft.py")
    if int(version) > VERSION:
        raise ScorerFormatError(
            f"{where}: format {tag!r} is newer than this toolkit reads ({FORMAT!r}); update the toolkit"
        )
    missing = [k for k in REQUIRED if k not in meta]
    if missing:
        raise ScorerFormatError(f"{where}: missing keys {missing}; rewrite it with training/sft.py")
