"""Loading images as 8-bit RGB, safely: size checked from the header before decoding, clear errors.

Every scorer sees RGB. Grayscale and palette images are expanded, transparency is composited on white,
16-bit and float images are scaled to 8 bits, CMYK/YCbCr are converted, and the EXIF orientation is
applied (human raters saw the image upright).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageOps

from reward.core.errors import MissingInputError, UserError

__all__ = ["DEFAULT_MAX_PIXELS", "ImageError", "check_pixels", "load_image", "to_rgb"]

DEFAULT_MAX_PIXELS = 36_000_000  # 6000 x 6000; larger images are refused before decoding
_ALPHA_MODES = {"RGBA", "LA", "La", "RGBa", "PA"}


class ImageError(UserError):
    """An image cannot be used: unreadable, corrupt, too large or in an unsupported mode."""


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


def load_image(source: str | Path | BinaryIO, *, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> Image.Image:
    """Open, decode and convert an image file (or binary stream) to 8-bit RGB (see :func:`to_rgb`).

    The pixel count is read from the header and checked against ``max_pixels`` before any decoding; PIL's
    own decompression-bomb guard is turned into an ``ImageError`` too. Missing files raise
    ``FileNotFoundError``; unreadable or corrupt files raise ``ImageError``. Both name the file.
    """
    if isinstance(source, str | Path):
        source = Path(source)
        if not source.is_file():
            raise MissingInputError(f"Image {str(source)!r} does not exist or is not a file.")
        name = str(source)
    else:
        name = str(getattr(source, "name", "<image bytes>"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(source) as im:
                check_pixels(im.size, max_pixels, name)
                im.load()
                return to_rgb(ImageOps.exif_transpose(im) or im)
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
