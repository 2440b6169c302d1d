"""Read preference pairs and dimension scores into the arrays the Bradley–Terry fit takes.

- Pairs file (JSONL): ``{"a": image, "b": image, "label": "a" | "b" | "tie"}``, image paths relative to the
  pairs file's folder.
- Scores file (JSONL): ``{"image": image, "<dimension>": score, ...}``, image paths relative to the scores
  file's folder, or to ``scores_root``, or absolute. A ``scores.jsonl`` written by ``reward/evaluate.py`` (or by
  ``training/sft.py``'s evaluation) names images relative to the evaluated manifest's folder (a dataset's
  ``FOLDER``): that folder is read from the ``run.json`` beside it, so the file is used as written. Pairs and
  scores are matched by the resolved image path, never by file name. The dimensions are the numeric keys other than
  :data:`METADATA_KEYS` (``mos``, ``score``, ``dimension``, ...), in order of first appearance, unless given
  explicitly. Several rows for one image are merged (a conflicting value is an error).
- Or no scores file: a registered reward (e.g. ``sa-iqa``) scores the images named in the pairs.

A bad row (missing key, unknown label, an image without scores, a dimension missing for an image) raises
``ValueError`` naming the file and line and how to fix it; with ``skip_bad=True`` it is skipped, counted and
logged instead (malformed JSON lines too). Image paths in the pairs file must stay inside its folder
(``reward.data.load_pairs``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from reward.data.labels import LABEL_NAMES, LABEL_TIE
from reward.data.manifest import ManifestError, iter_jsonl

__all__ = ["METADATA_KEYS", "BadRows", "PairData", "ScoreTable", "load_pair_data", "read_pairs", "read_scores"]

logger = logging.getLogger(__name__)

# keys of a scores row that are never dimensions
METADATA_KEYS = frozenset(
    ("image", "id", "path", "mos", "score", "std", "ratings", "n_ratings", "dimension", "prompt", "label", "split")
    + ("mask", "source", "model", "seed", "width", "height")
)
_SCORE_EXAMPLE = '{"image": "img1.png", "layout": 3.2, "lighting": 4.1}'
_SKIP_HINT = "or pass skip_bad=true to skip such rows"


@dataclass(frozen=True)
class Pair:
    """One pairs-file row: where it is (``file:line``), the two resolved image paths and the label code."""

    where: str
    a: Path
    b: Path
    code: int


@dataclass
class ScoreTable:
    """Dimension scores per resolved image path: ``rows[path] = (where, {dimension: value or None})``."""

    dimensions: tuple[str, ...]
    rows: dict[Path, tuple[str, dict[str, float | None]]]
    source: str
    written: frozenset[str] = frozenset()  # the image paths as written in the file (for error hints)
    root: Path | None = None  # the folder relative paths were resolved against
    _by_name: dict[str, list[str]] | None = field(default=None, repr=False, compare=False)

    def written_named(self, name: str) -> list[str]:
        """The image paths as written whose file name is ``name`` (an index built once, for error hints)."""
        if self._by_name is None:
            self._by_name = {}
            for w in sorted(self.written):
                self._by_name.setdefault(Path(w).name, []).append(w)
        return self._by_name.get(name, [])


@dataclass(frozen=True, eq=False)
class PairData:
    """Pairs ready to fit: ``x_a``, ``x_b`` [n, d], label codes [n], and what was skipped."""

    dimensions: tuple[str, ...]
    x_a: np.ndarray
    x_b: np.ndarray
    labels: np.ndarray
    skipped: tuple[str, ...] = field(default=())

    @property
    def n_pairs(self) -> int:
        return len(self.labels)

    @property
    def n_ties(self) -> int:
        return int(np.sum(self.labels == LABEL_TIE))


class BadRows:
    """Where bad rows go: raise ``ManifestError`` (a ``ValueError``) at the first, or collect them (``skip_bad``)."""

    def __init__(self, skip_bad: bool) -> None:
        self.skip_bad = skip_bad
        self.skipped: list[str] = []

    def __call__(self, message: str) -> None:
        if not self.skip_bad:
            raise ManifestError(f"{message}; {_SKIP_HINT}.")
        self.skipped.append(message)


def _number(value: Any) -> float | None:
    """A finite float, or ``None`` for anything else (strings, null, booleans, NaN, infinities)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


