"""One small registry for every pluggable family (rewards, generators, datasets): names, metadata, suggestions.

A :class:`Registry` maps kebab-case names to an :class:`Entry`: a target (an object, or ``"package.module:attr"``
imported on first use) and metadata that callers read instead of checking names. Unknown names fail with the
close match and the list of known names; the registry is the only source of that list.

Example:
    >>> colours = Registry("colour", required=("rgb",))
    >>> _ = colours.register("deep-red", "builtins:dict", rgb=(139, 0, 0))
    >>> colours.get("deep-red").meta["rgb"]
    (139, 0, 0)
    >>> colours.get("dep-red")
    Traceback (most recent call last):
    ...
    reward.core.registry.UnknownNameError: unknown colour 'dep-red'. Did you mean 'deep-red'? Known colours: deep-red.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from reward.core.errors import UserError


class UnknownNameError(UserError, KeyError):
    """A name that is not registered (the message lists the close match and the known names)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def close_match(name: str, choices: Sequence[str], fmt: str = " Did you mean {!r}?") -> str:
    """``fmt`` filled with the closest of ``choices`` to ``name``, or ``""`` when none is close.

    >>> close_match("temprature", ["temperature", "model"])
    " Did you mean 'temperature'?"
    """
    found = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.5)
    return fmt.format(found[0]) if found else ""


def import_path(path: str, *, what: str = "object") -> Any:
    """The object at ``"package.module:attr"`` (``attr`` may be dotted); clear errors for bad paths."""
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise UserError(f"{what} {path!r} must look like 'package.module:function'")
    try:
        obj = importlib.import_module(module)
    except ImportError as exc:
        raise UserError(f"cannot import {what} module {module!r} ({exc})") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UserError(f"{what} {path!r}: {module} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


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
    """Names of one pluggable family with required metadata (``kind`` is the family's name in messages).

    ``discover``: called once, when the names are first read (looked up, listed, iterated), to register entries that
    other packages declare (their entry points): nothing of theirs is imported before it is needed.
    """

    def __init__(
        self,
        kind: str,
        *,
        required: Sequence[str] = (),
        plural: str | None = None,
        discover: Callable[[], None] | None = None,
    ) -> None:
        self.kind = kind
        self.plural = plural or f"{kind}s"
        self.required = tuple(required)
        self._entries: dict[str, Entry] = {}
        self._discover = discover

    def _discovered(self) -> dict[str, Entry]:
        """The entries, after the one call of ``discover`` (registering from inside it reads no further)."""
        if self._discover is not None:
            discover, self._discover = self._discover, None
            discover()
        return self._entries

    def register(self, name: str, target: Any, **meta: Any) -> Entry:
        """Add ``name`` (kebab-case) with its target and metadata; every ``required`` key must be given."""
        if not name or name != name.lower() or "_" in name or " " in name:
            raise ValueError(f"{self.kind} name {name!r} must be kebab-case (lower case, words joined by '-')")
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        missing = [k for k in self.required if meta.get(k) is None]
        if missing:
            raise ValueError(f"{self.kind} {name!r}: metadata {missing} is required at registration")
        entry = Entry(name, target, dict(meta))
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests that register a temporary entry)."""
        self.get(name)
        del self._entries[name]

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._discovered())

    def __contains__(self, name: object) -> bool:
        return name in self._discovered()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: str) -> Entry:
        """The entry of ``name``; unknown names fail with the close match and the known names."""
        if name in self._discovered():
            return self._entries[name]
        raise UnknownNameError(self.unknown_message(name))

    def unknown_message(self, name: str) -> str:
        return (
            f"unknown {self.kind} {name!r}.{close_match(name, self.names())} "
            f"Known {self.plural}: {', '.join(self.names())}."
        )
