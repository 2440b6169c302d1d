"""``--help`` and ``--cfg``: a composed config printed with each key's one-line help, read from its settings
dataclass's field (``field(default=..., metadata={"help": "..."})``, as trl's configs), the single home of the help:
nothing is repeated. A dict-valued field (``trainer``) gives its entries' help in ``metadata["entries"]``.

Example:
    >>> from omegaconf import OmegaConf
    >>> from reward.commands.evaluate import EvaluateSettings
    >>> print(next(ln for ln in annotated(OmegaConf.structured(EvaluateSettings)) if ln.startswith("batch_size")))
    batch_size: 16  # images per reward call
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


def help_of(cls: Any) -> dict[str, str]:
    """Field name -> help of settings dataclass ``cls`` (its own fields and its bases'); ``{}`` for anything else."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        return {}
    return {f.name: f.metadata["help"] for f in dataclasses.fields(cls) if f.metadata.get("help")}


def entries_help(cls: Any, key: str) -> dict[str, str]:
    """Entry -> help of the dict-valued field ``key`` of settings dataclass ``cls`` (``metadata["entries"]``)."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        return {}
    entries: Mapping[str, str] = next(
        (f.metadata.get("entries", {}) for f in dataclasses.fields(cls) if f.name == key), {}
    )
    return dict(entries)


def annotated(node: Any, indent: int = 0, helps: dict[str, str] | None = None) -> list[str]:
    """``node`` (a composed config) as YAML lines, each key followed by its help where it has one."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    cls = OmegaConf.get_type(node)
    own = helps if helps is not None else help_of(cls)
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
            typed = dataclasses.is_dataclass(OmegaConf.get_type(child))
            lines += annotated(child, indent + 2, None if typed else entries_help(cls, str(key)))
        elif isinstance(child, ListConfig):
            lines.append(f"{pad}{key}: [{', '.join(str(v) for v in OmegaConf.to_container(child))}]{note}")
        else:
            value = OmegaConf.to_yaml({key: child}).strip().replace("\n", " ")
            lines.append(f"{pad}{value}{note}")
    return lines


def rows(
    node: Any, prefix: str = "", helps: dict[str, str] | None = None, groups: Any = ()
) -> list[tuple[str, str, str]]:
    """``node`` (a composed config) as ``(dotted key, value, help)`` rows, the reference tables of the docs: nested
    sections flattened, a required key's value ``???``, and each config group in ``groups`` (``reward``,
    ``generator``: its keys depend on the option chosen) one row whose value is the option's name.

    >>> from omegaconf import OmegaConf
    >>> from reward.commands.evaluate import EvaluateSettings
    >>> table = rows(OmegaConf.structured(EvaluateSettings), groups=("reward",))
    >>> [row[:2] for row in table if row[0] in ("data_columns.mos", "out")]
    [('data_columns.mos', 'mos'), ('out', '???')]
    """
    from omegaconf import DictConfig, ListConfig, OmegaConf

    cls = OmegaConf.get_type(node)
    own = helps if helps is not None else help_of(cls)
    out = []
    for key in node:
        name, note = f"{prefix}{key}", own.get(key, "")
        if OmegaConf.is_missing(node, key):
            out.append((name, "???", note))
            continue
        child = node[key]
        if key in groups and isinstance(child, DictConfig):
            out.append((name, str(child.get("name", "")), note))
        elif isinstance(child, DictConfig) and len(child):
            typed = dataclasses.is_dataclass(OmegaConf.get_type(child))
            out += rows(child, f"{name}.", None if typed else entries_help(cls, str(key)))
        elif isinstance(child, ListConfig):
            out.append((name, f"[{', '.join(str(v) for v in OmegaConf.to_container(child))}]", note))
        else:
            out.append((name, OmegaConf.to_yaml({key: child}).strip().split(":", 1)[1].strip(), note))
    return out


def markdown(table: list[tuple[str, str, str]]) -> str:
    """:func:`rows` as a markdown table: key and default in code, ``|`` escaped.

    >>> print(markdown([("out", "???", "output folder"), ("data_columns.mos", "mos", "a | b")]))
    | key | default | what it sets |
    | --- | --- | --- |
    | `out` | `???` (required) | output folder |
    | `data_columns.mos` | `mos` | a \\| b |
    """

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| key | default | what it sets |", "| --- | --- | --- |"]
    for key, value, note in table:
        shown = "`???` (required)" if value == "???" else (f"`{cell(value)}`" if value else "")
        lines.append(f"| `{key}` | {shown} | {cell(note)} |")
    return "\n".join(lines)
