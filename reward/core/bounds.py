"""Sizes and counts within bounds: a setting's range lives in its field (``metadata={"range": at_least(1)}``), next to
its help, and is checked with its type, before anything loads.

A size or a count that is zero, negative or absurd (``batch_size=0``, ``n=-1``, ``crops.grid=[1000,1000]``) would
otherwise make a run do nothing and say done, fail deep inside a library with a traceback, or work for hours.
:func:`field_problems` reads the range of every field of a settings dataclass (:func:`reward.core.config.parse`
calls it for every dataclass it parses) and :func:`composed_problems` walks a composed Hydra config (the command line
checks every typed section at once, a group's chosen option included: ``reward.batch_size=0``). Untyped sections
(``trainer.*``, a library's fields) are checked against a table of ranges with :func:`table_problems`. A float
setting is never NaN. Every problem names its key and the range.

Example:
    >>> from dataclasses import dataclass, field
    >>> @dataclass
    ... class S:
    ...     batch_size: int = field(default=8, metadata={"help": "images per call", "range": at_least(1, 4096)})
    ...     temperature: float = field(default=1.0, metadata={"range": above(0)})
    >>> field_problems(S, {"batch_size": 0, "temperature": 0.0})
    ['batch_size=0: must be between 1 and 4096', 'temperature=0.0: must be > 0']
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = [
    "BATCH",
    "COUNT",
    "FRACTION",
    "PIXELS",
    "RETRIES",
    "SIDE",
    "TOKENS",
    "WORKERS",
    "Range",
    "above",
    "at_least",
    "composed_problems",
    "field_problems",
    "range_of",
    "table_problems",
]


class Range(NamedTuple):
    """Allowed values of a number: ``low`` to ``high`` (``None``: open on that side); ``strict``: above ``low``, not
    equal to it. A list value is checked item by item."""

    low: float | None
    high: float | None = None
    strict: bool = False

    def admits(self, value: Any) -> bool:
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            return True  # not a number: the type check speaks
        if math.isnan(value):
            return False
        if self.low is not None and (value <= self.low if self.strict else value < self.low):
            return False
        return self.high is None or value <= self.high

    def describe(self) -> str:
        """The range in words: ``>= 1``, ``> 0``, ``between 1 and 16``."""
        low, high = (_num(v) for v in (self.low, self.high))
        if self.low is None:
            return f"<= {high}" if self.high is not None else "a number"
        if self.high is None:
            return f"{'>' if self.strict else '>='} {low}"
        return f"{'above' if self.strict else 'between'} {low} {'and at most' if self.strict else 'and'} {high}"


def _num(v: float | None) -> str:
    return f"{int(v):_}".replace("_", ",") if v is not None and float(v).is_integer() and abs(v) >= 10_000 else f"{v}"


def at_least(low: float, high: float | None = None) -> Range:
    """``low <= value`` (``<= high`` too when given)."""
    return Range(low, high)


def above(low: float, high: float | None = None) -> Range:
    """``low < value`` (``<= high`` too when given)."""
    return Range(low, high, strict=True)


# ranges many settings share
BATCH = at_least(1, 65_536)  # items per call, per device or per step
WORKERS = at_least(0, 1024)  # worker processes or threads (0: none)
FRACTION = at_least(0, 1)
PIXELS = at_least(1)  # a pixel budget or decode guard
SIDE = at_least(8, 16_384)  # an image side in pixels
COUNT = at_least(1, 10_000_000)  # items to make or read
RETRIES = at_least(0, 100)
TOKENS = at_least(1, 1_000_000)  # tokens to generate


def range_of(f: dataclasses.Field) -> Range | None:
    bounds = f.metadata.get("range") if f.metadata else None
    return Range(*bounds) if bounds is not None else None


def value_problem(key: str, value: Any, bounds: Range | None) -> str | None:
    """The problem of ``value`` (a number or a list of numbers) for ``bounds``, naming ``key``; a NaN float is
    refused without bounds too."""
    items = list(value) if isinstance(value, list | tuple) else [value]
    if bounds is None:
        if any(isinstance(v, float) and math.isnan(v) for v in items):
            return f"{key}={value!r}: not a number; give a finite value"
        return None
    if all(bounds.admits(v) for v in items):
        return None
    each = "each value " if isinstance(value, list | tuple) else ""
    return f"{key}={value!r}: {each}must be {bounds.describe()}"


def field_problems(cls: type, values: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The out-of-range (or NaN) values among ``values``, a mapping of settings dataclass ``cls``'s own fields (a
    nested section is checked by the caller, with its own dataclass)."""
    problems = []
    for f in dataclasses.fields(cls):
        if f.name not in values or isinstance(values[f.name], Mapping):
            continue
        problem = value_problem(f"{prefix}.{f.name}" if prefix else f.name, values[f.name], range_of(f))
        if problem:
            problems.append(problem)
    return problems


def table_problems(values: Mapping[str, Any], table: Mapping[str, Range], where: str) -> list[str]:
    """``values`` of an untyped section (``trainer``) against ``table`` (key -> :class:`Range`); other keys pass."""
    out = []
    for key, value in values.items():
        problem = value_problem(f"{where}.{key}", value, table.get(key))
        if problem:
            out.append(problem)
    return out


def composed_problems(node: Any, prefix: str = "") -> list[str]:
    """Every out-of-range value of a composed config (an OmegaConf node), walking its typed sections (a group's
    chosen option included); ``???`` and interpolations that cannot resolve yet are left to the command."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not isinstance(node, DictConfig):
        return []
    cls = OmegaConf.get_type(node)
    problems = []
    fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    for key in node:
        full = f"{prefix}.{key}" if prefix else str(key)
        if OmegaConf.is_missing(node, key):
            continue
        try:
            child = node[key]
        except OmegaConfBaseException:
            continue
        if isinstance(child, DictConfig):
            problems += composed_problems(child, full)
            continue
        f = fields.get(str(key))
        if f is None:
            continue
        plain = OmegaConf.to_container(child) if OmegaConf.is_config(child) else child
        problem = value_problem(full, plain, range_of(f))
        if problem:
            problems.append(problem)
    return problems
