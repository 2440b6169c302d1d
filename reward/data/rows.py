"""Rated images, preference pairs and inpainting tasks from any source, as one row type each (docs/datasets.md, "Data
formats"). A JSONL manifest, a ``save_to_disk`` folder or ``datasets.Dataset``, ``hf:NAME_OR_DIR[:SPLIT]``
(:mod:`reward.data.hf`) or ``NAME:FOLDER[:SPLIT]`` (:mod:`reward.data.datasets`) becomes the same ``(line, where,
row)`` items, then every row is read alike: image paths resolved against the source's folder (or ``image_root``),
every row carrying ``where`` (``file:line``) and a rating row its image's ``key`` (its name in outputs).
"""

from __future__ import annotations

import hashlib
import logging
import math
import numbers
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Generic, TypeVar

from reward.core.errors import MissingInputError
from reward.data.images import DEFAULT_MAX_PIXELS, DatasetImage, ImageError, image_size, load_image
from reward.data.labels import parse_label
from reward.data.manifest import ManifestError, iter_jsonl, resolve_image_path

logger = logging.getLogger(__name__)

ImageRef = Path | DatasetImage
Item = tuple[int, str, dict | ManifestError]  # (line, "file:line", the row or why it cannot be read)
EXAMPLES = {
    "ratings": '{"image": "img/001.png", "dimension": "overall", "mos": 3.5}',
    "pairs": '{"a": "img/001.png", "b": "img/002.png", "label": "a"}',
    "inpainting": '{"image": "img/001.png", "mask": "mask/001.png", "prompt": "a red door"}',
    "prompts": '{"prompt": "a reading nook by a rainy window"}',
}
REQUIRED = {
    "ratings": ("image", "dimension"),
    "pairs": ("a", "b", "label"),
    "inpainting": ("image", "mask", "prompt"),
    "prompts": ("prompt",),
}
MAX_VOTE_BINS = 100  # rating values a row's vote distribution may have (AVA's 10 is the most a dataset has)


@dataclass(frozen=True)
class RatingRow:
    """One rated image: ``mos`` on the data's scale for ``dimension``."""

    image: ImageRef
    dimension: str
    mos: float
    line: int  # the row's line in its file (its number in a table)
    extra: dict = field(default_factory=dict)
    where: str = field(default="", compare=False)  # "file:line", for messages
    key: str = field(default="", compare=False)  # the image's name in outputs (scores.jsonl)


@dataclass(frozen=True)
class PairRow:
    """One preference pair: ``label`` is ``"a"``, ``"b"`` (the preferred image) or ``"tie"``."""

    a: ImageRef
    b: ImageRef
    label: str
    line: int
    extra: dict = field(default_factory=dict)
    where: str = field(default="", compare=False)


@dataclass(frozen=True)
class InpaintRow:
    """One inpainting task: the image, its mask (the same size) and the prompt."""

    image: ImageRef
    mask: ImageRef
    prompt: str
    line: int
    extra: dict = field(default_factory=dict)
    where: str = field(default="", compare=False)


@dataclass(frozen=True)
class PromptRow:
    """One text-to-image task: the prompt."""

    prompt: str
    line: int
    extra: dict = field(default_factory=dict)
    where: str = field(default="", compare=False)


@dataclass(frozen=True)
class SkippedRow:
    """A row left out with ``skip_bad=True``: its line (row number) and the error message."""

    line: int
    reason: str


RowT = TypeVar("RowT", RatingRow, PairRow, InpaintRow, PromptRow)


@dataclass
class ManifestResult(Generic[RowT]):
    """The usable rows of a source, the skipped ones, its name, and what outputs record about a dataset source."""

    rows: list[RowT]
    skipped: list[SkippedRow] = field(default_factory=list)
    source: str = ""  # the file or dataset the rows came from
    info: dict[str, Any] = field(default_factory=dict)  # a dataset's scale, split rule, file read, ...

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[RowT]:
        return iter(self.rows)


def _image(
    value: Any, name: str, where: str, *, folder: Path | None, named: str, absolute: bool, check: bool, max_pixels: Any
) -> tuple[ImageRef, str, tuple[int, int] | None]:
    """The image of field ``name``, its key and, when ``check``, its size (decoded once, now): relative paths read
    from ``folder`` (``named`` so in messages; ``None``: used as given), absolute ones where allowed."""
    if isinstance(value, DatasetImage):
        image, key = value, value.key
    elif isinstance(value, str):
        relative = not os.path.isabs(value)
        if folder is None:
            image = Path(value)
        else:
            image = resolve_image_path(folder, value, where=where, allow_absolute=absolute)
        key = Path(os.path.normpath(value)).as_posix() if relative else str(image)
    else:
        raise ManifestError(f"{where}: {name!r} must be an image path (string), got {type(value).__name__}.")
    if not check:
        return image, key, None
    hint = f"relative to {named} {folder}" if folder else "as given"
    return image, key, _checked(image, f"{where}: {name!r} image", value, hint, max_pixels, decode=True)


