"""Low-level helpers for JSONL manifests: reading rows with line numbers and resolving image paths safely.

A manifest is a JSONL file, one JSON object per line; image paths inside it are relative to the
manifest's folder and may not point outside it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from reward.core.errors import MissingInputError, UserError

__all__ = ["ManifestError", "iter_jsonl", "read_jsonl", "resolve_image_path"]


class ManifestError(UserError):
    """A manifest (or one of its rows) is malformed; the message names the file, the line and the fix."""


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict | ManifestError]]:
    """Like :func:`read_jsonl`, but a bad line yields ``(line_number, ManifestError)`` instead of raising.

    Lets callers skip bad lines and carry on; a missing file still raises ``FileNotFoundError``.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(
            f"Manifest {str(path)!r} does not exist or is not a file; pass the path of a JSONL manifest "
            "(one JSON object per line)."
        )
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8").strip()
            except UnicodeDecodeError as err:
                yield (
                    number,
                    ManifestError(
                        f"{path}:{number}: not UTF-8 text (byte {raw[err.start : err.start + 1]!r} at column "
                        f"{err.start + 1}); save the manifest as UTF-8."
                    ),
                )
                continue
            if text:
                yield number, _parse_line(path, number, text)


def _parse_line(path: Path, number: int, text: str) -> dict | ManifestError:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as err:
        return ManifestError(
            f"{path}:{number}: invalid JSON ({err.msg} at column {err.colno}); each line must be one "
            'complete JSON object such as {"image": "img.png", "dimension": "overall", "mos": 3.5}.'
        )
    if not isinstance(row, dict):
        return ManifestError(
            f"{path}:{number}: expected a JSON object, got {type(row).__name__}; write each row as "
            '{"key": value, ...} on its own line.'
        )
    return row


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, row)`` for each non-blank line of a JSONL file (line numbers start at 1).

    Raises ``FileNotFoundError`` if the file does not exist and ``ManifestError`` for a line that is not
    valid JSON or not a JSON object.

    >>> import tempfile, os
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = os.path.join(d, "m.jsonl")
    ...     _ = open(p, "w").write('{"image": "a.png", "mos": 3}\\n\\n{"image": "b.png", "mos": 4}\\n')
    ...     list(read_jsonl(p))
    [(1, {'image': 'a.png', 'mos': 3}), (3, {'image': 'b.png', 'mos': 4})]
    """
    for number, row in iter_jsonl(path):
        if isinstance(row, ManifestError):
            raise row
        yield number, row


def resolve_image_path(
    manifest_dir: Path, rel: str, *, where: str, allow_absolute: bool = False, absolute_hint: str = ""
) -> Path:
    """Resolve ``rel`` against ``manifest_dir``, refusing paths that leave that folder.

    ``where`` (e.g. ``"data/m.jsonl:3"``) is put at the start of error messages. Absolute paths (unless
    ``allow_absolute``: the command's ``allow_absolute_paths=true``), ``..`` components that climb out of the folder
    and symlinks pointing outside it are all refused with a ``ManifestError`` (``absolute_hint`` ends the absolute
    path's message: the way out a command offers). The file is not required to exist (callers check that).

    >>> resolve_image_path(Path("/data"), "imgs/a.png", where="m.jsonl:1").as_posix()
    '/data/imgs/a.png'
    """
    if not isinstance(rel, str) or not rel.strip():
        raise ManifestError(
            f"{where}: image path must be a non-empty string, got {rel!r}; give a path relative to the "
            "manifest's folder."
        )
    candidate = Path(rel)
    if candidate.is_absolute() or candidate.drive or candidate.root:
        if allow_absolute:
            return candidate
        raise ManifestError(
            f"{where}: image path {rel!r} is absolute; data files must use paths relative to their own folder "
            f"({manifest_dir}). Move the image under that folder and write the relative path{absolute_hint}."
        )
    base = Path(manifest_dir).resolve()
    resolved = (base / candidate).resolve()
    if not resolved.is_relative_to(base):
        raise ManifestError(
            f"{where}: image path {rel!r} resolves to {resolved}, outside the manifest's folder {base} "
            "(via '..' or a symlink); keep images inside the manifest's folder."
        )
    return resolved
