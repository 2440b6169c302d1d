"""What a run read, known by content: a file by its SHA-256; a manifest (JSON, JSON lines, CSV/TSV) also by the files
its rows name; a folder by its files (hidden ones, caches and the run's output aside); a LoRA adapter with its base
model; ``hf:DIR`` / ``NAME:FOLDER`` datasets by their folder; a cached Hub id by its revision.

A digest is cached (``$PERCEPTUAL_REWARDS_CACHE``, default ``~/.cache/perceptual-rewards/digests.sqlite``) under the
file's ``(device, inode, size, mtime_ns, ctime_ns)``, as DVC's state cache does: any rewrite, even ``touch -r`` or
``cp -p``, changes ``ctime``, so a changed file is hashed anew.

Example:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = Path(d, "a.txt").write_text("x")
    ...     fingerprint(Path(d, "a.txt"))["sha256"][:12]
    '2d711642b726'
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import logging
import os
import re
import sqlite3
import stat
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from reward.core.sources import parse_source

logger = logging.getLogger(__name__)

DIGEST_CHARS = 32  # hex characters kept of a SHA-256 digest (128 bits)
MAX_MANIFEST_BYTES = 1 << 30  # a larger "manifest" is known as a file only
SKIPPED = ("__pycache__",)
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")  # NAME or ORG/NAME, as the Hub spells repo ids
_JSON_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def _cache() -> sqlite3.Connection | None:
    """The digest cache (``$PERCEPTUAL_REWARDS_CACHE``, default ``~/.cache/perceptual-rewards``), or ``None``."""
    folder = Path(os.environ.get("PERCEPTUAL_REWARDS_CACHE") or Path("~/.cache/perceptual-rewards").expanduser())
    try:
        folder.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(folder / "digests.sqlite", timeout=60)
        db.execute("CREATE TABLE IF NOT EXISTS files (dev, ino, size, mtime, ctime, digest, PRIMARY KEY (dev, ino))")
        db.execute("CREATE TABLE IF NOT EXISTS manifests (key PRIMARY KEY, record, files)")
        return db
    except (OSError, sqlite3.Error) as err:  # no cache: every file is hashed
        logger.debug("no digest cache in %s: %s", folder, err)
        return None


def _sig(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _hash(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()[:DIGEST_CHARS]


def file_digests(files: Mapping[str, os.stat_result] | Iterable[str | Path]) -> dict[str, tuple[str, int]]:
    """``{path: (SHA-256 hex, size)}`` of every file (given as paths, or as ``{path: stat}`` already taken), from the
    cache while a file's stat is unchanged, else read (in parallel threads: hashlib releases the GIL) and cached."""
    stats = dict(files) if isinstance(files, Mapping) else {p: os.stat(p) for p in dict.fromkeys(map(str, files))}
    db = _cache()
    known: dict[tuple[int, int], tuple[int, int, int, str]] = {}
    by_device: dict[int, list[int]] = {}
    for st in stats.values():
        by_device.setdefault(st.st_dev, []).append(st.st_ino)
    for dev, inodes in by_device.items() if db is not None else ():
        for i in range(0, len(inodes), 900):
            chunk = inodes[i : i + 900]
            rows = db.execute(
                f"SELECT * FROM files WHERE dev = ? AND ino IN ({','.join('?' * len(chunk))})", [dev, *chunk]
            )
            known.update(((d, n), tuple(rest)) for d, n, *rest in rows)
    digests = {
        p: hit[3]
        for p, st in stats.items()
        if (hit := known.get((st.st_dev, st.st_ino))) and hit[:3] == (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    }
    todo = [p for p in stats if p not in digests]
    with ThreadPoolExecutor(min(16, 2 * (os.cpu_count() or 2))) as pool:
        digests.update(zip(todo, pool.map(_hash, todo), strict=True))
    if db is not None and todo:
        rows = [
            (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, digests[p])
            for p in todo
            if (st := stats[p])
        ]
        try:
            with db:
                db.executemany("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?)", rows)
        except sqlite3.Error as err:  # a busy or read-only cache: the digests are still right
            logger.debug("digest cache not updated: %s", err)
    return {p: (digests[p], stats[p].st_size) for p in stats}


def folder_files(folder: Path, exclude: Sequence[str] = ()) -> list[Path]:
    """Every file under ``folder``, sorted (symlinks followed, each folder once); hidden names, ``__pycache__``,
    ``datasets``' ``cache-*.arrow`` and the folders and files in ``exclude`` (real paths) left out."""
    found, seen = [], set()
    for root, dirs, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen or real in exclude:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED)
        found += [
            Path(root, f)
            for f in files
            if not f.startswith(".")
            and not (f.startswith("cache-") and f.endswith(".arrow"))
            and os.path.isfile(os.path.join(root, f))
            and os.path.join(real, f) not in exclude
        ]
    return sorted(found)


