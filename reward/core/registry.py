"""One small registry for every pluggable family (rewards, generators, datasets): names, metadata, suggestions.

A :class:`Registry` maps kebab-case names to an :class:`Entry`: a target (an object, or ``"package.module:attr"``
imported on first use) and metadata that callers read instead of checking names. An unknown name fails with the
close match and the known names; the registry is the only source of that list.

Example:
    >>> colours = Registry("colour", required=("rgb",))
    >>> _ = colours.register("deep-red", "builtins:dict", rgb=(139, 0, 0))
    >>> colours.get("deep-red").meta["rgb"]
    (139, 0, 0)
    >>> colours.get("dep-red")
    Traceback (most recent call last):
    ...
    reward.core.errors.UserError: unknown colour 'dep-red'. Did you mean 'deep-red'? Known colours: deep-red.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from reward.core.errors import UserError, close_match


def import_path(path: str, *, what: str = "object") -> Any:
    """The object at ``"package.module:attr"`` (``attr`` may be dotted); a bad path is one clear error."""
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise UserError(f"{what} {path!r} must look like 'package.module:function'")
    try:
        return pkgutil.resolve_name(path)
    except ImportError as exc:
        raise UserError(f"cannot import {what} module {module!r} ({exc})") from exc
    except AttributeError:
        raise UserError(f"{what} {path!r}: {module} has no attribute {attr!r}") from None


@dataclass(frozen=True)
class Entry:
    """A registered name: its target (object or import path) and metadata."""

    name: str
    target: Any
    meta: dict[str, Any] = field(default_factory=dict)

    def load(self) -> Any:
        """The target object (imported on first use when given as a path)."""
        return import_path(self.target, what=f"{self.name!r} target") if isinstance(self.target, str) else self.target


class Registry:
    """Names of one pluggable family with required metadata (``kind``: the family's name in messages).
    ``discover``: called once, when the names are first read, to register what other packages declare (their entry
    points), so that nothing of theirs is imported before it is needed."""

    def __init__(self, kind: str, *, required: Sequence[str] = (), discover: Callable[[], None] | None = None) -> None:
        self.kind, self.required, self._discover = kind, tuple(required), discover
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, target: Any, **meta: Any) -> Entry:
        """Add ``name`` (kebab-case) with its target and metadata; every ``required`` key must be given."""
        if not name or name != name.lower() or "_" in name or " " in name:
            raise ValueError(f"{self.kind} name {name!r} must be kebab-case (lower case, words joined by '-')")
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        if missing := [k for k in self.required if meta.get(k) is None]:
            raise ValueError(f"{self.kind} {name!r}: metadata {missing} is required at registration")
        self._entries[name] = Entry(name, target, dict(meta))
        return self._entries[name]

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests that register a temporary entry)."""
        del self._entries[self.get(name).name]

    def names(self) -> list[str]:
        """The registered names, sorted (the other packages' discovered first)."""
        if self._discover is not None:
            discover, self._discover = self._discover, None
            discover()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def get(self, name: str, hint: str = "") -> Entry:
        """The entry of ``name``; an unknown one fails with the close match, the known names and ``hint``."""
        if name in self.names():
            return self._entries[name]
        names = self.names()
        raise UserError(
            f"unknown {self.kind} {name!r}.{close_match(name, names)} Known {self.kind}s: {', '.join(names)}.{hint}"
        )
