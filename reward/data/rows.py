"""Manifests of rated images, preference pairs and inpainting tasks, from JSONL files or Hugging Face datasets.

Row formats (docs/datasets.md, "Data formats"); image paths are relative to the manifest's folder (or to the
``image_root`` a command is given; absolute ones only with ``allow_absolute_paths``):

- ratings: ``{"image", "dimension", "mos"}`` or ``{"image", "dimension", "ratings": [...]}`` (MOS = mean);
- pairs: ``{"a", "b", "label": "a" | "b" | "tie"}``;
- inpainting: ``{"image", "mask", "prompt"}``.

A source is a JSONL path, a folder written by ``datasets.Dataset.save_to_disk`` (paths in it are relative to
that folder), a ``datasets.Dataset`` (paths used as given) or a public IQA dataset by name, ``NAME:FOLDER[:SPLIT]``
(:mod:`reward.data.datasets`: its own files read from FOLDER; pairs are drawn from its MOS), or a ``datasets``
dataset ``hf:NAME_OR_DIR[:SPLIT]`` with its columns named (:mod:`reward.data.hf`). Image columns may hold
paths or PIL images; PIL images are returned converted to RGB, paths as resolved ``Path`` objects. Other keys go to
``extra``.
"""

from __future__ import annotations

import hashlib
import io
import logging
import math
import numbers
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

from PIL import Image

from reward.core.errors import MissingInputError
from reward.data.images import DEFAULT_MAX_PIXELS, ImageError, check_pixels, load_image, to_rgb
from reward.data.labels import parse_label
from reward.data.manifest import ManifestError, iter_jsonl, resolve_image_path

