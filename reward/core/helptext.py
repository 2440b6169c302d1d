"""``--help`` and ``--cfg``: a composed config printed with each key's one-line comment, read from the source line of
its settings dataclass (``key: type = default  # comment``), the single home of the comments: nothing is repeated.

Example:
    >>> from omegaconf import OmegaConf
    >>> from reward.commands.evaluate import EvaluateSettings
    >>> print(next(ln for ln in annotated(OmegaConf.structured(EvaluateSettings)) if ln.startswith("batch_size")))
    batch_size: 16  # images per reward call
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
from typing import Any

FIELD_LINE = re.compile(r"^\s+(\w+)\s*:[^#]*?#\s?(.*)$")  # name: type = default  # comment
DICT_LINE = re.compile(r"^\s+[\"'](\w+)[\"']\s*:[^#]*?#\s?(.*)$")  # "name": value,  # comment (a default dict)
MORE_LINE = re.compile(r"^\s+#\s?(.*)$")  # the comment continued on the next line


@functools.cache
def comments_of(cls: type) -> dict[str, str]:
    """Field name -> comment of settings dataclass ``cls`` (its own and its bases'), from the source lines."""
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            comments.update(_source_comments(klass, FIELD_LINE))
    return comments


def _source_comments(obj: Any, pattern: re.Pattern[str]) -> dict[str, str]:
    try:
        lines = inspect.getsource(obj).splitlines()
    except (OSError, TypeError):
        return {}
    found: dict[str, str] = {}
    last = None
    for line in lines:
        m = pattern.match(line)
        if m:
            last = m.group(1)
            found[last] = m.group(2).strip()
        elif last and (more := MORE_LINE.match(line)) and not line.lstrip().startswith("# noqa"):
            found[last] += " " + more.group(1).strip()
        else:
            last = None
    return found


def _default_dict_comments(cls: type | None, key: str) -> dict[str, str]:
    """Comments of a dict field's entries, from the source of its default factory (e.g. ``trainer``'s)."""
    if cls is None or not dataclasses.is_dataclass(cls):
        return {}
    for f in dataclasses.fields(cls):
        if f.name == key and f.default_factory is not dataclasses.MISSING:
            return _source_comments(f.default_factory, DICT_LINE)
    return {}


def annotated(node: Any, indent: int = 0, comments: dict[str, str] | None = None) -> list[str]:
    """``node`` (a composed config) as YAML lines, each key followed by its comment where it has one."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    cls = OmegaConf.get_type(node)
    own = comments if comments is not None else (comments_of(cls) if dataclasses.is_dataclass(cls) else {})
    pad = " " * indent
    lines = []
    for key in node:
        note = f"  # {own[key]}" if own.get(key) else ""
        if OmegaConf.is_missing(node, key):
            lines.append(f"{pad}{key}: ???{note}")
            continue
        child = node[key]
        if isinstance(child, DictConfig) and len(child):
            lines.append(f"{pad}{key}:{note}")
            entries = None if dataclasses.is_dataclass(OmegaConf.get_type(child)) else _default_dict_comments(cls, key)
            lines += annotated(child, indent + 2, entries)
        elif isinstance(child, ListConfig):
            lines.append(f"{pad}{key}: [{', '.join(str(v) for v in OmegaConf.to_container(child))}]{note}")
        else:
            value = OmegaConf.to_yaml({key: child}).strip().replace("\n", " ")
            lines.append(f"{pad}{value}{note}")
    return lines