MAX_ABS_SCORE = 1e9  # larger scores overflow the fit's products (weights up to max_abs_weight times differences)


def _bad_value(row: Mapping[str, Any]) -> str | None:
    """What is wrong with a score in ``row``: a number written as a string (it would be dropped as a dimension in
    silence), or one too large for the fit; ``None`` when nothing is.

    >>> _bad_value({"image": "a.png", "lighting": "3.2"}), _bad_value({"image": "a.png", "layout": 1e200})
    ("'lighting' is the string '3.2', not a number; write it unquoted, e.g. 3.2", "'layout' = 1e+200 is beyond \
±1e+09, too large for the fit; rescale the scores (e.g. to 1-5) or fix the value")
    """
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


def read_pairs(
    path: str | Path,
    problems: BadRows | None = None,
    *,
    image_root: str | Path | None = None,
    allow_absolute_paths: bool = False,
) -> list[Pair]:
    """Parse a pairs file with ``reward.data.load_pairs`` (labels a/b/tie; paths relative to its folder, or to
    ``image_root``; absolute ones only with ``allow_absolute_paths``)."""
    from reward.data import load_pairs

    problems = problems or BadRows(skip_bad=False)
    try:
        manifest = load_pairs(
            path,
            skip_bad=problems.skip_bad,
            check_images=False,
            image_root=image_root,
            allow_absolute_paths=allow_absolute_paths,
        )
    except ManifestError as err:
        if problems.skip_bad:
            raise
        raise ManifestError(f"{str(err).rstrip('.')}; {_SKIP_HINT}.") from err
    problems.skipped.extend(s.reason for s in manifest.skipped)
    pairs = []
    for row in manifest.rows:
        if not (isinstance(row.a, Path) and isinstance(row.b, Path)):
            problems(f"{row.where}: 'a' and 'b' must be image paths to match them with the scores")
            continue
        pairs.append(Pair(row.where, row.a, row.b, LABEL_NAMES[row.label]))
    return pairs


