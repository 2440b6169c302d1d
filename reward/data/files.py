"""Files written so that a crash never leaves a half-written result, and never a NaN in JSON: whole files through a
temporary file renamed over the target (:mod:`reward.core.atomic`, which the output policy writes ``run.json``
with), logs appended a line at a time and flushed (a torn line is skipped when read back), strict JSON
(:func:`json_safe` turns an undefined value into ``null``), and :func:`safe_name` for file names made from data.

Example:
    >>> json_safe({"srcc": float("nan"), "ci": (0.1, 0.2)}), safe_name("a/b c")
    ({'srcc': None, 'ci': [0.1, 0.2]}, 'a-b-c-0af99a60')
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from reward.core.atomic import atomic_write_json, atomic_write_text, atomic_write_with, json_safe
from reward.core.errors import UserError
from reward.data.manifest import iter_jsonl, parse_json

__all__ = [  # the writers of reward.core.atomic are read from here too, as every module above core does
    "append_jsonl",
    "atomic_write_json",
    "atomic_write_jsonl",
    "atomic_write_text",
    "atomic_write_with",
    "json_safe",
    "read_json_object",
    "read_records",
    "safe_name",
]

SAFE_NAME_BYTES = 96  # longest readable part of a file name made from a name (UTF-8 bytes; a hash suffix is added)
_UNSAFE = re.compile(r"[^\w.\-]+")  # letters of any script, digits, _ . - are kept; anything else becomes "-"
_HASHED = re.compile(r"-[0-9a-f]{8}$")


def safe_name(name: str) -> str:
    """``name`` (a dimension, dataset, protocol or model name from data) as one file name that stays in its folder.

    Letters of any script, digits, ``_ . -`` are kept; separators, ``..``, spaces and other characters become ``-``.
    A name kept as it is stays itself; any other gets a short hash of the whole name appended, so two different names
    never map to the same file (``a/b`` and ``a:b`` differ, and neither can take the plain name ``a-b``; a name that
    already ends like a hash suffix gets one too).

    >>> safe_name("lighting"), safe_name("清晰度"), safe_name("../../victim/photo")
    ('lighting', '清晰度', 'victim-photo-f090072e')
    >>> safe_name("a/b") != safe_name("a:b") and safe_name("a-b") == "a-b"
    True
    """
    text = unicodedata.normalize("NFC", str(name))
    slug = _UNSAFE.sub("-", text).strip("-.")
    slug = re.sub(r"-{2,}", "-", slug)
    while len(slug.encode("utf-8")) > SAFE_NAME_BYTES:
        slug = slug[:-1]
    slug = slug.rstrip("-.")
    if slug == str(name) and slug and not _HASHED.search(slug):  # a kept name never looks like a hashed one
        return slug
    digest = hashlib.sha256(str(name).encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{slug}-{digest}" if slug else f"name-{digest}"


def atomic_write_jsonl(path: str | Path, rows: Iterable[dict]) -> Path:
    return atomic_write_text(path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows))


def append_jsonl(path: str | Path, rows: Iterable[dict]) -> None:
    """Append ``rows`` to a JSONL log (created with its folder if needed), flushed to disk before returning."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def read_json_object(path: str | Path, fix: str, error: type[UserError] = UserError) -> dict[str, Any]:
    """The JSON object in file ``path``; a file that is not UTF-8, not JSON or not an object is an ``error`` naming
    the file (and the line), ending with ``fix``."""
    path = Path(path)
    try:
        data = parse_json(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise error(f"{path}: not UTF-8 text (byte {err.start}); {fix}") from None
    except json.JSONDecodeError as err:
        raise error(f"{path}:{err.lineno}: not JSON ({err.msg}); {fix}") from None
    except ValueError as err:  # nested too deeply
        raise error(f"{path}: not usable JSON ({err}); {fix}") from None
    except OSError as err:
        raise error(f"{path}: cannot be read ({err.strerror or err}); {fix}") from None
    if not isinstance(data, dict):
        raise error(f"{path}: not a JSON object; {fix}")
    return data


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a JSONL log (``[]`` when it does not exist); a line torn by a crash (not JSON, or not UTF-8) is
    left out."""
    return [row for _, row in iter_jsonl(path) if isinstance(row, dict)] if Path(path).is_file() else []
