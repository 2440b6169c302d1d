"""What a run read, known by its content: the fingerprints that make up a run's identity (``run.json``'s ``inputs``).

- a file: the SHA-256 of its bytes; a manifest (JSON lines or JSON whatever the file's name, a CSV/TSV table) also
  the files its rows name (images, masks, anchors: every string naming a file relative to the manifest's folder, or
  to a root the command reads paths from);
- a folder (a model, a scorer, a folder of images, a dataset saved with ``save_to_disk``): every file in it (hidden
  ones aside), by relative path and content;
- a ``datasets`` dataset ``hf:DIR[:SPLIT]``: its folder's files and the files its tables name outside it (path
  columns, JSON lines, CSV); ``hf:ORG/NAME[:SPLIT]``: the fingerprints ``datasets`` gives each split of the cached
  dataset; a public dataset ``NAME:FOLDER[:SPLIT]``: its folder;
- a Hub model id ``ORG/NAME`` held in the Hugging Face cache: its snapshot folder's files (one the run downloads is
  fingerprinted when it ends: :meth:`reward.core.outputs.Output.finish`);
- a LoRA adapter folder: its files and the base model its ``adapter_config.json`` names;
- one image (:func:`image_identity`): its bytes, to compare images whatever their names (calibration splits).

Paths are kept beside the digests for the reader, but the content decides: a folder re-saved with other values, an
image replaced in place or weights swapped for others of the same size all give another fingerprint. Files are read
whole every time (no modification-time shortcut, which a copy or ``touch`` fools), in parallel threads (hashlib and
file reads release the GIL); a file larger than :data:`PIECE` is hashed in pieces in parallel and its digest is the
digest of its pieces' digests. Measured on a loaded 2-core machine: a manifest of 10,000 JPEGs of 512x384 (63 KB
each, 630 MB) in 2.5-3.5 s, 10,000 PNGs of 64x64 (124 MB) in 1.1-1.7 s read from the page cache and 4.3 s from
disk; a 2 GiB weights file in 5.5-6.5 s (so about 45 s for the 15 GB of a 7B model there, a
few seconds on a machine with 16 cores and the files in the page cache).

Example:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = Path(d, "a.txt").write_text("x")
    ...     fingerprint(Path(d, "a.txt"))["sha256"][:12]
    '2d711642b726'
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = ["DIGEST_CHARS", "PIECE", "file_digests", "fingerprint", "folder_files", "image_identity", "named_files"]

logger = logging.getLogger(__name__)

DIGEST_CHARS = 32  # hex characters kept of a SHA-256 digest (128 bits)
PIECE = 64 << 20  # files larger than this are hashed in pieces of this size, in parallel
CHUNK = 1 << 20  # bytes read at a time
BATCH = 64  # small files hashed by one thread in a row
MANIFESTS = (".jsonl", ".json", ".ndjson")  # files whose rows name other files (images, masks, anchors) ...
TABLES = (".csv", ".tsv")  # ... and tables whose cells may; any other small text file starting with { or [ too
MAX_MANIFEST_BYTES = 1 << 30  # a larger "manifest" is hashed as a file only
MAX_NAME_CHARS = 4096
DERIVED_FOLDERS = ("__pycache__",)  # caches made from the content, by reading it
THREADS = max(4, min(32, 2 * (os.cpu_count() or 2)))
SLOW_S = 5.0  # fingerprints taking longer are logged with their cost


def _short(h: Any) -> str:
    return h.hexdigest()[:DIGEST_CHARS]


def _read_piece(path: str, offset: int, length: int) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        if offset:
            f.seek(offset)
        left = length
        while left > 0:
            block = f.read(min(CHUNK, left))
            if not block:
                break
            h.update(block)
            left -= len(block)
    return h.digest()


def _run_job(job: tuple[str, int, int] | list[str]) -> list[bytes]:
    """A piece of a large file ``(path, offset, length)``, or a batch of small files hashed whole."""
    if isinstance(job, tuple):
        return [_read_piece(*job)]
    return [_read_piece(p, 0, PIECE) for p in job]


def file_digests(paths: Iterable[str | Path], sizes: dict[str, int] | None = None) -> dict[str, str]:
    """``{path: SHA-256 hex (DIGEST_CHARS)}`` of every file, read in parallel threads (a large file in pieces of
    :data:`PIECE`: the digest of its pieces' digests); ``sizes``, when given, receives each file's size."""
    paths = list(dict.fromkeys(str(p) for p in paths))
    stats = {p: os.stat(p) for p in paths}
    if sizes is not None:
        sizes.update((p, st.st_size) for p, st in stats.items())
    out: dict[str, str] = {}
    todo = paths
    big = [
        (p, off, min(PIECE, stats[p].st_size - off))
        for p in todo
        if stats[p].st_size > PIECE
        for off in range(0, stats[p].st_size, PIECE)
    ]
    small = [p for p in todo if stats[p].st_size <= PIECE]
    batches = [small[i : i + BATCH] for i in range(0, len(small), BATCH)]
    jobs: list[Any] = [*big, *batches]
    if len(jobs) > 1:
        with ThreadPoolExecutor(min(THREADS, len(jobs))) as pool:
            results = list(pool.map(_run_job, jobs))
    else:
        results = [_run_job(job) for job in jobs]
    parts: dict[str, list[bytes]] = {p: [] for p in todo}
    for job, result in zip(jobs, results, strict=True):
        if isinstance(job, tuple):
            parts[job[0]].append(result[0])
        else:
            for p, digest in zip(job, result, strict=True):
                parts[p].append(digest)
    for p in todo:
        size = stats[p].st_size
        if size <= PIECE:  # one piece: the plain SHA-256 of the file
            digest = parts[p][0].hex()[:DIGEST_CHARS]
        else:
            digest = _short(hashlib.sha256(b"".join(parts[p]) + str(size).encode()))
        out[p] = digest
    return out


def _content_file(name: str) -> bool:
    return not name.startswith(".") and not (name.startswith("cache-") and name.endswith(".arrow"))


def folder_files(folder: Path) -> list[Path]:
    """Every file under ``folder``, sorted (symlinks followed, each folder once); hidden names and caches derived from
    the content (``datasets``' ``cache-*.arrow``, ``__pycache__``) left out."""
    found: list[Path] = []
    seen: set[str] = set()
    for root, dirs, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in DERIVED_FOLDERS)
        found += [Path(root, f) for f in files if _content_file(f) and os.path.isfile(os.path.join(root, f))]
    return sorted(found)


def _combined(entries: Sequence[tuple[str, str]]) -> str:
    h = hashlib.sha256()
    for name, digest in sorted(entries):
        h.update(f"{name}\0{digest}\n".encode("utf-8", "surrogatepass"))
    return _short(h)


def _folder(folder: Path) -> dict[str, Any]:
    files = [str(f) for f in folder_files(folder)]
    sizes: dict[str, int] = {}
    digests = file_digests(files, sizes)
    entries = [(Path(f).relative_to(folder).as_posix(), digests[f]) for f in files]
    record = {"path": str(folder), "files": len(files), "bytes": sum(sizes.values()), "sha256": _combined(entries)}
    base = _adapter_base(folder)
    if base is not None:  # a LoRA adapter: the model it is applied to is read as well
        record["base_model"] = fingerprint(base)
    return record


def _adapter_base(folder: Path) -> str | None:
    """The base model a peft adapter folder names (``adapter_config.json``), when it is another folder or a Hub id."""
    try:
        config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    if not isinstance(base, str) or not base:
        return None
    path = Path(base).expanduser()
    if not path.is_absolute():
        path = folder / path if (folder / path).exists() else path
    return None if path.exists() and path.resolve() == folder.resolve() else str(path if path.exists() else base)


def _strings(node: Any) -> Iterable[str]:
    if isinstance(node, str):
        if 0 < len(node) <= MAX_NAME_CHARS and "\n" not in node:
            yield node
    elif isinstance(node, Mapping):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def _documents(manifest: Path, text: str) -> list[Any]:
    """The rows of a manifest's text: one JSON document, JSON lines, or the cells of a CSV/TSV table."""
    if manifest.suffix.lower() in TABLES:
        import csv

        dialect = "excel-tab" if manifest.suffix.lower() == ".tsv" else "excel"
        try:
            return [list(row) for row in csv.reader(text.splitlines(), dialect=dialect)]
        except csv.Error:
            return []
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        pass
    docs: list[Any] = []
    for line in text.splitlines():
        try:
            docs.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return docs


def named_files(manifest: Path, roots: Sequence[str | Path] = ()) -> list[str]:
    """The files a manifest's rows name (absolute, normalised; each once): every string value of a JSONL row, of a
    JSON document or of a CSV/TSV cell, that names an existing file relative to the manifest's folder, to one of
    ``roots``, or absolutely.
    """
    try:
        text = manifest.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    docs = _documents(manifest, text)
    bases = [str(manifest.parent), *(os.path.abspath(r) for r in roots)]
    own = os.path.normpath(str(manifest))
    found: set[str] = set()
    seen: set[str] = set()
    for value in (s for doc in docs for s in _strings(doc)):
        if value in seen:
            continue
        seen.add(value)
        for base in [""] if os.path.isabs(value) else bases:
            candidate = os.path.normpath(os.path.join(base, os.path.expanduser(value)))
            if os.path.isfile(candidate):
                if candidate != own:
                    found.add(candidate)
                break
    return sorted(found)


def _may_name_files(path: Path) -> bool:
    """A manifest by its name (``.jsonl``, ``.json``, ``.csv``...) or, whatever its name (``ratings.txt``), by its
    first character: a JSON document or JSON lines."""
    if path.suffix.lower() in (*MANIFESTS, *TABLES):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(64).lstrip()
    except OSError:
        return False
    return head[:1] in (b"{", b"[")


def _file(path: Path, roots: Sequence[str | Path]) -> dict[str, Any]:
    size = path.stat().st_size
    record: dict[str, Any] = {"path": str(path), "bytes": size}
    named = named_files(path, roots) if size <= MAX_MANIFEST_BYTES and _may_name_files(path) else []
    sizes: dict[str, int] = {}
    digests = file_digests([str(path), *named], sizes)
    record["sha256"] = digests[str(path)]
    if named:
        record["named"] = _named_record(named, str(path.parent) + os.sep, digests, sizes)
    return record


def _hf(value: str) -> dict[str, Any] | None:
    from reward.data.hf import parse_hf

    source = parse_hf(value)
    if source is None:
        return None
    folder = Path(source.name).expanduser()
    if folder.is_dir():
        return _source_folder(value, folder)
    try:  # a Hub dataset: the fingerprints datasets gives each split it holds in its cache
        import datasets

        data = datasets.load_dataset(source.name)
    except Exception as err:  # noqa: BLE001 - not readable here: the command's own reading names the problem
        logger.debug("no fingerprint for %s: %s", value, err)
        return {"path": value}
    splits = data if isinstance(data, Mapping) else {"all": data}
    return {"path": value, "datasets_fingerprint": {k: getattr(v, "_fingerprint", None) for k, v in splits.items()}}


def _named_dataset(value: str) -> dict[str, Any] | None:
    from reward.data.datasets import parse_source

    try:
        source = parse_source(value)
    except Exception:  # noqa: BLE001 - a malformed source is refused by the command with its own message
        return None
    if source is None or source.name == "hf":
        return None
    folder = Path(source.folder).expanduser()
    return _source_folder(value, folder) if folder.is_dir() else {"path": value}


def _source_folder(value: str, folder: Path) -> dict[str, Any]:
    """A dataset source (``hf:DIR``, ``NAME:FOLDER``) by its folder's files; ``path`` keeps the source as written."""
    real = folder.resolve()
    record = _folder(real)
    outside: set[str] = set()  # images a table of the folder names outside it (its own files are hashed already)
    inside = str(real) + os.sep
    for table in folder_files(real):
        if table.suffix.lower() in (*MANIFESTS, *TABLES) and table.stat().st_size <= MAX_MANIFEST_BYTES:
            outside.update(f for f in named_files(table) if not os.path.realpath(f).startswith(inside))
    outside.update(f for f in _table_files(real) if not os.path.realpath(f).startswith(inside))
    if outside:
        record["named"] = _named_record(sorted(outside), "")
    return {"path": value, "folder": record.pop("path"), **record}


FILE_COLUMNS = ("image", "img", "path", "file", "mask")  # string columns whose names say they hold file names


def _table_files(folder: Path) -> set[str]:
    """The files a table saved with ``save_to_disk`` points to rather than holds: image cells stored as a path
    without their bytes, and string columns named like file names (``image``, ``img_path``, ``mask``...), relative
    to the folder or absolute."""
    if not ((folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()):
        return set()
    try:
        import datasets
        import pyarrow.compute as pc

        data = datasets.load_from_disk(str(folder))
    except Exception as err:  # noqa: BLE001 - unreadable: the command's own reading names the problem
        logger.debug("no table files for %s: %s", folder, err)
        return set()
    found: set[str] = set()
    for table in data.values() if isinstance(data, Mapping) else [data]:
        for name, feature in table.features.items():
            if isinstance(feature, datasets.Image):  # (the bytes are never copied out of the memory map)
                column = table.data.column(name)
                values = pc.filter(pc.struct_field(column, "path"), pc.is_null(pc.struct_field(column, "bytes")))
                values = values.to_pylist()
            elif getattr(feature, "dtype", None) == "string" and any(w in name.lower() for w in FILE_COLUMNS):
                values = table.data.column(name).to_pylist()
            else:
                continue
            for value in {v for v in values if isinstance(v, str) and v and len(v) <= MAX_NAME_CHARS}:
                candidate = os.path.normpath(os.path.join(folder, os.path.expanduser(value)))
                if os.path.isfile(candidate):
                    found.add(candidate)
    return found


def _named_record(
    named: Sequence[str], base: str, digests: Mapping[str, str] | None = None, sizes: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """``{"files", "bytes", "sha256"}`` of the files a manifest names (paths under ``base`` written relative);
    ``digests`` and ``sizes``: already computed."""
    if digests is None or sizes is None:
        sizes = {}
        digests = file_digests(named, sizes)
    entries = [(f[len(base) :] if base and f.startswith(base) else f, digests[f]) for f in named]
    return {"files": len(named), "bytes": sum(sizes[f] for f in named), "sha256": _combined(entries)}


def hub_snapshot(value: str) -> Path | None:
    """The cached snapshot folder of a Hub model id ``ORG/NAME`` (never downloaded here), or ``None``."""
    from reward.core.inputs import HUB_ID

    if value.count("/") != 1 or not HUB_ID.match(value) or ".." in value or Path(value).expanduser().exists():
        return None
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(value, local_files_only=True))
    except Exception:  # noqa: BLE001 - not in the cache (or no such id): nothing to fingerprint
        return None


def fingerprint(value: str | Path | None, *, roots: Sequence[str | Path] = ()) -> dict[str, Any] | None:
    """The content fingerprint of one input (see the module docstring); ``None`` for no input. A value that names
    nothing readable here (a stream name such as ``synthetic``, a Hub id not in the cache) is kept as given.
    ``roots``: other folders a manifest's relative paths may be read from."""
    if value is None:
        return None
    text = str(value)
    started = time.perf_counter()
    path = Path(text).expanduser()
    if path.exists():
        real = path.resolve()
        record = _folder(real) if real.is_dir() else _file(real, roots)
    else:
        record = _hf(text) or _named_dataset(text)
        if record is None:
            snapshot = hub_snapshot(text)
            record = {"repo": text, **_folder(snapshot)} if snapshot is not None else {"path": text}
    spent = time.perf_counter() - started
    if spent > SLOW_S:
        logger.info("fingerprinted %s (%s) in %.1f s", text, _size(record), spent)
    return record


def _size(record: Mapping[str, Any]) -> str:
    files = record.get("files") or 1 + (record.get("named") or {}).get("files", 0)
    total = (record.get("bytes") or 0) + (record.get("named") or {}).get("bytes", 0)
    return f"{files} file(s), {total / 1e9:.2f} GB"


def image_identity(image: Any) -> str:
    """What one image is, by its content: ``sha256:DIGEST`` of a file's bytes or of a table cell's bytes, or of a
    decoded image's pixels (mode, size and bytes); two rows naming one file in two spellings, or two tables' images
    sharing a file name, are compared by this and never by their names. A file that cannot be read is known by its
    real path (``path:...``).

    >>> from PIL import Image
    >>> image_identity(Image.new("RGB", (2, 2))) == image_identity(Image.new("RGB", (2, 2)))
    True
    """
    from PIL import Image

    from reward.data.rows import DatasetImage

    if isinstance(image, DatasetImage):
        value = image.dataset[image.index][image.column]
        if isinstance(value, Mapping) and value.get("bytes"):
            return "sha256:" + _short(hashlib.sha256(value["bytes"]))
        image = value.get("path") if isinstance(value, Mapping) else value
    if isinstance(image, Image.Image):
        h = hashlib.sha256(f"{image.mode}{image.size}".encode())
        h.update(image.tobytes())
        return "sha256:" + _short(h)
    path = os.path.realpath(os.path.expanduser(str(image)))
    if os.path.isfile(path):
        return "sha256:" + file_digests([path])[path]
    return "path:" + path
