"""Typed config objects from plain mappings (Hydra nodes included), reporting every problem at once.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class C:
    ...     model: str
    ...     temperature: float = 1.0
    >>> from_mapping(C, {"model": "m"}, where="reward")
    C(model='m', temperature=1.0)
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def to_plain(cfg: Any) -> dict[str, Any]:
    """A Hydra/OmegaConf node or mapping as a plain ``dict`` (interpolations resolved)."""
    if cfg is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return _drop_missing(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False))
    except ImportError:  # pragma: no cover - hydra-core is a dependency
        pass
    if not isinstance(cfg, Mapping):
        raise TypeError(f"expected a mapping of config keys, got {type(cfg).__name__}")
    return dict(cfg)


def _drop_missing(node: Any) -> Any:
    """Hydra's mandatory marker ``???`` removed at every level, so a missing key reads as absent."""
    if isinstance(node, dict):
        return {k: _drop_missing(v) for k, v in node.items() if v != "???"}
    if isinstance(node, list):
        return [_drop_missing(v) for v in node]
    return node


def from_mapping(cls: type[T], cfg: Any, *, where: str, ignore: tuple[str, ...] = ("name",)) -> T:
    """Build dataclass ``cls`` from ``cfg``; unknown keys and missing required keys fail together."""
    values = {k: v for k, v in to_plain(cfg).items() if k not in ignore}
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    problems = []
    for key in values:
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"unknown key {where}.{key}{hint}")
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and values.get(name) is None:
            problems.append(f"missing required key {where}.{name} (set it with {where}.{name}=...)")
    if problems:
        valid = ", ".join(fields)
        raise ValueError(f"invalid {where} config:\n  - " + "\n  - ".join(problems) + f"\nValid keys: {valid}")
    return cls(**{k: v for k, v in values.items() if k in fields})
