"""Preference pairs (``reward.data.load_pairs``) matched by resolved path with their dimension scores: a scores
JSONL (``{"image": ..., "<dimension>": score}``, paths relative to its folder, ``scores_root`` or, for an ``evaluate``
run's ``scores.jsonl``, the evaluated data's folder) or a reward with dimensions. A bad row fails naming file and line,
or with ``skip_bad`` is skipped and counted."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from reward.data.labels import LABEL_NAMES, LABEL_TIE
from reward.data.manifest import ManifestError, iter_jsonl

logger = logging.getLogger(__name__)

# keys of a scores row that are never dimensions
METADATA_KEYS = frozenset(
    ("image", "id", "path", "mos", "score", "std", "ratings", "n_ratings", "dimension", "prompt", "label", "split")
    + ("mask", "source", "model", "seed", "width", "height")
)
MAX_ABS_SCORE = 1e9  # larger scores overflow the fit's products (weights up to max_abs_weight times differences)
_SCORE_EXAMPLE = '{"image": "img1.png", "layout": 3.2, "lighting": 4.1}'
_SKIP_HINT = "or pass skip_bad=true to skip such rows"


@dataclass
class ScoreTable:
    """Dimension scores per resolved image path, ``rows[path] = (where, {dimension: value or None})``; ``named``:
    the paths as written by file name (for error hints); ``root``: the folder relative paths were resolved against."""

    dimensions: tuple[str, ...]
    rows: dict[Path, tuple[str, dict[str, float | None]]]
    source: str
    named: dict[str, list[str]] | None = None
    root: Path | None = None


@dataclass(frozen=True, eq=False)
class PairData:
    """Pairs ready to fit: ``x_a``, ``x_b`` [n, d], label codes [n], and the bad rows skipped."""

    dimensions: tuple[str, ...]
    x_a: np.ndarray
    x_b: np.ndarray
    labels: np.ndarray
    skipped: tuple[str, ...] = ()

    @property
    def n_pairs(self) -> int:
        return len(self.labels)

    @property
    def n_ties(self) -> int:
        return int(np.sum(self.labels == LABEL_TIE))


def _bad(skipped: list[str] | None, message: str) -> None:
    if skipped is None:
        raise ManifestError(f"{message}; {_SKIP_HINT}.")
    skipped.append(message)


def _number(value: Any) -> float | None:
    """A finite float, else ``None``."""
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if numeric and math.isfinite(value) else None


def _bad_value(row: Mapping[str, Any]) -> str | None:
    """A score written as a string (it would be dropped as a dimension in silence) or too large for the fit."""
    for key, value in row.items():
        if key in METADATA_KEYS:
            continue
        if isinstance(value, str):
            try:
                float(value)
            except ValueError:
                continue
            return f"{key!r} is the string {value!r}, not a number; write it unquoted, e.g. {value.strip()}"
        if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) > MAX_ABS_SCORE:
            return (
                f"{key!r} = {value:g} is beyond ±{MAX_ABS_SCORE:g}, too large for the fit; rescale the scores "
                "(e.g. to 1-5) or fix the value"
            )
    return None


def evaluated_root(path: str | Path) -> Path | None:
    """The folder a ``scores.jsonl`` written by ``evaluate`` (or by SFT's evaluation of ``data.test``) names
    its images from: its ``image_root``, else the evaluated manifest's folder or a dataset's ``FOLDER``, read from the
    ``run.json`` beside it. ``None`` for any other file."""
    from reward.core.errors import UserError
    from reward.data.datasets import parse_source

    try:
        run = json.loads((Path(path).parent / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(run, dict) or not isinstance(run.get("settings"), dict):
        return None
    settings, inputs = run["settings"], run.get("inputs") or {}
    if isinstance(settings.get("image_root"), str):
        return Path(settings["image_root"]).expanduser().resolve()
    if run.get("command") == "evaluate":
        fingerprint = inputs.get("data") if isinstance(inputs, dict) else None
        data = fingerprint.get("path") if isinstance(fingerprint, dict) else settings.get("data")
    elif run.get("command") == "sft" and isinstance(settings.get("data"), dict):
        data = settings["data"].get("test")
    else:
        return None
    if not isinstance(data, str):
        return None
    try:
        source = parse_source(data)
    except UserError:
        return None
    if source is not None:
        return Path(source.folder).expanduser().resolve()
    manifest = Path(data).expanduser().resolve()  # a JSONL file, or a save_to_disk folder
    return manifest if manifest.is_dir() else manifest.parent if manifest.is_file() else None


def scored_by(path: str | Path) -> dict[str, Any] | None:
    """The scorer a ``scores.jsonl`` written by ``evaluate`` (or SFT's evaluation) came from, as its
    ``metrics.json`` beside it records it (``{"path", "weights"}``: the weights by content); ``None`` when unknown."""
    try:
        metrics = json.loads((Path(path).parent / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    reward = (metrics.get("meta") or {}).get("reward") if isinstance(metrics, dict) else None
    scorer = reward.get("scorer") if isinstance(reward, dict) else None
    return scorer if isinstance(scorer, dict) and isinstance(scorer.get("weights"), dict) else None


def read_scores(
    path: str | Path,
    dimensions: Sequence[str] | None = None,
    skipped: list[str] | None = None,
    root: str | Path | None = None,
    image_root: str | Path | None = None,
) -> ScoreTable:
    """A scores file as a :class:`ScoreTable`. Relative image paths are resolved against ``root``, else the evaluated
    data's folder (:func:`evaluated_root`), else ``image_root``, else the file's folder; no image is read."""
    path = Path(path)
    evaluated = evaluated_root(path) if root is None else None
    fallback = Path(image_root).expanduser().resolve() if image_root is not None else path.resolve().parent
    folder = Path(root).resolve() if root is not None else evaluated or fallback
    if evaluated is not None:
        logger.info("%s: image paths relative to the evaluated data's folder %s (its run.json)", path, evaluated)
    rows: dict[Path, tuple[str, dict[str, float | None]]] = {}
    seen: dict[str, None] = {}  # numeric non-metadata keys in order of first appearance
    named: dict[str, list[str]] = {}
    for line, row in iter_jsonl(path):
        where = f"{path}:{line}"
        if isinstance(row, ManifestError):
            _bad(skipped, str(row).rstrip("."))
            continue
        image = row.get("image")
        if not (isinstance(image, str) and image.strip()):
            _bad(skipped, f'{where}: score row has no "image" path (got {image!r}); write rows like {_SCORE_EXAMPLE}')
            continue
        if bad := _bad_value(row):
            _bad(skipped, f"{where}: {bad}")
            continue
        image_path = (folder / image).resolve()
        named.setdefault(Path(image).name, []).append(Path(image).as_posix())
        values = {k: _number(v) for k, v in row.items() if k not in METADATA_KEYS}
        seen.update(
            (k, None) for k, v in row.items() if k in values and isinstance(v, int | float) and not isinstance(v, bool)
        )
        if image_path not in rows:
            rows[image_path] = (where, values)
            continue
        first_where, old = rows[image_path]
        clash = [k for k, v in values.items() if k in old and old[k] != v]
        if clash:
            _bad(
                skipped,
                f"{where}: image {image!r} already has {clash} with other values at {first_where}; keep one score "
                "per image and dimension",
            )
            continue
        old.update(values)
    dims = tuple(seen) if dimensions is None else tuple(dimensions)
    if not dims:
        raise ValueError(
            f"{path}: no dimension columns found (numeric keys other than {sorted(METADATA_KEYS)}); write rows like "
            f"{_SCORE_EXAMPLE} or name them with dimensions=[...]."
        )
    absent = [d for d in dims if dimensions is not None and all(d not in values for _, values in rows.values())]
    if absent:
        raise ValueError(
            f"{path}: dimension(s) {absent} requested with dimensions=[...] appear in no row; the file has "
            f"{list(seen)}. Fix the names in dimensions=[...] or add those scores."
        )
    return ScoreTable(dims, rows, str(path), {k: sorted(set(v)) for k, v in named.items()}, folder)


def score_images_with_reward(
    images: Sequence[Path],
    name: str,
    reward_cfg: Mapping[str, Any] | None = None,
    *,
    dimensions: Sequence[str] | None = None,
    batch_size: int = 8,
) -> ScoreTable:
    """Score ``images`` with the registered reward ``name`` (``reward.get_reward``) and keep its dimensions."""
    from reward import get_reward  # lazy: only this path needs the reward models
    from reward.data.images import load_image

    model = get_reward(name, dict(reward_cfg or {}))
    rows: dict[Path, tuple[str, dict[str, float | None]]] = {}
    found: tuple[str, ...] = ()
    for start in tqdm(range(0, len(images), batch_size), desc=f"scoring images with {name}", unit="batch"):
        batch = list(images[start : start + batch_size])
        dims = getattr(model.score([load_image(p) for p in batch]), "dimensions", None)
        if not dims:
            raise ValueError(
                f"reward={name!r} returned no per-dimension scores (RewardOutput.dimensions is empty); fusion needs "
                "one score per dimension. Use a reward with dimensions (e.g. sa-iqa) or pass scores=SCORES.jsonl."
            )
        found = found or tuple(dims)
        columns = {
            d: np.asarray(v.detach().float().cpu() if hasattr(v, "detach") else v, float).reshape(-1)
            for d, v in dims.items()
        }
        bad = {d: c.shape for d, c in columns.items() if c.shape != (len(batch),)}
        if bad:
            raise ValueError(f"reward={name!r} returned dimension scores of shapes {bad} for {len(batch)} images.")
        for i, image in enumerate(batch):
            rows[image] = (f"reward {name}", {d: _number(float(c[i])) for d, c in columns.items()})
    dims_out = tuple(dimensions) if dimensions is not None else found
    absent = [d for d in dims_out if d not in found]
    if absent:
        raise ValueError(f"dimension(s) {absent} are not produced by reward={name!r}, which gives {list(found)}.")
    return ScoreTable(dims_out, rows, f"reward {name}")


def _root_hint(path: Path, pairs_root: Path, table: ScoreTable) -> str:
    """Why a pair's image has no scores though the scores file has a row of the same name: that row is another file
    (never matched by name), or its paths are relative to another folder (``scores_root=``)."""
    named = (table.named or {}).get(path.name, [])
    root = table.root or Path(table.source).resolve().parent
    others = [(w, (root / w).resolve()) for w in named[:3]]
    if any(p.is_file() and not (path.is_file() and p.samefile(path)) for _, p in others):
        shown = ", ".join(f"{w!r} -> {p}" for w, p in others)
        return (
            f". The scores file's row(s) of the same name ({shown}, relative to {root}) are other images, so they "
            "are not used for it (images are matched by path, never by file name): score this image, or, if the "
            "scores file's paths are relative to another folder, pass scores_root=THAT_FOLDER"
        )
    if path.is_relative_to(pairs_root) and (rel := path.relative_to(pairs_root).as_posix()) in named:
        return (
            f". The scores file has a row for {rel!r} but resolves it against {root}, where no such file is: if its "
            f"paths are relative to {pairs_root}, pass scores_root={pairs_root}"
        )
    return ""


def assemble(pairs: Sequence[Any], table: ScoreTable, skipped: list[str] | None, pairs_root: Path) -> PairData:
    """Both images of every pair (``reward.data.PairRow``) looked up in ``table``; a pair with an unscored image is
    a bad row."""
    dims = table.dimensions
    x_a, x_b, codes = [], [], []
    for pair in pairs:
        vectors = []
        for key, path in (("a", pair.a), ("b", pair.b)):
            entry = table.rows.get(path)
            if entry is None:
                _bad(
                    skipped,
                    f"{pair.where}: image {key!r} ({path}) has no scores in {table.source}; "
                    f'add a row {{"image": ..., {", ".join(f"{d!r}: ..." for d in dims)}}} for it'
                    + _root_hint(path, pairs_root, table),
                )
                break
            where, values = entry
            missing = [d for d in dims if values.get(d) is None]
            if missing:
                _bad(
                    skipped,
                    f"{pair.where}: image {key!r} ({path}) lacks dimension(s) {missing} or they are not finite "
                    f"numbers (its scores: {where}); add them or choose dimensions=[...] every image has",
                )
                break
            vectors.append([values[d] for d in dims])
        else:
            x_a.append(vectors[0])
            x_b.append(vectors[1])
            codes.append(LABEL_NAMES[pair.label])
    shape = (len(codes), len(dims))
    x_a, x_b = np.asarray(x_a, dtype=np.float64).reshape(shape), np.asarray(x_b, dtype=np.float64).reshape(shape)
    return PairData(dims, x_a, x_b, np.asarray(codes, dtype=np.int8), tuple(skipped or ()))


def load_pair_data(
    pairs: str | Path,
    scores: str | Path | None = None,
    *,
    reward: str | None = None,
    reward_cfg: Mapping[str, Any] | None = None,
    dimensions: Sequence[str] | None = None,
    skip_bad: bool = False,
    batch_size: int = 8,
    scores_root: str | Path | None = None,
    image_root: str | Path | None = None,
    allow_absolute_paths: bool = False,
) -> PairData:
    """Pairs and their dimension scores, from a scores file or scored by the reward ``reward``. The pairs' paths are
    relative to their file's folder or to ``image_root`` (absolute ones only with ``allow_absolute_paths``)."""
    from reward.data import load_pairs

    skipped: list[str] | None = [] if skip_bad else None
    paths = {"image_root": image_root, "allow_absolute_paths": allow_absolute_paths}
    manifest = load_pairs(pairs, skip_bad=skip_bad, check_images=False, skip_key="skip_bad", **paths)
    rows = []
    for row in manifest.rows:
        if not (isinstance(row.a, Path) and isinstance(row.b, Path)):
            _bad(skipped, f"{row.where}: 'a' and 'b' must be image paths to match them with the scores")
        elif scores is None and (absent := [str(p) for p in (row.a, row.b) if not p.is_file()]):
            folder = "image_root" if image_root is not None else "the pairs file's folder"
            _bad(skipped, f"{row.where}: image file(s) {absent} not found (paths are relative to {folder})")
        else:
            rows.append(row)
    if skipped is not None:
        skipped[:0] = [s.reason for s in manifest.skipped]
    if scores is not None:
        table = read_scores(scores, dimensions, skipped, root=scores_root, image_root=image_root)
    else:
        images = list(dict.fromkeys(p for row in rows for p in (row.a, row.b)))
        table = score_images_with_reward(images, reward, reward_cfg, dimensions=dimensions, batch_size=batch_size)
    pairs_root = Path(image_root).expanduser().resolve() if image_root is not None else Path(pairs).resolve().parent
    data = assemble(rows, table, skipped, pairs_root)
    if data.skipped:
        logger.warning(
            "Skipped %d bad row(s) (skip_bad=true); the first: %s", len(data.skipped), "; ".join(data.skipped[:3])
        )
    if data.n_pairs == 0:
        raise ManifestError(
            f"{pairs}: no usable pairs ({len(data.skipped)} skipped; the first: {(data.skipped or ['none'])[0]})"
        )
    return data