__all__ = [  # load_image and ImageError live in reward.data.images and are re-exported here
    "DatasetImage",
    "ImageError",
    "InpaintRow",
    "ManifestError",
    "ManifestResult",
    "PairRow",
    "RatingRow",
    "SkippedRow",
    "load_image",
    "load_inpainting",
    "load_pairs",
    "load_ratings",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DatasetImage:
    """An image cell of a ``datasets`` table, decoded only when :meth:`load` is called (streamed input).

    ``key`` names the image by its content (:func:`cell_name`: the stored file name and a digest of the bytes), so
    that rows of one image on several dimensions are scored once and two images sharing a file name never merge.
    The table is memory-mapped; pickling this (to DataLoader workers) is cheap for a dataset loaded from disk.
    """

    dataset: Any = field(repr=False, compare=False)
    index: int
    column: str
    key: str

    def load(self, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> Image.Image:
        value = self.dataset[self.index][self.column]
        if isinstance(value, Image.Image):
            check_pixels(value.size, max_pixels, self.key)
            return to_rgb(value)
        if isinstance(value, dict) and value.get("bytes"):
            return load_image(io.BytesIO(value["bytes"]), max_pixels=max_pixels)
        return load_image(value.get("path") if isinstance(value, dict) else value, max_pixels=max_pixels)


def cell_name(value: dict[str, Any]) -> str:
    """The name an encoded image cell ``{"bytes", "path"}`` is scored under: its stored file name and a digest of its
    bytes, since tables keep only the base name (LIVE's ``jpg/img1.bmp`` and ``gblur/img1.bmp`` are both
    ``img1.bmp``): two different images never share a name, and one image on several rows is scored once. A cell
    without bytes (a file the table points to) is named by its normalised path.

    >>> cell_name({"bytes": b"abc", "path": "img1.bmp"}), cell_name({"bytes": None, "path": "./a/../b.png"})
    ('img1.bmp#ba7816bf8f01cfea', 'b.png')
    """
    data, path = value.get("bytes"), value.get("path")
    if data:
        digest = hashlib.sha256(data).hexdigest()[:16]
        return f"{path}#{digest}" if path else f"sha256:{digest}"
    return os.path.normpath(str(path))


ImageRef = Path | Image.Image | DatasetImage
RATING_EXAMPLE = '{"image": "img/001.png", "dimension": "overall", "mos": 3.5}'
PAIR_EXAMPLE = '{"a": "img/001.png", "b": "img/002.png", "label": "a"}'
INPAINT_EXAMPLE = '{"image": "img/001.png", "mask": "mask/001.png", "prompt": "a red door"}'


@dataclass(frozen=True)
class RatingRow:
    """One rated image: ``mos`` on the manifest's scale for ``dimension``; unknown keys in ``extra``."""

    image: ImageRef
    dimension: str
    mos: float
    line: int  # 1-based line of the JSONL file (row number for datasets)
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PairRow:
    """One preference pair: ``label`` is ``"a"``, ``"b"`` (the preferred image) or ``"tie"``."""

    a: ImageRef
    b: ImageRef
    label: str  # "a", "b" or "tie"
    line: int
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class InpaintRow:
    """One inpainting task: the image, its mask (same size) and the prompt."""

    image: ImageRef
    mask: ImageRef
    prompt: str
    line: int
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SkippedRow:
    """A row left out with ``skip_bad=True``: its line (row number) and the error message."""

    line: int
    reason: str


RowT = TypeVar("RowT", RatingRow, PairRow, InpaintRow)


@dataclass
class ManifestResult(Generic[RowT]):
    """The usable rows of a manifest, the skipped ones, and where they came from."""

    rows: list[RowT]
    skipped: list[SkippedRow] = field(default_factory=list)
    source: str = ""  # file or dataset the rows came from
    base: Path | None = None  # the folder the rows' image paths are relative to (resolved; None: as given)
    info: dict[str, Any] = field(default_factory=dict)  # a dataset source's scale, split rule, file read, ...

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[RowT]:
        return iter(self.rows)


@dataclass(frozen=True)
class _Context:
    name: str  # file or dataset, used in messages
    base_dir: Path | None  # folder image paths are relative to; None: paths used as given
    jsonl: bool
    check_images: bool
    max_pixels: int | None
    dataset: Any = None  # the datasets table when images stay encoded (lazy_images)
    info: dict[str, Any] = field(default_factory=dict)  # a dataset source's description (ManifestResult.info)
    allow_absolute: bool = False  # absolute image paths are read (allow_absolute_paths=true)
    image_root: bool = False  # base_dir is the image_root the user named, not the manifest's own folder

    def where(self, line: int) -> str:
        if self.info.get("pairs"):  # pairs drawn from a dataset's MOS
            return f"{self.name} pair {line}"
        if "file" in self.info:  # a dataset source: the line of its metadata file
            return f"{self.info['file']}:{line}"
        return f"{self.name}:{line}" if self.jsonl else f"{self.name} row {line}"


# ---------------------------------------------------------------------------------------------- sources

_Item = tuple[int, dict | ManifestError]  # (line, row or the reason it could not be read)


def _open_source(
    source: Any,
    check_images: bool,
    max_pixels: int | None,
    lazy_images: bool = False,
    default_split: str = "all",
    pairs: bool = False,
    columns: Any = None,
    image_root: str | Path | None = None,
    allow_absolute: bool = False,
) -> tuple[_Context, Iterable[_Item]]:
    ctx, items = _open_rows(source, check_images, max_pixels, lazy_images, default_split, pairs, columns)
    if image_root is not None and "file" not in ctx.info:  # a dataset by name (NAME:FOLDER) reads its own FOLDER
        root = Path(image_root).expanduser()
        if not root.is_dir():
            raise MissingInputError(f"image_root={image_root}: no such folder; name the folder your images are in")
        ctx = replace(ctx, base_dir=root, image_root=True)
    return replace(ctx, allow_absolute=allow_absolute), items


def _open_rows(
    source: Any,
    check_images: bool,
    max_pixels: int | None,
    lazy_images: bool,
    default_split: str,
    pairs: bool,
    columns: Any,
) -> tuple[_Context, Iterable[_Item]]:
    from reward.data.datasets import open_dataset, pair_items, parse_source
    from reward.data.hf import open_hf, parse_hf

    hf = parse_hf(source)
    if hf is not None:  # hf:NAME_OR_DIR[:SPLIT]: a datasets dataset, its columns renamed to a manifest's keys
        ds, base, info = open_hf(hf, columns, default_split=default_split)
        ds = _encoded(ds) if lazy_images else ds
        ctx = _Context(str(hf), base, False, check_images, max_pixels, ds if lazy_images else None, info=info)
        return ctx, _iter_dataset(ds, ctx)
    named = parse_source(source)
    if named is not None:  # NAME:FOLDER[:SPLIT]: the dataset's own files, as manifest rows
        opened = open_dataset(named, default_split=default_split)
        info = dict(opened.info)
        if pairs:
            info["pairs"] = "drawn from the MOS: each image with 5 others (seeded), the higher MOS preferred"
        items = pair_items(opened) if pairs else opened.items
        return _Context(str(opened.source), opened.folder, False, check_images, max_pixels, info=info), items
    if isinstance(source, str | Path):
        path = Path(source)
        if path.is_dir():
            ds = _encoded(_load_from_disk(path)) if lazy_images else _load_from_disk(path)
            ctx = _Context(str(path), path, False, check_images, max_pixels, ds if lazy_images else None)
            return ctx, _iter_dataset(ds, ctx)
        return _Context(str(path), path.parent, True, check_images, max_pixels), iter_jsonl(path)
    import datasets

    if isinstance(source, datasets.DatasetDict):
        raise ManifestError(f"got a DatasetDict with splits {list(source)}; pass one split, e.g. dataset['test'].")
    if not isinstance(source, datasets.Dataset):
        raise TypeError(
            f"cannot read a manifest from {type(source).__name__}; pass a JSONL path, a folder saved with "
            "datasets' save_to_disk, or a datasets.Dataset."
        )
    ds = _encoded(source) if lazy_images else source
    name = f"dataset {source.info.dataset_name or '<in memory>'}"
    ctx = _Context(name, None, False, check_images, max_pixels, ds if lazy_images else None)
    return ctx, _iter_dataset(ds, ctx)


def _encoded(ds: Any) -> Any:
    """The dataset with its image columns left encoded (``Image(decode=False)``): rows are read undecoded."""
    import datasets

    for name, feature in ds.features.items():
        if isinstance(feature, datasets.Image) and feature.decode:
            ds = ds.cast_column(name, datasets.Image(decode=False))
    return ds


def _load_from_disk(path: Path) -> Any:
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except FileNotFoundError as err:
        raise ManifestError(
            f"{path} is a folder but not a dataset saved with save_to_disk ({err}); pass a JSONL manifest file."
        ) from err
    if isinstance(ds, datasets.DatasetDict):
        raise ManifestError(f"{path} holds splits {list(ds)}; pass one split's folder, e.g. {path / next(iter(ds))}.")
    return ds


def _iter_dataset(ds: Any, ctx: _Context) -> Iterator[_Item]:
    """The rows of ``ds``; its decoded image columns are read encoded and opened by :func:`load_image` (the pixel
    count checked against ``max_pixels`` from the header, before decoding: a 13500x13500 image is a bad row, never a
    ``DecompressionBombError``)."""
    import datasets

    images = [n for n, f in ds.features.items() if isinstance(f, datasets.Image) and f.decode]
    table = _encoded(ds) if images else ds
    for line in range(1, len(ds) + 1):
        try:
            row = dict(table[line - 1])
            for name in images:
                row[name] = _opened(row[name], name, ctx.max_pixels)
        except ImageError as err:
            row = ManifestError(f"{ctx.where(line)}: {err}")
        except (OSError, SyntaxError, ValueError) as err:  # an image column that fails to decode
            row = ManifestError(f"{ctx.where(line)}: cannot decode the row ({err}); fix or drop the image.")
        yield line, row


def _opened(value: Any, column: str, max_pixels: int | None) -> Any:
    """An encoded image cell (``{"bytes", "path"}``) opened as :func:`load_image` does (``None`` stays ``None``)."""
    if not isinstance(value, dict):
        return value
    if value.get("bytes"):
        return load_image(io.BytesIO(value["bytes"]), max_pixels=max_pixels)
    if value.get("path"):
        return load_image(value["path"], max_pixels=max_pixels)
    raise ImageError(f"{column!r} holds neither image bytes nor a path")


# ---------------------------------------------------------------------------------------------- fields


def _require(row: dict, fields: tuple[str, ...], where: str, example: str) -> None:
    missing = [f for f in fields if row.get(f) is None]
    if missing:
        raise ManifestError(f"{where}: missing field(s) {', '.join(map(repr, missing))}; a row looks like {example}.")


def _number(value: Any, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ManifestError(f"{where}: {what} must be a finite number, got {value!r}; write it unquoted, e.g. 3.5.")
    return float(value)


def _in_range(value: float, what: str, where: str, mos_range: tuple[float, float] | None) -> float:
    if mos_range is not None and not mos_range[0] <= value <= mos_range[1]:
        raise ManifestError(
            f"{where}: {what} {value:g} is outside mos_range {tuple(mos_range)}; fix the value or the range."
        )
    return value


def _text(row: dict, key: str, where: str, *, allow_empty: bool = False) -> str:
    value = row[key]
    if not isinstance(value, str) or not (allow_empty or value.strip()):
        kind = "a string" if allow_empty else "a non-empty string"
        raise ManifestError(f"{where}: {key!r} must be {kind}, got {value!r}.")
    return value


def _image(value: Any, key: str, ctx: _Context, where: str, line: int = 0) -> tuple[ImageRef, tuple[int, int] | None]:
    """Resolve one image field to a Path (or RGB PIL image, or a lazy DatasetImage) and, if decoded, its size."""
    if ctx.dataset is not None and isinstance(value, dict) and (value.get("bytes") or value.get("path")):
        return DatasetImage(ctx.dataset, line - 1, key, f"{key}:{cell_name(value)}"), None
    if isinstance(value, dict):  # datasets Image(decode=False): {"bytes": ..., "path": ...}
        value = io.BytesIO(value["bytes"]) if value.get("bytes") else value.get("path")
    if isinstance(value, Image.Image | io.BytesIO):
        try:
            if isinstance(value, io.BytesIO):
                image = load_image(value, max_pixels=ctx.max_pixels)
            else:
                check_pixels(value.size, ctx.max_pixels, "in-memory image")
                image = to_rgb(value)
        except ImageError as err:
            raise ManifestError(f"{where}: {key!r} image unusable: {err}") from err
        return image, image.size
    if not isinstance(value, str | Path):
        raise ManifestError(f"{where}: {key!r} must be an image path (string), got {type(value).__name__}.")
    if ctx.base_dir is None:
        path = Path(value)
    else:
        path = resolve_image_path(ctx.base_dir, str(value), where=where, allow_absolute=ctx.allow_absolute)
    if not ctx.check_images:
        return path, None
    try:
        return path, load_image(path, max_pixels=ctx.max_pixels).size
    except FileNotFoundError as err:
        folder = "image_root" if ctx.image_root else "the manifest's folder"
        hint = f"relative to {folder} {ctx.base_dir}" if ctx.base_dir else "as given"
        raise ManifestError(
            f"{where}: {key!r} image {str(value)!r} not found at {path} (paths are read {hint}); "
            "fix the path or add the file (image_root=DIR reads relative paths from another folder)."
        ) from err
    except ImageError as err:
        raise ManifestError(f"{where}: {key!r} image unusable: {err} Replace the file or drop the row.") from err


def _extra(row: dict, used: tuple[str, ...]) -> dict:
    return {k: v for k, v in row.items() if k not in used}


# ---------------------------------------------------------------------------------------------- rows


def _rating(row: dict, ctx: _Context, line: int, mos_range: tuple[float, float] | None) -> RatingRow:
    where = ctx.where(line)
    _require(row, ("image", "dimension"), where, RATING_EXAMPLE)
    if row.get("mos") is not None:
        mos = _in_range(_number(row["mos"], "'mos'", where), "mos", where, mos_range)
        used: tuple[str, ...] = ("image", "dimension", "mos")
    elif row.get("ratings") is not None:
        ratings = row["ratings"]
        if not isinstance(ratings, list | tuple) or not ratings:
            raise ManifestError(f"{where}: 'ratings' must be a non-empty list of numbers, got {ratings!r}.")
        values = [_in_range(_number(r, "each rating", where), "rating", where, mos_range) for r in ratings]
        mos, used = sum(values) / len(values), ("image", "dimension")
    else:
        raise ManifestError(f"{where}: missing field 'mos' (or 'ratings'); a row looks like {RATING_EXAMPLE}.")
    _check_spread(row, where, mos_range)
    image, _ = _image(row["image"], "image", ctx, where, line)
    return RatingRow(image, _text(row, "dimension", where), mos, line, _extra(row, used))


MAX_VOTE_BINS = 100  # rating values a row's vote distribution may have (AVA's 10 is the most a dataset has)


def _check_spread(row: dict, where: str, mos_range: tuple[float, float] | None) -> None:
    """A row's ``std`` (of its ratings) and ``distribution`` (vote shares or counts per rating value), when given:
    values that soft targets turn into work, so each is bounded. A std is a finite number >= 0 no wider than the
    scale (ratings on ``[low, high]`` spread at most half of it); votes are 2 to ``MAX_VOTE_BINS`` finite numbers
    >= 0 with a positive, finite sum."""
    std = row.get("std")
    if std is not None:
        value = _number(std, "'std'", where)
        width = None if mos_range is None else mos_range[1] - mos_range[0]
        if value < 0 or (width is not None and value > width):
            bound = "" if width is None else f" and at most the scale's width {width:g} (mos_range {tuple(mos_range)})"
            raise ManifestError(f"{where}: 'std' {value:g} must be >= 0{bound}; fix the value or drop it.")
    votes = row.get("distribution")
    if votes is not None:
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


def _pair(row: dict, ctx: _Context, line: int) -> PairRow:
    where = ctx.where(line)
    _require(row, ("a", "b", "label"), where, PAIR_EXAMPLE)
    label = parse_label(row["label"])
    if label is None:
        raise ManifestError(f"{where}: 'label' must be 'a', 'b' or 'tie', got {row['label']!r}.")
    a, _ = _image(row["a"], "a", ctx, where)
    b, _ = _image(row["b"], "b", ctx, where)
    return PairRow(a, b, label, line, _extra(row, ("a", "b", "label")))


def _inpaint(row: dict, ctx: _Context, line: int) -> InpaintRow:
    where = ctx.where(line)
    _require(row, ("image", "mask", "prompt"), where, INPAINT_EXAMPLE)
    prompt = _text(row, "prompt", where, allow_empty=True)
    image, image_size = _image(row["image"], "image", ctx, where)
    mask, mask_size = _image(row["mask"], "mask", ctx, where)
    if image_size and mask_size and image_size != mask_size:
        raise ManifestError(f"{where}: mask is {mask_size} but image is {image_size}; masks must match their image.")
    return InpaintRow(image, mask, prompt, line, _extra(row, ("image", "mask", "prompt")))


# ---------------------------------------------------------------------------------------------- loaders


def _load(
    source: Any,
    parse: Callable[[dict, _Context, int], RowT],
    *,
    skip_bad: bool,
    check_images: bool,
    max_pixels: int | None,
    example: str,
    lazy_images: bool = False,
    default_split: str = "all",
    pairs: bool = False,
    columns: Any = None,
    image_root: str | Path | None = None,
    allow_absolute_paths: bool = False,
) -> ManifestResult[RowT]:
    ctx, items = _open_source(
        source, check_images, max_pixels, lazy_images, default_split, pairs, columns, image_root, allow_absolute_paths
    )
    name = ctx.name
    rows: list[RowT] = []
    skipped: list[SkippedRow] = []
    total = 0
    for line, item in items:
        total += 1
        try:
            if isinstance(item, ManifestError):
                raise item
            rows.append(parse(item, ctx, line))
        except ManifestError as err:
            if not skip_bad:
                raise
            logger.warning("skipping bad row: %s", err)
            skipped.append(SkippedRow(line, str(err)))
    if total == 0:
        raise ManifestError(f"{name}: empty manifest (no rows); write one JSON object per line, e.g. {example}.")
    if not rows:
        raise ManifestError(f"{name}: all {total} rows are bad, nothing to use; first problem: {skipped[0].reason}")
    if skipped:
        logger.warning("%s: skipped %d of %d rows (skip_bad=True)", name, len(skipped), total)
    base = ctx.base_dir.resolve() if ctx.base_dir is not None else None
    return ManifestResult(rows, skipped, name, base, ctx.info)


def load_ratings(
    source: Any,
    *,
    skip_bad: bool = False,
    check_images: bool = True,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    mos_range: tuple[float, float] | None = None,
    lazy_images: bool = False,
    default_split: str = "all",
    columns: Any = None,
    image_root: str | Path | None = None,
    allow_absolute_paths: bool = False,
) -> ManifestResult[RatingRow]:
    """Read a ratings manifest: each row an image, a dimension name and a MOS (or raw ratings, averaged).

    Bad rows raise ``ManifestError`` naming the file and line, or with ``skip_bad=True`` are logged and listed
    in ``skipped``. ``check_images`` decodes every image once to catch missing or corrupt files early;
    ``mos_range=(low, high)`` rejects MOS values (and raw ratings) outside it. An empty manifest, or one whose
    rows are all bad, always raises. ``lazy_images`` (with ``check_images=False``) leaves the images of a
    ``datasets`` source encoded in the memory-mapped table (:class:`DatasetImage`), decoded only when scored.
    A dataset source ``NAME:FOLDER`` without ``:SPLIT`` reads ``default_split``; its description (scale, split
    rule, file read) is in the result's ``info`` (see :func:`reward.data.datasets.mos_range_of` for its scale).
    A ``datasets`` dataset ``hf:NAME_OR_DIR[:SPLIT]`` (:mod:`reward.data.hf`) has its image, MOS and dimension read
    from the ``columns`` (a :class:`reward.data.hf.HfColumns` or a mapping; default ``image``, ``mos``,
    ``dimension``). Relative image paths are read from the manifest's folder, or from ``image_root`` when given (a
    manifest kept apart from its images; not for ``NAME:FOLDER``, which reads its own folder); absolute ones only
    with ``allow_absolute_paths``. Symlinks are followed.
    """
    return _load(
        source,
        lambda row, ctx, line: _rating(row, ctx, line, mos_range),
        skip_bad=skip_bad,
        check_images=check_images,
        max_pixels=max_pixels,
        example=RATING_EXAMPLE,
        lazy_images=lazy_images and not check_images,
        default_split=default_split,
        columns=columns,
        image_root=image_root,
        allow_absolute_paths=allow_absolute_paths,
    )


def load_pairs(
    source: Any,
    *,
    skip_bad: bool = False,
    check_images: bool = True,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    default_split: str = "train",
    image_root: str | Path | None = None,
    allow_absolute_paths: bool = False,
) -> ManifestResult[PairRow]:
    """Read a preference-pair manifest (``a``, ``b``, ``label`` in a/b/tie, case-insensitive); see load_ratings.

    From a dataset source ``NAME:FOLDER[:SPLIT]`` (``default_split`` when it names none) the pairs are drawn from
    its MOS (:func:`reward.data.datasets.pair_items`): each image with 5 others, the higher MOS preferred."""
    return _load(
        source,
        _pair,
        skip_bad=skip_bad,
        check_images=check_images,
        max_pixels=max_pixels,
        example=PAIR_EXAMPLE,
        default_split=default_split,
        pairs=True,
        image_root=image_root,
        allow_absolute_paths=allow_absolute_paths,
    )


def load_inpainting(
    source: Any,
    *,
    skip_bad: bool = False,
    check_images: bool = True,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    image_root: str | Path | None = None,
    allow_absolute_paths: bool = False,
) -> ManifestResult[InpaintRow]:
    """Read an inpainting-task manifest (``image``, ``mask`` of the same size, ``prompt``); see load_ratings."""
    return _load(
        source,
        _inpaint,
        skip_bad=skip_bad,
        check_images=check_images,
        max_pixels=max_pixels,
        example=INPAINT_EXAMPLE,
        image_root=image_root,
        allow_absolute_paths=allow_absolute_paths,
    )
