"""Images as 8-bit RGB, loaded safely: the size checked from the header before decoding, errors naming the file.

Grayscale and palette images are expanded, transparency is composited on white, 16-bit and float images are scaled to
8 bits, CMYK/YCbCr converted and the EXIF orientation applied (raters saw the image upright). An image is a file, a
stream, a PIL image or a :class:`DatasetImage` (a ``datasets`` table's cell, decoded when loaded).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from reward.core.errors import MissingInputError, UserError

DEFAULT_MAX_PIXELS = 36_000_000  # 6000 x 6000; larger images are refused before decoding
_ALPHA_MODES = {"RGBA", "LA", "La", "RGBa", "PA"}


class ImageError(UserError):
    """An image cannot be used: unreadable, corrupt, too large or in an unsupported mode."""


@dataclass(frozen=True)
class DatasetImage:
    """An image cell of a ``datasets`` table, left encoded (``{"bytes", "path"}``) until :func:`load_image` decodes it;
    ``key`` names it (by content too). Pickling it (to DataLoader workers) is cheap for a table on disk."""

    dataset: Any = field(repr=False, compare=False)
    index: int
    column: str
    key: str

    @property
    def cell(self) -> dict[str, Any]:
        """The encoded cell, as ``datasets.Image`` takes it."""
        return self.dataset[self.index][self.column]


MAX_ASPECT_RATIO = 200.0  # Qwen-VL image processors refuse longer/shorter side above this (smart_resize)


def check_pixels(size: tuple[int, int], max_pixels: int | None, name: str) -> None:
    """Raise ``ImageError`` if an image of ``size`` (width, height) exceeds ``max_pixels`` (``None``: no limit), or
    has a shape the VLM image processors refuse (an aspect ratio above 200:1, an empty side), so that such an image is
    refused (or skipped and counted under ``skip_bad=true``) with the data, never in the middle of a batch.

    >>> check_pixels((4000, 12), None, "strip.png")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    reward.data.images.ImageError: strip.png: image is 4000x12, an aspect ratio of 333:1; ...
    """
    width, height = size
    if min(width, height) < 1:
        raise ImageError(f"{name}: image is {width}x{height}: it has no pixels; replace it or drop the row.")
    if max(width, height) / min(width, height) > MAX_ASPECT_RATIO:
        raise ImageError(
            f"{name}: image is {width}x{height}, an aspect ratio of {max(width, height) / min(width, height):.0f}:1; "
            f"Qwen-VL image processors refuse ratios above {MAX_ASPECT_RATIO:.0f}:1. Crop or pad it, or drop the row."
        )
    if max_pixels is not None and width * height > max_pixels:
        raise ImageError(
            f"{name}: image is {width}x{height} = {width * height:,} pixels, above max_pixels={max_pixels:,}; "
            "it was not decoded. Resize it, or pass a larger max_pixels (max_pixels=None disables the check)."
        )


def _scale_to_uint8(arr: np.ndarray, mode: str) -> np.ndarray:
    """16-bit, 32-bit int and float pixel arrays to 0..255 (see :func:`to_rgb` for the rules)."""
    arr = arr.astype(np.float64)
    lo, hi = (float(arr.min()), float(arr.max())) if arr.size else (0.0, 0.0)
    if mode.startswith("I;16") or (lo >= 0 and 255 < hi <= 65535):
        arr = arr / 257.0  # 65535 -> 255
    elif mode == "F" and lo >= 0 and hi <= 1.0:
        arr = arr * 255.0
    elif lo < 0 or hi > 255:
        arr = (arr - lo) / (hi - lo) * 255.0 if hi > lo else np.zeros_like(arr)
    return np.clip(np.rint(arr), 0, 255).astype(np.uint8)


def to_rgb(image: Image.Image) -> Image.Image:
    """Return a new 8-bit RGB copy of a loaded PIL image.

    Alpha is composited on white; ``I;16`` is divided by 257; ``I`` and ``F`` are kept if already in 0..255,
    divided by 257 if in 0..65535, multiplied by 255 if ``F`` in 0..1, and min-max stretched otherwise.

    >>> to_rgb(Image.new("LA", (1, 1), (0, 0))).getpixel((0, 0))  # fully transparent black -> white
    (255, 255, 255)
    >>> to_rgb(Image.new("I;16", (1, 1), 65535)).getpixel((0, 0))
    (255, 255, 255)
    """
    mode = image.mode
    if mode == "RGB":
        return image.copy()
    if mode == "P" and "transparency" in image.info:
        mode, image = "RGBA", image.convert("RGBA")
    if mode in _ALPHA_MODES:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    if mode.startswith("I") or mode == "F":
        return Image.fromarray(_scale_to_uint8(np.asarray(image), mode), "L").convert("RGB")
    try:
        return image.convert("RGB")
    except ValueError as err:
        raise ImageError(f"cannot convert an image in mode {mode!r} to RGB ({err}); save it as RGB.") from err


def load_image(source: Any, *, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> Image.Image:
    """``source`` (a path, a binary stream, a PIL image or a :class:`DatasetImage`) as 8-bit RGB (:func:`to_rgb`).

    The pixel count is checked against ``max_pixels`` from the header, before decoding; PIL's decompression-bomb guard
    becomes an ``ImageError`` too. A missing file raises ``FileNotFoundError``, a corrupt one ``ImageError``, both
    naming it.
    """
    with _opened(source, max_pixels) as im:
        im.load()
        return to_rgb(ImageOps.exif_transpose(im) or im)


def image_size(source: Any, *, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> tuple[int, int]:
    """The ``(width, height)`` of ``source`` (as :func:`load_image` takes it) read from its header, nothing decoded:
    the cheap check that an image exists and is one; errors as :func:`load_image`'s."""
    with _opened(source, max_pixels) as im:
        return im.size


