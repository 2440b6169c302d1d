"""Files written so that a crash never leaves a half-written result, and never a NaN in JSON.

Whole files are written to a temporary file beside the target and renamed over it (:func:`atomic_write_text`,
:func:`atomic_write_json`, :func:`atomic_write_jsonl`, :func:`atomic_write_with`); per-step records are appended a
line at a time and flushed (:func:`append_jsonl`), and read back ignoring a line torn by a crash
(:func:`read_records`). JSON is strict: a NaN or infinity is refused (``allow_nan=False``), so writers turn an
undefined value into ``null`` on purpose with :func:`json_safe`.

Example:
    >>> json_safe({"srcc": float("nan"), "n": np.int64(3), "ci": (0.1, 0.2)})
    {'srcc': None, 'n': 3, 'ci': [0.1, 0.2]}
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np


def json_safe(value: Any) -> Any:
    """``value`` with numpy scalars/arrays made plain, tuples made lists, paths made strings and non-finite floats
    made ``None`` (an undefined metric is ``null``, never ``NaN``)."""
    if isinstance(value, np.ndarray | np.generic):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` refusing NaN and infinity (``ValueError``): turn them into ``None`` first (:func:`json_safe`)."""
    return json.dumps(obj, allow_nan=False, **kwargs)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    return atomic_write_text(path, dumps(obj, indent=2) + "\n")


def atomic_write_jsonl(path: str | Path, rows: Iterable[dict]) -> Path:
    return atomic_write_text(path, "".join(dumps(r) + "\n" for r in rows))


def append_jsonl(path: str | Path, rows: Iterable[dict]) -> None:
    """Append ``rows`` to a JSONL log (created with its folder if needed), flushed to disk before returning."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(dumps(r) + "\n" for r in rows)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a JSONL log (``[]`` when it does not exist); a line torn by a crash is left out."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def atomic_write_with(path: str | Path, write: Callable[[Path], Any]) -> Path:
    """Let ``write`` fill a temporary file beside ``path`` (PIL's ``save``, ``savefig``, ``shutil.copyfile`` ...),
    then rename it over ``path``. The temporary name ends with ``path``'s suffix, so writers that infer the format
    from it work."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
