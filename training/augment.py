"""``data.augment``: only what leaves an image's rated quality unchanged: a random crop at native scale (no
resampling) and a horizontal flip.

>>> import numpy as np
>>> from PIL import Image
>>> aug = QualityAugment(crop=0.5, rng=np.random.default_rng(0))
>>> aug(Image.new("RGB", (100, 60))).size
(50, 30)
"""

from __future__ import annotations

import numpy as np
from PIL import Image


class QualityAugment:
    """Random crop keeping ``crop`` of each side (at native scale), then a horizontal flip with probability 1/2."""

    def __init__(self, crop: float = 0.875, rng: np.random.Generator | None = None) -> None:
        if not 0.0 < crop <= 1.0:
            raise ValueError(f"data.augment_crop={crop}: the fraction of each side a crop keeps must be in (0, 1]")
        self.crop = crop
        self.rng = rng or np.random.default_rng()

    def __call__(self, image: Image.Image) -> Image.Image:
        w, h = max(1, round(image.width * self.crop)), max(1, round(image.height * self.crop))
        x, y = int(self.rng.integers(image.width - w + 1)), int(self.rng.integers(image.height - h + 1))
        out = image.crop((x, y, x + w, y + h))
        return out.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if self.rng.random() < 0.5 else out
