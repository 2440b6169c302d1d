"""A dataset's files below its folder: where the official archive puts them, else anywhere by file name.

Names match in any case (TID2013 mixes ``I01_01_1.bmp`` and ``i01_01_2.bmp``), an exact-case match winning. When one
name is in several folders (LIVE's ``img1.bmp`` in every distortion folder) the file whose path ends like the
metadata's wins; if that does not decide, the image is ambiguous (a ``LookupError`` naming the files), never guessed.

Example:
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> for rel in ("jp2k/img1.bmp", "jpeg/img1.bmp", "deep/down/I01_01_1.BMP"):
    ...     (root / rel).parent.mkdir(parents=True, exist_ok=True)
    ...     (root / rel).touch()
    >>> finder = Finder(root)
    >>> finder.image("i01_01_1.bmp"), finder.image("LIVE/jpeg/img1.bmp"), finder.image("none.png")
    ('deep/down/I01_01_1.BMP', 'jpeg/img1.bmp', None)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path

__all__ = ["Finder"]


def _suffix_match(candidate: str, hint: str) -> int:
    """How many trailing path components ``candidate`` shares with ``hint`` (case-insensitive)."""
    a, b = candidate.lower().split("/"), hint.lower().split("/")
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


class Finder:
    """Files below ``folder``; the tree is walked once, on the first lookup that needs it."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder).resolve()

    @cached_property
    def index(self) -> dict[str, list[str]]:
        """Lower-case file name -> every relative path (posix) with that name, hidden folders left out."""
        index: dict[str, list[str]] = {}
        for top, dirs, files in os.walk(self.folder):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            rel_top = Path(top).relative_to(self.folder).as_posix()
            for name in files:
                index.setdefault(name.lower(), []).append(name if rel_top == "." else f"{rel_top}/{name}")
        return index

    def file(self, names: Iterable[str]) -> Path | None:
        """The first of ``names`` (relative paths) that is a file, else the shallowest file below the folder with one
        of their base names; ``None`` when there is none."""
        names = list(names)
        for rel in names:
            if (self.folder / rel).is_file():
                return self.folder / rel
        found = [p for rel in names for p in self.index.get(Path(rel).name.lower(), [])]
        return self.folder / min(found, key=lambda p: (p.count("/"), p)) if found else None

    def image(self, hint: str, folders: Sequence[str] = ()) -> str | None:
        """The image's path relative to the folder: ``hint`` itself, its name in one of ``folders``, or a file of that
        name anywhere below; ``None`` when there is none, a ``LookupError`` when several could be it."""
        hint = hint.replace("\\", "/").lstrip("/")
        name = hint.rsplit("/", 1)[-1]
        for rel in (hint, *(f"{d}/{name}" for d in folders)):
            if (self.folder / rel).is_file():
                return rel
        found = self.index.get(name.lower(), [])
        if len(found) <= 1:
            return found[0] if found else None
        best = max(_suffix_match(c, hint) for c in found)
        chosen = [c for c in found if _suffix_match(c, hint) == best]
        if len(chosen) > 1:
            chosen = [c for c in chosen if c.endswith(name)] or chosen  # the exact case wins
        if len(chosen) > 1:
            raise LookupError(f"{len(chosen)} files could be {hint!r}: {', '.join(chosen[:4])}")
        return chosen[0]