@contextlib.contextmanager
def _opened(source: Any, max_pixels: int | None) -> Iterator[Image.Image]:
    """``source`` opened by PIL (its pixel count checked first) for the ``with`` block; every way it fails, reading
    in the block included, named."""
    name = getattr(source, "key", None) or str(getattr(source, "name", "<image bytes>"))
    if isinstance(source, DatasetImage):
        source = source.cell
    if isinstance(source, dict):  # an encoded datasets.Image cell
        if not (source.get("bytes") or source.get("path")):
            raise ImageError(f"{name}: the cell holds neither image bytes nor a path")
        source = io.BytesIO(source["bytes"]) if source.get("bytes") else source["path"]
    if isinstance(source, Image.Image):
        check_pixels(source.size, max_pixels, "in-memory image")
        yield source
        return
    if isinstance(source, str | Path):
        source = Path(source)
        if not source.is_file():
            raise MissingInputError(f"Image {str(source)!r} does not exist or is not a file.")
        name = str(source)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(source) as im:
                check_pixels(im.size, max_pixels, name)
                yield im
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        raise ImageError(
            f"{name}: PIL refused to decode it as a possible decompression bomb ({err}). If the image is "
            "genuine, raise PIL.Image.MAX_IMAGE_PIXELS as well as max_pixels, or resize the image."
        ) from err
    except ImageError as err:
        if str(err).startswith(name):
            raise
        raise ImageError(f"{name}: {err}") from err
    except (OSError, SyntaxError, ValueError) as err:  # UnidentifiedImageError and truncation are OSErrors
        raise ImageError(f"{name}: cannot read the image ({err}); the file is corrupt or not an image.") from err


ACCEPTED_IMAGES = (
    "PIL images; torch tensors C x H x W or a batch B x C x H x W (C = 1 or 3), uint8 in 0..255 or float in [0, 1]; "
    "numpy arrays H x W, H x W x C or a batch B x H x W x C (C = 1 or 3), uint8 or float in [0, 1]; "
    "image files by path (str or pathlib.Path); one image or a list of them"
)
_FLOAT_SLACK = 1e-4  # float pixels this far outside [0, 1] (rounding in a pipeline's output) are clipped, not refused


def as_images(images: Any, *, keep: tuple[type, ...] = ()) -> list[Any]:
    """Images as users hold them (:data:`ACCEPTED_IMAGES`; float pixels in [0, 1] scaled by 255 and rounded, as
    torchvision, pyiqa and diffusers give them) as a list of RGB PIL images: what every reward's ``score`` takes.
    Items of a type in ``keep`` pass through unchanged; anything else raises ``ValueError``/``TypeError`` saying what
    was given and what is accepted.

    >>> import numpy as np
    >>> [im.size for im in as_images(np.zeros((2, 8, 6, 3), dtype=np.float32))]
    [(6, 8), (6, 8)]
    >>> as_images(np.full((4, 4, 3), 1.0))[0].getpixel((0, 0))
    (255, 255, 255)
    """
    if isinstance(images, Image.Image | np.ndarray | str | os.PathLike) or _is_tensor(images):
        return _batch(images, "images")
    if isinstance(images, bytes) or not isinstance(images, Sequence):
        raise TypeError(f"cannot score {_describe(images)}; accepted: {ACCEPTED_IMAGES}")
    out: list[Any] = []
    for i, item in enumerate(images):
        if keep and isinstance(item, keep):
            out.append(item)
            continue
        converted = _batch(item, f"images[{i}]")
        if len(converted) != 1 or getattr(item, "ndim", 0) == 4:
            raise ValueError(
                f"images[{i}] is a batch ({_describe(item)}); give a batch on its own or a list of single images "
                f"(accepted: {ACCEPTED_IMAGES})"
            )
        out.extend(converted)
    return out