def evaluated_root(path: str | Path) -> Path | None:
    """The folder the image paths of ``path`` are relative to when ``reward/evaluate.py`` (or SFT's evaluation of
    ``data.test``) wrote it: its ``image_root``, else the evaluated manifest's folder, or a dataset's ``FOLDER``
    (``NAME:FOLDER[:SPLIT]``), read from the ``run.json`` in the same folder. ``None`` for any other file (paths
    relative to its own folder).
    """
    from reward.core.errors import ConfigError
    from reward.data.datasets import parse_source

    try:
        run = json.loads((Path(path).parent / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(run, dict) or not isinstance(run.get("settings"), dict):
        return None
    settings, inputs = run["settings"], run.get("inputs") or {}
    if isinstance(settings.get("image_root"), str):  # the images' folder the evaluated data named them from
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
    except ConfigError:
        return None
    if source is not None:
        return Path(source.folder).expanduser().resolve()
    manifest = Path(data).expanduser()  # a JSONL file's folder, or a save_to_disk folder
    return manifest.resolve() if manifest.is_dir() else manifest.resolve().parent if manifest.is_file() else None


def read_scores(
    path: str | Path,
    dimensions: Sequence[str] | None = None,
    problems: BadRows | None = None,
    root: str | Path | None = None,
    image_root: str | Path | None = None,
) -> ScoreTable:
    """Parse a scores file into a :class:`ScoreTable` (dimensions chosen as described in the module docstring).

    Relative image paths are resolved against ``root``; without it, against the evaluated manifest's folder for a
    ``scores.jsonl`` written by ``reward/evaluate.py`` (:func:`evaluated_root`), else ``image_root`` (the folder the
    pairs' images are named from), else the scores file's folder. Absolute ones are kept. Only keys are matched
    here, no image is read, so a path may point anywhere.
    """
    path = Path(path)
    problems = problems or BadRows(skip_bad=False)
    evaluated = evaluated_root(path) if root is None else None
    fallback = Path(image_root).expanduser().resolve() if image_root is not None else path.resolve().parent
    folder = Path(root).resolve() if root is not None else evaluated or fallback
    if evaluated is not None:
        logger.info("%s: image paths relative to the evaluated data's folder %s (its run.json)", path, evaluated)
    rows: dict[Path, tuple[str, dict[str, float | None]]] = {}
    seen: dict[str, None] = {}  # numeric non-metadata keys in order of first appearance
    written: set[str] = set()
    for line, row in iter_jsonl(path):
        where = f"{path}:{line}"
        if isinstance(row, ManifestError):
            problems(str(row).rstrip("."))
            continue
        image = row.get("image")
        if not (isinstance(image, str) and image.strip()):
            problems(f'{where}: score row has no "image" path (got {image!r}); write rows like {_SCORE_EXAMPLE}')
            continue
        bad = _bad_value(row)
        if bad:
            problems(f"{where}: {bad}")
            continue
        image_path = (folder / image).resolve()
        written.add(Path(image).as_posix())
        values = {k: _number(v) for k, v in row.items() if k not in METADATA_KEYS}
        for key, value in row.items():
            if key not in METADATA_KEYS and isinstance(value, int | float) and not isinstance(value, bool):
                seen.setdefault(key)
        if image_path in rows:
            first_where, old = rows[image_path]
            clash = [k for k, v in values.items() if k in old and old[k] != v]
            if clash:
                problems(
                    f"{where}: image {image!r} already has {clash} with other values at {first_where}; "
                    "keep one score per image and dimension"
                )
                continue
            old.update(values)
        else:
            rows[image_path] = (where, values)
    if dimensions is None:
        dims = tuple(seen)
        if not dims:
            raise ValueError(
                f"{path}: no dimension columns found (numeric keys other than {sorted(METADATA_KEYS)}); write rows "
                f"like {_SCORE_EXAMPLE} or name them with dimensions=[...]."
            )
    else:
        dims = tuple(dimensions)
        absent = [d for d in dims if all(d not in values for _, values in rows.values())]
        if absent:
            raise ValueError(
                f"{path}: dimension(s) {absent} requested with dimensions=[...] appear in no row; the file has "
                f"{list(seen)}. Fix the names in dimensions=[...] or add those scores."
            )
    return ScoreTable(dims, rows, str(path), frozenset(written), folder)


def _to_numpy(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):  # a torch tensor
        values = values.detach().float().cpu().numpy()
    return np.asarray(values, dtype=np.float64).reshape(-1)


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
        out = model.score([load_image(p) for p in batch])
        dims = getattr(out, "dimensions", None)
        if not dims:
            raise ValueError(
                f"reward={name!r} returned no per-dimension scores (RewardOutput.dimensions is empty); fusion needs "
                "one score per dimension. Use a reward with dimensions (e.g. sa-iqa) or pass scores=SCORES.jsonl."
            )
        found = found or tuple(dims)
        columns = {d: _to_numpy(v) for d, v in dims.items()}
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


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False


def _root_hint(path: Path, pairs_root: Path | None, table: ScoreTable) -> str:
    """Why this pair image has no scores when the scores file has a row of the same relative path or file name:
    such a row resolves to another file and is never matched by name (two images may share one); the fix when
    the scores file's paths are really relative to another folder is ``scores_root=``."""
    rel = path.relative_to(pairs_root).as_posix() if pairs_root is not None and path.is_relative_to(pairs_root) else ""
    named = table.written_named(path.name)
    if not named:
        return ""
    root = table.root or Path(table.source).resolve().parent
    others = [(w, (root / w).resolve()) for w in named[:3]]
    if any(p.is_file() and not _same_file(p, path) for _, p in others):
        shown = ", ".join(f"{w!r} -> {p}" for w, p in others)
        return (
            f". The scores file's row(s) of the same name ({shown}, relative to {root}) are other images, so they "
            "are not used for it (images are matched by path, never by file name): score this image, or, if the "
            "scores file's paths are relative to another folder, pass scores_root=THAT_FOLDER"
        )
    if rel in table.written and pairs_root is not None:
        return (
            f". The scores file has a row for {rel!r} but resolves it against {root}, where no such file is: if its "
            f"paths are relative to {pairs_root}, pass scores_root={pairs_root}"
        )
    return ""


def assemble(pairs: Sequence[Pair], table: ScoreTable, problems: BadRows, pairs_root: Path | None = None) -> PairData:
    """Look up both images of every pair in ``table``; pairs with unscored images go to ``problems``."""
    dims = table.dimensions
    x_a, x_b, codes = [], [], []
    for pair in pairs:
        vectors = []
        for key, path in (("a", pair.a), ("b", pair.b)):
            entry = table.rows.get(path)
            if entry is None:
                problems(
                    f"{pair.where}: image {key!r} ({path}) has no scores in {table.source}; "
                    f'add a row {{"image": ..., {", ".join(f"{d!r}: ..." for d in dims)}}} for it'
                    + _root_hint(path, pairs_root, table)
                )
                break
            where, values = entry
            missing = [d for d in dims if values.get(d) is None]
            if missing:
                problems(
                    f"{pair.where}: image {key!r} ({path}) lacks dimension(s) {missing} or they are not "
                    f"finite numbers (its scores: {where}); add them or choose dimensions=[...] every image has"
                )
                break
            vectors.append([values[d] for d in dims])
        else:
            x_a.append(vectors[0])
            x_b.append(vectors[1])
            codes.append(pair.code)
    shape = (len(codes), len(dims))
    return PairData(
        dimensions=dims,
        x_a=np.asarray(x_a, dtype=np.float64).reshape(shape),
        x_b=np.asarray(x_b, dtype=np.float64).reshape(shape),
        labels=np.asarray(codes, dtype=np.int8),
        skipped=tuple(problems.skipped),
    )


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
    """Pairs plus their dimension scores, from a scores file or (``reward=name``) scored by a reward model. The pairs'
    image paths are relative to their file's folder or to ``image_root`` (absolute only with
    ``allow_absolute_paths``)."""
    if (scores is None) == (reward is None):
        raise ValueError("Give exactly one source of dimension scores: scores=SCORES.jsonl or reward=NAME.")
    problems = BadRows(skip_bad)
    rows = read_pairs(pairs, problems, image_root=image_root, allow_absolute_paths=allow_absolute_paths)
    if scores is not None:
        table = read_scores(scores, dimensions, problems, root=scores_root, image_root=image_root)
    else:
        kept = []
        for row in rows:
            absent = [str(p) for p in (row.a, row.b) if not p.is_file()]
            if absent:
                folder = "image_root" if image_root is not None else "the pairs file's folder"
                problems(f"{row.where}: image file(s) {absent} not found (paths are relative to {folder})")
            else:
                kept.append(row)
        rows = kept
        images = list(dict.fromkeys(p for row in rows for p in (row.a, row.b)))
        table = score_images_with_reward(images, reward, reward_cfg, dimensions=dimensions, batch_size=batch_size)
    pairs_root = Path(image_root).expanduser().resolve() if image_root is not None else Path(pairs).resolve().parent
    data = assemble(rows, table, problems, pairs_root=pairs_root)
    if data.skipped:
        logger.warning(
            "Skipped %d bad row(s) (skip_bad=true); the first: %s", len(data.skipped), "; ".join(data.skipped[:3])
        )
    if data.n_pairs == 0:
        raise ValueError(f"{pairs}: no usable pairs ({len(data.skipped)} skipped); see the messages above.")
    return data
