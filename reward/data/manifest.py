"""JSONL manifests read line by line, image paths resolved safely, and the two settings every reader of images takes.

Image paths in a data file are relative to its folder (or to the ``image_root`` a command is given), never climb out
of it with ``..``, and are absolute only with ``allow_absolute_paths=true``; symlinks are followed for reading.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import field
from pathlib import Path
from typing import Any

from reward.core.errors import MissingInputError, UserError

IMAGE_ROOT_HELP = (
    "folder the data files' relative image paths are read from (a shared or read-only mount); null: each file's "
    "own folder"
)
ALLOW_ABSOLUTE_HELP = "data files may name images by absolute path (refused by default)"


class ManifestError(UserError):
    """A manifest (or one of its rows) is malformed; the message names the file, the line and the fix."""


def parse_json(text: str | bytes, *, allow_nan: bool = True) -> Any:
    """``json.loads`` for text from outside (files, request bodies, servers' answers), every way it is not usable JSON
    a ``ValueError``: nesting deeper than the interpreter's recursion limit (``json`` raises ``RecursionError``) and,
    unless ``allow_nan``, ``NaN`` / ``Infinity``, which strict JSON has not.

    >>> parse_json('{"a": [1]}'), parse_json("[NaN]")
    ({'a': [1]}, [nan])
    >>> parse_json("[" * 100_000 + "]" * 100_000)
    Traceback (most recent call last):
    ValueError: nested too deeply
    >>> parse_json('{"pair": Infinity}', allow_nan=False)
    Traceback (most recent call last):
    ValueError: Infinity is not a JSON number
    """

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    try:
        return json.loads(text, parse_constant=None if allow_nan else refuse)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict | ManifestError]]:
    """``(line, row)`` for each non-blank line (from 1); a bad line gives ``(line, ManifestError)`` and reading goes
    on. A missing file raises ``FileNotFoundError``."""
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(
            f"Manifest {str(path)!r} does not exist or is not a file; pass the path of a JSONL manifest "
            "(one JSON object per line)."
        )
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            where = f"{path}:{number}"
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8").strip()
                if not text:
                    continue
                row = parse_json(text)
            except UnicodeDecodeError as err:
                row = ManifestError(
                    f"{where}: not UTF-8 text (byte {raw[err.start : err.start + 1]!r} at column {err.start + 1}); "
                    "save the manifest as UTF-8."
                )
            except json.JSONDecodeError as err:
                row = ManifestError(
                    f"{where}: invalid JSON ({err.msg} at column {err.colno}); each line must be one complete JSON "
                    'object such as {"image": "img.png", "dimension": "overall", "mos": 3.5}.'
                )
            except ValueError as err:  # nested too deeply
                row = ManifestError(
                    f"{where}: invalid JSON ({err}); write each row as one JSON object on its own line."
                )
            if not isinstance(row, dict | ManifestError):
                row = ManifestError(
                    f"{where}: expected a JSON object, got {type(row).__name__}; write each row as "
                    '{"key": value, ...} on its own line.'
                )
            yield number, row


def image_root_field() -> Any:
    """The ``image_root`` setting, the same in every command that reads a data file naming images."""
    return field(default=None, metadata={"help": IMAGE_ROOT_HELP})


def allow_absolute_paths_field() -> Any:
    """The ``allow_absolute_paths`` setting, the same in every command that reads a data file naming images."""
    return field(default=False, metadata={"help": ALLOW_ABSOLUTE_HELP})


def image_paths(settings: Any) -> dict[str, Any]:
    """A command's ``image_root`` and ``allow_absolute_paths`` as the keywords of the readers (``load_ratings``...)."""
    return {"image_root": settings.image_root, "allow_absolute_paths": settings.allow_absolute_paths}


def resolve_image_path(
    folder: Path, rel: str, *, where: str, allow_absolute: bool = False, fix: str | None = None
) -> Path:
    """``rel`` resolved against ``folder`` (the data file's, or ``image_root``); ``where`` (``m.jsonl:3``) starts the
    errors, ``fix`` (a reader's own advice) ends them. ``..`` may not climb out of ``folder``; an absolute path is
    refused unless ``allow_absolute``. Symlinks are followed (an image folder linked from a read-only mount is read
    where it lives). The file may not exist.

    >>> resolve_image_path(Path("/data"), "imgs/a.png", where="m.jsonl:1").as_posix()
    '/data/imgs/a.png'
    """
    if not isinstance(rel, str) or not rel.strip():
        raise ManifestError(
            f"{where}: image path must be a non-empty string, got {rel!r}; "
            + (fix or "give a path relative to the manifest's folder.")
        )
    candidate = Path(rel)
    if candidate.is_absolute() or candidate.drive or candidate.root:
        if allow_absolute:
            return candidate.resolve()
        raise ManifestError(
            f"{where}: image path {rel!r} is absolute; "
            + (
                fix
                or f"data files use paths relative to their images' folder ({folder}; image_root=DIR names another "
                "one) (or pass allow_absolute_paths=true to read absolute paths)."
            )
        )
    base = Path(os.path.abspath(folder))
    inside = Path(os.path.normpath(base / candidate))  # '..' climbs lexically: a symlink inside is not an escape
    if not inside.is_relative_to(base):
        raise ManifestError(
            f"{where}: image path {rel!r} climbs out of the images' folder {base} with '..'; "
            + (
                fix
                or "write it relative to that folder, or name the folder that holds the images with image_root=DIR."
            )
        )
    return inside.resolve()