def _record(files: Mapping[str, os.stat_result] | Sequence[str], base: str = "") -> dict[str, Any]:
    """``{"files", "bytes", "sha256"}`` of ``files`` (names under ``base`` written relative)."""
    digests = file_digests(files)
    h = hashlib.sha256()
    for name, (digest, _) in sorted((f.removeprefix(base), d) for f, d in digests.items()):
        h.update(f"{name}\0{digest}\n".encode("utf-8", "surrogatepass"))
    size = sum(s for _, s in digests.values())
    return {"files": len(files), "bytes": size, "sha256": h.hexdigest()[:DIGEST_CHARS]}


def _adapter_base(folder: Path) -> str | None:
    """The base model of a LoRA adapter folder (its ``adapter_config.json``), a path where one exists; ``None``."""
    try:
        base = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))["base_model_name_or_path"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (isinstance(base, str) and base):
        return None
    path = folder / base if (folder / base).exists() else Path(base).expanduser()
    if path.exists() and path.resolve() == folder.resolve():
        return None
    return str(path) if path.exists() else base


def named_files(manifest: Path, roots: Sequence[str | Path] = ()) -> dict[str, os.stat_result]:
    """The files a manifest's rows name (absolute, each once): every string of a JSON document, of a JSON line or of
    a CSV/TSV cell that names an existing file relative to the manifest's folder, to one of ``roots``, or
    absolutely."""
    try:
        text = manifest.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    if manifest.suffix.lower() in (".csv", ".tsv"):
        dialect = "excel-tab" if manifest.suffix.lower() == ".tsv" else "excel"
        try:
            strings = {cell for row in csv.reader(text.splitlines(), dialect=dialect) for cell in row}
        except csv.Error:  # unreadable as CSV (a cell over the field size limit): known by its bytes alone
            return {}
    else:  # every JSON string literal, whatever the document's shape (keys too: they name no file)
        strings = {json.loads(f'"{s}"') if "\\" in s else s for s in _JSON_STRING.findall(text)}
    bases = [str(manifest.parent), *(os.path.abspath(r) for r in roots)]
    found = {}
    for value in (s for s in strings if 0 < len(s) <= 4096 and "\n" not in s):
        for base in [""] if os.path.isabs(value) else bases:
            candidate = os.path.normpath(os.path.join(base, os.path.expanduser(value)))
            try:
                st = os.stat(candidate)
            except (OSError, ValueError):
                continue
            if stat.S_ISREG(st.st_mode):
                found[candidate] = st
                break
    found.pop(os.path.normpath(str(manifest)), None)
    return dict(sorted(found.items()))


def _file(path: Path, roots: Sequence[str | Path]) -> dict[str, Any]:
    """A file's record; a manifest's also holds the files it names. An unchanged manifest whose named files are all
    unchanged (by stat) gives its cached record without being read again."""
    db, key = _cache(), json.dumps([*_sig(path.stat()), [str(r) for r in roots]])
    row = db.execute("SELECT record, files FROM manifests WHERE key = ?", (key,)).fetchone() if db else None
    if row is not None:
        paths, sigs = json.loads(row[1])
        try:
            if [_sig(st) for st in map(os.stat, paths)] == sigs:
                return json.loads(row[0])
        except OSError:  # a named file is gone: read the manifest anew
            pass
    named: dict[str, os.stat_result] = {}
    if path.stat().st_size <= MAX_MANIFEST_BYTES:
        with open(path, "rb") as f:
            head = f.read(64).lstrip()[:1]
        if path.suffix.lower() in (".jsonl", ".json", ".ndjson", ".csv", ".tsv") or head in (b"{", b"["):
            named = named_files(path, roots)
    digest, size = file_digests([path])[str(path)]
    record: dict[str, Any] = {"path": str(path), "bytes": size, "sha256": digest}
    if named:
        record["named"] = _record(named, str(path.parent) + os.sep)
    if named and db is not None:  # a busy or read-only cache: the record is still right
        files = json.dumps([list(named), [_sig(st) for st in named.values()]])
        with contextlib.suppress(sqlite3.Error), db:
            db.execute("INSERT OR REPLACE INTO manifests VALUES (?, ?, ?)", (key, json.dumps(record), files))
    return record


def _table_files(folder: Path) -> list[str]:
    """The files a table saved with ``save_to_disk`` points to: image cells stored as a path without their bytes, and
    string columns named like file names (``image``, ``path``, ``mask``...)."""
    if not ((folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()):
        return []
    try:
        import datasets

        data = datasets.load_from_disk(str(folder))
    except Exception as err:  # noqa: BLE001 - unreadable: the command's own reading names the problem
        logger.debug("no table files for %s: %s", folder, err)
        return []
    found = set()
    for table in data.values() if isinstance(data, Mapping) else [data]:
        for name, feature in table.features.items():
            if isinstance(feature, datasets.Image):
                values = [c.get("path") for c in table.data.column(name).to_pylist() if c and not c.get("bytes")]
            elif getattr(feature, "dtype", None) == "string" and any(
                w in name.lower() for w in ("image", "img", "path", "file", "mask")
            ):
                values = table.data.column(name).to_pylist()
            else:
                continue
            for value in {v for v in values if isinstance(v, str) and v}:
                candidate = os.path.normpath(os.path.join(folder, os.path.expanduser(value)))
                if os.path.isfile(candidate):
                    found.add(candidate)
    return sorted(found)


def _source(value: str, folder: Path, exclude: Sequence[str]) -> dict[str, Any]:
    """A dataset source (``hf:DIR``, ``NAME:FOLDER``) by its folder's files and the files its tables name outside
    it."""
    real = folder.resolve()
    record = fingerprint(real, exclude=exclude) or {}  # the folder's record (never None: it exists)
    inside = str(real) + os.sep
    outside = set(_table_files(real))
    for table in folder_files(real, exclude):
        if table.suffix.lower() in (".jsonl", ".json", ".csv", ".tsv") and table.stat().st_size <= MAX_MANIFEST_BYTES:
            outside.update(named_files(table))
    if outside := sorted(f for f in outside if not os.path.realpath(f).startswith(inside)):
        record["named"] = _record(outside)
    return {"path": value, "folder": record.pop("path"), **record}


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def weights_fingerprint(value: str | Path) -> dict[str, Any] | None:
    """A model's weights by content: the digest of the weight files in its folder (or a cached Hub id's snapshot),
    what scores depend on, not the cards, the tokenizer or a fusion weights file beside them; a LoRA adapter's
    with its base model's (``base_model``). ``None``: no weight files found.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = Path(d, "model.safetensors").write_bytes(b"w")
    ...     before = weights_fingerprint(d)
    ...     _ = Path(d, "fusion_weights.json").write_text("{}")
    ...     weights_fingerprint(d) == before, before["files"]
    (True, 1)
    """
    folder = Path(str(value)).expanduser()
    if not folder.is_dir():
        folder = hub_snapshot(str(value))  # type: ignore[assignment]
        if folder is None:
            return None
    files = sorted(str(p) for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    if not files:
        return None
    record = _record(files, str(folder) + os.sep)
    if (base := _adapter_base(folder)) is not None:
        record["base_model"] = weights_fingerprint(base) or {"path": base}
    return record


def hub_snapshot(value: str, repo_type: str = "model") -> Path | None:
    """The cached snapshot folder of a Hub id ``ORG/NAME`` (never downloaded here), or ``None``."""
    if value.count("/") != 1 or not HUB_ID.match(value) or ".." in value or Path(value).expanduser().exists():
        return None
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(value, repo_type=repo_type, local_files_only=True))
    except Exception:  # noqa: BLE001 - not in the cache (or no such id): known by its name
        return None


def fingerprint(
    value: str | Path | None, *, roots: Sequence[str | Path] = (), exclude: Sequence[str] = ()
) -> dict[str, Any] | None:
    """The content fingerprint of one input (see the module docstring); ``None`` for none. A value naming nothing
    readable here (a stream name such as ``synthetic``, a Hub id not in the cache) is kept by its name.
    ``roots``: other folders a manifest's relative paths are read from; ``exclude``: folders never read (the run's
    output folder)."""
    if value is None:
        return None
    text = str(value)
    path = Path(text).expanduser()
    if path.is_dir():  # by its files; a LoRA adapter with the model it is applied to, read as well
        folder = path.resolve()
        files = [str(f) for f in folder_files(folder, exclude)]
        record = {"path": str(folder), **_record(files, str(folder) + os.sep)}
        if (base := _adapter_base(folder)) is not None:
            record["base_model"] = fingerprint(base)
        return record
    if path.exists():
        return _file(path.resolve(), roots)
    try:
        source = parse_source(text)  # hf:DIR_OR_ID[:SPLIT] or NAME:FOLDER[:SPLIT]
    except Exception:  # noqa: BLE001 - a malformed source: the command refuses it with its own message
        source = None
    if source is not None:
        folder = Path(source.folder).expanduser()
        if folder.is_dir():
            return _source(text, folder, exclude)
        snapshot = hub_snapshot(source.folder, "dataset")
        return {"path": text, "revision": snapshot.name} if snapshot is not None else {"path": text}
    snapshot = hub_snapshot(text)
    return {"repo": text, "revision": snapshot.name} if snapshot is not None else {"path": text}
