"""How a dataset is named where a file is accepted, parsed without reading anything:
``NAME:FOLDER[:SPLIT][:DIMENSION]`` (a public dataset, read by :mod:`reward.data.datasets`) and
``hf:NAME_OR_DIR[:SPLIT]`` (a ``datasets`` dataset, :mod:`reward.data.hf`). The output policy and the fingerprints
know an input by it (:mod:`reward.core.outputs`, :mod:`reward.core.fingerprints`); a value naming an existing path is
a path.

Example:
    >>> parse_source("kadid10k:/data/kadid10k:test")
    DatasetSource(name='kadid10k', folder='/data/kadid10k', split='test', dimension=None)
    >>> parse_source("hf:org/ratings:validation")
    DatasetSource(name='hf', folder='org/ratings', split='validation', dimension=None)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reward.core.errors import UserError, close_match

__all__ = ["PREFIX", "SPLITS", "DatasetSource", "parse_hf", "parse_source"]

SPLITS = ("train", "val", "test", "all", "full")
_SOURCE = re.compile(r"^([a-z][a-z0-9-]*):(?!//)(.+)$")  # name:rest, but not a URL (scheme://...)
PREFIX = "hf:"


@dataclass(frozen=True)
class DatasetSource:
    """A dataset by name: its registry name (``hf`` for a ``datasets`` dataset), the folder holding its files (or an
    ``hf:`` dataset's Hub name), the split (``None``: the default) and the one dimension kept (``None``: all)."""

    name: str
    folder: str
    split: str | None = None
    dimension: str | None = None

    def with_default(self, split: str) -> DatasetSource:
        return self if self.split else replace(self, split=split)

    def __str__(self) -> str:
        return f"{self.name}:{self.folder}" + "".join(f":{p}" for p in (self.split, self.dimension) if p)


def parse_source(value: Any) -> DatasetSource | None:
    """The dataset ``value`` names, or ``None`` for a path (or no string at all). The split is checked here, the name
    against the registry when the dataset is read.

    >>> parse_source("spaq:/d:tset")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    reward.core.errors.UserError: spaq:/d:tset: unknown split 'tset'. Did you mean 'test'? ...
    """
    match = _SOURCE.match(value.strip()) if isinstance(value, str) else None
    if not match or Path(value).exists():
        return None
    name, rest = match.groups()
    if name == "hf":  # any split name
        return parse_hf(value.strip())
    head, sep, tail = rest.rpartition(":")
    dimension = None
    if sep and tail not in SPLITS and ":" in head and head.rpartition(":")[2] in SPLITS:  # ...:SPLIT:DIMENSION
        dimension, (head, sep, tail) = tail, head.rpartition(":")
    if sep and tail in SPLITS:
        return DatasetSource(name, head, "all" if tail == "full" else tail, dimension)
    if sep and tail and "/" not in tail and "\\" not in tail:
        raise UserError(
            f"{value}: unknown split {tail!r}.{close_match(tail, SPLITS)} Use {', '.join(SPLITS[:3])} or all."
        )
    return DatasetSource(name, rest)


def parse_hf(value: Any) -> DatasetSource | None:
    """The ``hf:`` source written in ``value`` (``hf:NAME_OR_DIR[:SPLIT]``, any split name), or ``None`` for anything
    else.

    >>> str(parse_hf("hf:org/ratings")), parse_hf("hf:org/ratings:validation").split
    ('hf:org/ratings', 'validation')
    """
    if not isinstance(value, str) or not value.startswith(PREFIX) or Path(value).exists():
        return None
    rest = value[len(PREFIX) :]
    head, sep, tail = rest.rpartition(":")
    if sep and head and tail and "/" not in tail and "\\" not in tail and not Path(rest).exists():
        return DatasetSource("hf", head, tail)
    return DatasetSource("hf", rest)
