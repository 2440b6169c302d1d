"""What a dataset reader returns: one :class:`Record` per scored image, as the dataset's own files state it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from reward.data.manifest import ManifestError

__all__ = ["Record", "Table", "collect"]


@dataclass
class Record:
    """One scored image of a dataset.

    ``image`` is the image as the metadata names it (a file name, or a path below the dataset folder); ``scores``
    maps each dimension to its value on the dataset's scale and in its direction (a DMOS is flipped later, by the
    loader, never here); ``line`` is where the image is in the metadata file (``entry`` of a ``.mat`` file).
    """

    image: str
    scores: dict[str, float]
    line: int = 0
    group: str | None = None  # what may not straddle two splits: the reference image, the prompt
    split: str | None = None  # the official split (train / val / test), when the dataset has one
    std: dict[str, float] = field(default_factory=dict)  # each dimension's std of the ratings, in its units
    distribution: list[float] | None = None  # the annotators' votes on the scale's levels, worst first, summing to 1
    extra: dict[str, Any] = field(default_factory=dict)  # kept in the rows: prompt, distortion, vote count, ...
    where: str = ""  # "file:line" of the record, for messages (set by :func:`collect`)


@dataclass
class Table:
    """Everything a reader found: the records, the rows it could not read, the file it read, how it split."""

    records: list[Record]
    file: str  # the metadata file read (its path), named in messages and recorded in the outputs
    errors: list[tuple[int, ManifestError]] = field(default_factory=list)
    split_rule: str | None = None  # how the official split was read (None: no official split, a seeded one is used)


def collect(file: str, items: Iterable[tuple[int, Any]], parse: Callable[[Any, str], Record | None]) -> Table:
    """A :class:`Table` of ``parse(row, "file:line")`` over ``items`` (``(line, row)``): a row that raises a
    ``ManifestError`` is kept as an error (the loader fails or skips it), one that gives ``None`` is left out."""
    records: list[Record] = []
    errors: list[tuple[int, ManifestError]] = []
    for line, row in items:
        try:
            record = parse(row, f"{file}:{line}")
        except ManifestError as err:
            errors.append((line, err))
            continue
        if record is not None:
            record.line, record.where = line, f"{file}:{line}"
            records.append(record)
    return Table(records, file, errors)
