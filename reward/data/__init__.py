"""Data in and out: rows of ratings, pairs, inpainting tasks and prompts from any source, images, safe paths,
atomic files."""

from reward.data.images import DEFAULT_MAX_PIXELS, DatasetImage, ImageError, load_image, to_rgb
from reward.data.manifest import ManifestError, resolve_image_path
from reward.data.rows import (
    ImageRef,
    InpaintRow,
    ManifestResult,
    PairRow,
    PromptRow,
    RatingRow,
    SkippedRow,
    load_inpainting,
    load_pairs,
    load_prompts,
    load_ratings,
)

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "DatasetImage",
    "ImageError",
    "ImageRef",
    "InpaintRow",
    "ManifestError",
    "ManifestResult",
    "PairRow",
    "PromptRow",
    "RatingRow",
    "SkippedRow",
    "load_image",
    "load_inpainting",
    "load_pairs",
    "load_prompts",
    "load_ratings",
    "resolve_image_path",
    "to_rgb",
]