def _checked(image: ImageRef, what: str, value: Any, hint: str, max_pixels: Any, *, decode: bool) -> tuple[int, int]:
    """The size of ``image`` (``what``: ``file:line: 'field' image``; ``value``: as the row names it), decoded or
    read from its header; a missing or unusable one is a ``ManifestError`` saying so."""
    try:
        return load_image(image, max_pixels=max_pixels).size if decode else image_size(image, max_pixels=max_pixels)
    except FileNotFoundError as err:
        raise ManifestError(
            f"{what} {value!r} not found at {image} (paths are read {hint}); fix the path or add the file "
            "(image_root=DIR reads relative paths from another folder)."
        ) from err
    except ImageError as err:
        raise ManifestError(f"{what} unusable: {err} Replace the file or drop the row.") from err


def check_row_images(
    result: ManifestResult, *, skip_bad: bool = False, max_pixels: int | None = DEFAULT_MAX_PIXELS, skip_key: str = ""
) -> ManifestResult:
    """``result`` (read with ``check_images=False``) with every image of its rows checked from its header, nothing
    decoded (it exists, is an image, within ``max_pixels``): a bad row raises its ``ManifestError`` naming file and
    line, or with ``skip_bad`` joins the skipped rows (counted). ``skip_key``: the setting that skips (its fix)."""
    rows, skipped = [], list(result.skipped)
    for row in result.rows:
        try:
            for name in ("image", "a", "b", "mask"):
                if isinstance(image := getattr(row, name, None), Path | DatasetImage):
                    where = f"{row.where}: {name!r} image"
                    _checked(image, where, str(image), "as resolved", max_pixels, decode=False)
        except ManifestError as err:
            if not skip_bad:
                raise _with_fix(err, skip_key) from None
            logger.warning("skipping bad row: %s", err)
            skipped.append(SkippedRow(row.line, str(err)))
            continue
        rows.append(row)
    if not rows:
        raise ManifestError(
            f"{result.source}: all {len(skipped)} rows are bad, nothing to use; first: {skipped[0].reason}"
        )
    return ManifestResult(rows, sorted(skipped, key=lambda s: s.line), result.source, result.info)


def _with_fix(err: ManifestError, skip_key: str) -> ManifestError:
    """A bad row's error, ending with how to skip such rows: ``skip_key=true`` (the setting of the command that read
    it); unchanged without ``skip_key``."""
    text = str(err)
    if not skip_key or f"{skip_key}=true" in text:
        return err
    if "skip_bad=true" in text:
        return ManifestError(text.replace("skip_bad=true", f"{skip_key}=true"))
    return ManifestError(f"{text.rstrip('.')}; or pass {skip_key}=true to skip and count such rows.")


def _open(
    source: Any, kind: str, default_split: str, columns: Any, image_root: Any
) -> tuple[str, Path | None, dict, Iterable[Item]]:
    """The source's name, its images' folder, what outputs record about it, and its ``(line, where, row)`` items."""
    from reward.data.datasets import open_dataset, parse_source

    named = parse_source(source)
    if named is not None and named.name != "hf":  # a public dataset reads its own FOLDER
        return open_dataset(named, default_split=default_split, pairs=kind == "pairs")
    root = Path(image_root).expanduser() if image_root is not None else None
    if root is not None and not root.is_dir():
        raise MissingInputError(f"image_root={image_root}: no such folder; name the folder your images are in")
    if named is not None:  # hf:NAME_OR_DIR[:SPLIT], its columns renamed to a manifest's keys
        from reward.data.hf import open_hf

        ds, folder, info = open_hf(named, columns, default_split=default_split)
        return str(named), root or folder, info, _table_items(ds, str(named))
    if isinstance(source, str | Path) and not Path(source).is_dir():
        path = Path(source)
        return str(path), root or path.parent, {}, ((n, f"{path}:{n}", row) for n, row in iter_jsonl(path))
    import datasets

    name, folder = "the DatasetDict", None
    if isinstance(source, str | Path):
        name, folder = str(source), Path(source)
        try:
            source = datasets.load_from_disk(name)
        except FileNotFoundError as err:
            raise ManifestError(
                f"{name} is a folder but not a dataset saved with save_to_disk ({err}); pass a JSONL manifest file."
            ) from err
    elif isinstance(source, datasets.Dataset):
        name = f"dataset {source.info.dataset_name or '<in memory>'}"
    if isinstance(source, datasets.DatasetDict):
        raise ManifestError(
            f"{name} holds splits {list(source)}; pass one split (its folder), e.g. {next(iter(source))!r}."
        )
    if not isinstance(source, datasets.Dataset):
        raise TypeError(
            f"cannot read a manifest from {type(source).__name__}; pass a JSONL path, a folder saved with "
            "datasets' save_to_disk, or a datasets.Dataset."
        )
    return name, root or folder, {}, _table_items(source, name)


