"""``NAME:FOLDER[:SPLIT]``: a public IQA dataset named where a manifest path is accepted.

``kadid10k:/data/kadid10k:test`` reads KADID-10k's own files from ``/data/kadid10k`` and keeps its test split;
without ``:SPLIT`` the command's default applies (``train`` for ``data.train``, ``test`` for ``data.test``, ``all``
for evaluation). A value that names an existing file or folder is always a path, even with a colon in it.

Example:
    >>> parse_source("kadid10k:/data/kadid10k:test")
    DatasetSource(name='kadid10k', folder='/data/kadid10k', split='test')
    >>> parse_source("kadid10k:/data/kadid10k").with_default("train").split
    'train'
    >>> parse_source("runs/ratings.jsonl") is None
    True
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reward.core.errors import ConfigError
from reward.core.registry import close_match

__all__ = ["SPLITS", "DatasetSource", "is_source", "parse_source"]

SPLITS = ("train", "val", "test", "all")
_SOURCE = re.compile(r"^([a-z][a-z0-9]*):(?!//)(.+)$")  # name:rest, but not a URL (scheme://...)


@dataclass(frozen=True)
class DatasetSource:
    """A dataset by name: its registry name, the folder holding its files, and the split (``None``: the default)."""

    name: str
    folder: str
    split: str | None = None

    def with_default(self, split: str) -> DatasetSource:
        """This source with ``split`` when it names none."""
        return self if self.split else replace(self, split=split)

    def __str__(self) -> str:
        return f"{self.name}:{self.folder}" + (f":{self.split}" if self.split else "")


def parse_source(value: Any) -> DatasetSource | None:
    """The dataset source written in ``value``, or ``None`` when ``value`` is a path (or no string at all).

    A string ``NAME:FOLDER[:SPLIT]`` whose NAME is lower-case letters and digits is a dataset source unless it names
    an existing file or folder; the name is checked against the registry by the reader (an unknown name lists the
    known ones), the split here.

    >>> parse_source("spaq:/d:tset")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    reward.core.errors.ConfigError: spaq:/d:tset: unknown split 'tset'. Did you mean 'test'? ...
    """
    if not isinstance(value, str):
        return None
    match = _SOURCE.match(value.strip())
    if not match or Path(value).exists():
        return None
    name, rest = match.groups()
    head, sep, tail = rest.rpartition(":")
    if name == "hf":  # hf:NAME_OR_DIR[:SPLIT], a datasets dataset (reward.data.hf): any split name
        from reward.data.hf import parse_hf

        hf = parse_hf(value.strip())
        return DatasetSource(name, hf.name, hf.split) if hf else None
    if sep and tail in SPLITS:
        return DatasetSource(name, head, tail)
    if sep and tail and "/" not in tail and "\\" not in tail:
        raise ConfigError(
            f"{value}: unknown split {tail!r}.{close_match(tail, SPLITS)} Use {', '.join(SPLITS[:-1])} or all."
        )
    return DatasetSource(name, rest, None)


def is_source(value: Any) -> bool:
    """Whether ``value`` names a dataset (``NAME:FOLDER[:SPLIT]``) rather than a path."""
    return parse_source(value) is not None
