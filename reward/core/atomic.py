"""Whole files written through a temporary file renamed over the target, so that a crash never leaves a half-written
one, and strict JSON: :func:`json_safe` turns an undefined value into ``null``, never ``NaN`` (the output policy's
``run.json``; :mod:`reward.data.files` adds JSON lines, logs and safe file names).

Example:
    >>> import numpy as np
    >>> json_safe({"srcc": float("nan"), "n": np.int64(3), "ci": (0.1, 0.2)})
    {'srcc': None, 'n': 3, 'ci': [0.1, 0.2]}
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
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


def atomic_write_with(path: str | Path, write: Callable[[Path], Any]) -> Path:
    """Let ``write`` fill a temporary file beside ``path`` (PIL's ``save``, ``savefig``, ...; its name ends with
    ``path``'s suffix, for writers that infer the format from it), flush it to disk and rename it over ``path``. The
    file follows the umask, as any new file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}")
    tmp = Path(name)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        os.close(fd)
        write(tmp)
        with tmp.open("rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    return atomic_write_with(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically; NaN and infinity are refused (``ValueError``): turn them into
    ``None`` first (:func:`json_safe`)."""
    return atomic_write_text(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")