def _is_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")  # a tensor exists only if torch was imported: no import here
    return torch is not None and isinstance(x, torch.Tensor)


def _describe(x: Any) -> str:
    if _is_tensor(x) or isinstance(x, np.ndarray):
        kind = "a torch tensor" if _is_tensor(x) else "a numpy array"
        return f"{kind} of shape {tuple(x.shape)} and dtype {x.dtype}"
    if isinstance(x, Image.Image):
        return f"a PIL image of mode {x.mode} and size {x.size}"
    return f"an object of type {type(x).__name__}"


def _batch(x: Any, name: str) -> list[Image.Image]:
    """One image or a batch (PIL, tensor or array) or an image file's path as RGB PIL images."""
    if isinstance(x, str | os.PathLike):
        return [load_image(Path(x))]
    if isinstance(x, Image.Image):
        return [x if x.mode == "RGB" else to_rgb(x)]
    tensor = _is_tensor(x)
    if not (tensor or isinstance(x, np.ndarray)):
        raise TypeError(f"{name}: cannot score {_describe(x)}; accepted: {ACCEPTED_IMAGES}")
    if x.ndim not in ((3, 4) if tensor else (2, 3, 4)):
        raise ValueError(f"{name}: {_describe(x)} has {x.ndim} dimensions; accepted: {ACCEPTED_IMAGES}")
    if tensor:  # channels last; bfloat16 and float16 have no numpy twin: as float32
        values = x.detach().cpu()
        arr = np.moveaxis((values.float() if values.dtype.is_floating_point else values).numpy(), -3, -1)
    else:
        arr = x[..., None] if x.ndim == 2 else x
    arr = arr[None] if arr.ndim == 3 else arr
    if arr.shape[-1] not in (1, 3):
        layout = "C x H x W (channels first)" if tensor else "H x W x C (channels last)"
        raise ValueError(
            f"{name}: {_describe(x)} has {arr.shape[-1]} channels where {layout} needs 1 or 3; accepted: "
            + ACCEPTED_IMAGES
        )
    return [_from_array(a, x, name) for a in arr]


def _from_array(hwc: np.ndarray, original: Any, name: str) -> Image.Image:
    """An H x W x C (C = 1 or 3) uint8 or float [0, 1] array as an RGB PIL image."""
    if hwc.dtype == np.uint8:
        pixels = hwc
    elif np.issubdtype(hwc.dtype, np.floating):
        lo, hi = (float(np.min(hwc)), float(np.max(hwc))) if hwc.size else (0.0, 0.0)
        if not (np.isfinite(lo) and np.isfinite(hi)) or lo < -_FLOAT_SLACK or hi > 1 + _FLOAT_SLACK:
            raise ValueError(
                f"{name}: {_describe(original)} has values in [{lo:.4g}, {hi:.4g}]; float images must be in [0, 1] "
                "(divide 0..255 floats by 255, map [-1, 1] with (x + 1) / 2); accepted: " + ACCEPTED_IMAGES
            )
        pixels = np.rint(np.clip(hwc.astype(np.float32), 0.0, 1.0) * 255.0).astype(np.uint8)
    else:
        raise ValueError(
            f"{name}: {_describe(original)}: the dtype must be uint8 or float; accepted: {ACCEPTED_IMAGES}"
        )
    if pixels.shape[-1] == 1:
        return Image.fromarray(np.ascontiguousarray(pixels[..., 0]), "L").convert("RGB")
    return Image.fromarray(np.ascontiguousarray(pixels), "RGB")


def image_identity(image: Any) -> str:
    """What one image is, by its content: ``sha256:DIGEST`` of a file's bytes, of a table cell's bytes or of a decoded
    image's pixels; a file that cannot be read is known by its real path (``path:...``).

    >>> from PIL import Image
    >>> image_identity(Image.new("RGB", (2, 2))) == image_identity(Image.new("RGB", (2, 2)))
    True
    """
    from reward.core.fingerprints import DIGEST_CHARS, file_digests

    if isinstance(image, DatasetImage):
        value = image.dataset[image.index][image.column]
        if isinstance(value, Mapping) and value.get("bytes"):
            return "sha256:" + hashlib.sha256(value["bytes"]).hexdigest()[:DIGEST_CHARS]
        image = value.get("path") if isinstance(value, Mapping) else value
    if isinstance(image, Image.Image):
        h = hashlib.sha256(f"{image.mode}{image.size}".encode())
        h.update(image.tobytes())
        return "sha256:" + h.hexdigest()[:DIGEST_CHARS]
    path = os.path.realpath(os.path.expanduser(str(image)))
    return "sha256:" + file_digests([path])[path][0] if os.path.isfile(path) else "path:" + path