def _table_items(ds: Any, name: str) -> Iterator[Item]:
    """The rows of a ``datasets`` table, its image columns left encoded: each cell a :class:`DatasetImage`."""
    import datasets

    images = [n for n, f in ds.features.items() if isinstance(f, datasets.Image)]
    for column in images:
        ds = ds.cast_column(column, datasets.Image(decode=False))
    for i, row in enumerate(ds, start=1):
        for column in images:
            cell = row[column] or {}
            if cell.get("bytes"):  # named by content too: tables keep base names (LIVE's jpg/img1.bmp, gblur/img1.bmp)
                digest = hashlib.sha256(cell["bytes"]).hexdigest()[:16]
                key = f"{cell['path']}#{digest}" if cell.get("path") else f"sha256:{digest}"
            elif cell.get("path"):
                key = os.path.normpath(cell["path"])
            else:
                continue
            row[column] = DatasetImage(ds, i - 1, column, f"{column}:{key}")
        yield i, f"{name} row {i}", row


def _number(value: Any, what: str, where: str, bounds: Any = None) -> float:
    """``value`` as a finite float (a JSON number, not a string), inside ``bounds`` when given."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ManifestError(f"{where}: {what} must be a finite number, got {value!r}; write it unquoted, e.g. 3.5.")
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        name = what.strip("'").removeprefix("each ")
        raise ManifestError(
            f"{where}: {name} {value:g} is outside mos_range {tuple(bounds)}; fix the value or the range."
        )
    return float(value)


def _spread(row: dict, where: str, mos_range: Any) -> None:
    """A row's ``std`` is a number >= 0 no wider than the scale; its ``distribution`` 2 to ``MAX_VOTE_BINS`` vote
    counts >= 0 with a positive, finite sum: values soft targets turn into work are bounded."""
    if row.get("std") is not None:
        std = _number(row["std"], "'std'", where)
        width = None if mos_range is None else mos_range[1] - mos_range[0]
        if std < 0 or (width is not None and std > width):
            bound = "" if width is None else f" and at most the scale's width {width:g} (mos_range {tuple(mos_range)})"
            raise ManifestError(f"{where}: 'std' {std:g} must be >= 0{bound}; fix the value or drop it.")
    votes = row.get("distribution")
    if votes is None:
        return
    if not isinstance(votes, list | tuple) or not 2 <= len(votes) <= MAX_VOTE_BINS:
        shown = f"{len(votes)} values" if isinstance(votes, list | tuple) else repr(votes)[:40]
        raise ManifestError(
            f"{where}: 'distribution' must be a list of 2 to {MAX_VOTE_BINS} vote counts, got {shown}."
        )
    counts = [_number(v, "each vote count in 'distribution'", where) for v in votes]
    if min(counts) < 0 or not 0 < sum(counts) < math.inf:
        raise ManifestError(
            f"{where}: 'distribution' {list(votes)[:10]} must be counts >= 0 with a positive, finite sum."
        )


def _text(row: dict, key: str, where: str, *, empty: bool = False) -> str:
    value = row[key]
    if not isinstance(value, str) or not (empty or value.strip()):
        raise ManifestError(f"{where}: {key!r} must be {'a' if empty else 'a non-empty'} string, got {value!r}.")
    return value


def _parse(kind: str, row: dict, line: int, where: str, images: Callable, mos_range: Any) -> Any:
    """One row of ``kind`` (its required fields are there)."""
    extra = {k: v for k, v in row.items() if k not in REQUIRED[kind]}
    if kind == "pairs":
        label = parse_label(row["label"])
        if label is None:
            raise ManifestError(f"{where}: 'label' must be 'a', 'b' or 'tie', got {row['label']!r}.")
        return PairRow(images(row["a"], "a", where)[0], images(row["b"], "b", where)[0], label, line, extra, where)
    if kind == "prompts":
        return PromptRow(_text(row, "prompt", where), line, extra, where)
    if kind == "inpainting":
        prompt = _text(row, "prompt", where, empty=True)
        image, _, size = images(row["image"], "image", where)
        mask, _, mask_size = images(row["mask"], "mask", where)
        if size and mask_size and size != mask_size:
            raise ManifestError(f"{where}: mask is {mask_size} but image is {size}; masks must match their image.")
        return InpaintRow(image, mask, prompt, line, extra, where)
    if row.get("mos") is not None:
        mos = _number(row["mos"], "'mos'", where, mos_range)
        extra.pop("mos")
    elif isinstance(row.get("ratings"), list | tuple) and row["ratings"]:
        mos = sum(_number(r, "each rating", where, mos_range) for r in row["ratings"]) / len(row["ratings"])
    elif row.get("ratings") is not None:
        raise ManifestError(f"{where}: 'ratings' must be a non-empty list of numbers, got {row['ratings']!r}.")
    else:
        raise ManifestError(f"{where}: missing field 'mos' (or 'ratings'); a row looks like {EXAMPLES[kind]}.")
    _spread(row, where, mos_range)
    image, key, _ = images(row["image"], "image", where)
    return RatingRow(image, _text(row, "dimension", where), mos, line, extra, where, key)


def _load(
    source: Any,
    kind: str,
    *,
    skip_bad: bool = False,
    check_images: bool = True,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    image_root: str | Path | None = None,
    allow_absolute_paths: bool = False,
    mos_range: tuple[float, float] | None = None,
    default_split: str = "all",
    columns: Any = None,
    skip_key: str = "",
) -> ManifestResult:
    """Every row of ``source`` read as ``kind``; a bad one raises its ``ManifestError`` (file and line; ``skip_key``:
    the setting that skips such rows, named as the fix) or, with ``skip_bad``, is logged and counted. An empty source,
    or one whose rows are all bad, always raises."""
    name, folder, info, items = _open(source, kind, default_split, columns, image_root)
    from_root = image_root is not None and folder == Path(image_root).expanduser()
    named = "image_root" if from_root else "the manifest's folder"
    images = partial(
        _image, folder=folder, named=named, absolute=allow_absolute_paths, check=check_images, max_pixels=max_pixels
    )
    rows, skipped, total = [], [], 0
    for line, where, row in items:
        total += 1
        try:
            if isinstance(row, ManifestError):
                raise row
            missing = [f for f in REQUIRED[kind] if row.get(f) is None]
            if missing:
                raise ManifestError(
                    f"{where}: missing field(s) {', '.join(map(repr, missing))}; a row looks like {EXAMPLES[kind]}."
                )
            rows.append(_parse(kind, row, line, where, images, mos_range))
        except ManifestError as err:
            if not skip_bad:
                raise _with_fix(err, skip_key) from None
            logger.warning("skipping bad row: %s", err)
            skipped.append(SkippedRow(line, str(err)))
    if total == 0:
        raise ManifestError(
            f"{name}: empty manifest (no rows); write one JSON object per line, e.g. {EXAMPLES[kind]}."
        )
    if not rows:
        raise ManifestError(f"{name}: all {total} rows are bad, nothing to use; first problem: {skipped[0].reason}")
    if skipped:
        logger.warning("%s: skipped %d of %d rows (skip_bad=True)", name, len(skipped), total)
    return ManifestResult(rows, skipped, name, info)


def load_ratings(source: Any, **options: Any) -> ManifestResult[RatingRow]:
    """The rated images of ``source``: each an image, a dimension and a MOS (or raw ``ratings``, averaged).

    Options: ``skip_bad`` (skip and count bad rows instead of raising; ``skip_key``: the setting that does, named in
    the refusal of a bad row), ``check_images`` (decode every image once,
    now: default true), ``max_pixels`` (the decode guard), ``mos_range=(low, high)`` (refuse a MOS or rating outside
    it), ``image_root`` and ``allow_absolute_paths`` (where relative paths are read; absolute ones admitted; not for
    ``NAME:FOLDER``, read from its own folder), ``default_split`` (of a dataset source naming none), ``columns``
    (of ``hf:``: a :class:`reward.data.hf.HfColumns` or a mapping). A dataset's description (scale, split rule, file
    read) is the result's ``info``.
    """
    return _load(source, "ratings", **options)


def load_pairs(source: Any, **options: Any) -> ManifestResult[PairRow]:
    """The preference pairs of ``source`` (``label`` a/b/tie in any case); options as :func:`load_ratings`'s. From a
    dataset ``NAME:FOLDER[:SPLIT]`` (``train`` unless named) pairs are drawn from its MOS: each image with 5 others,
    the higher MOS preferred."""
    return _load(source, "pairs", **{"default_split": "train", **options})


def load_inpainting(source: Any, **options: Any) -> ManifestResult[InpaintRow]:
    """The inpainting tasks of ``source`` (``image``, ``mask`` of the same size, ``prompt``); options as
    :func:`load_ratings`'s."""
    return _load(source, "inpainting", **options)


def load_prompts(source: Any, **options: Any) -> ManifestResult[PromptRow]:
    """The prompts of ``source`` (text-to-image tasks, ``{"prompt": ...}`` rows, each non-empty); options as
    :func:`load_ratings`'s."""
    return _load(source, "prompts", **options)
