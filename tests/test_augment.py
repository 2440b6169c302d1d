"""data.augment: random crops at native scale and horizontal flips, nothing that changes quality."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from reward.rewards.scoring import LEVEL_WORDS
from training.augment import QualityAugment


def _unique_pixels(w: int, h: int) -> tuple[Image.Image, np.ndarray]:
    ramp = np.arange(w * h, dtype=np.int64).reshape(h, w)
    return Image.fromarray(np.stack([ramp % 256, ramp // 256, np.zeros_like(ramp)], -1).astype(np.uint8)), ramp


def _index(image: Image.Image) -> np.ndarray:
    a = np.asarray(image).astype(np.int64)
    return a[..., 0] + 256 * a[..., 1]


def test_augmented_images_are_native_scale_crops_some_mirrored():
    image, _ = _unique_pixels(120, 80)
    aug = QualityAugment(0.75, np.random.default_rng(0))
    flipped = 0
    for _ in range(20):
        out = _index(aug(image))
        assert out.shape == (60, 90)
        step = np.diff(out, axis=1)
        assert np.all(step == step[0, 0]) and abs(step[0, 0]) == 1  # neighbours stay neighbours: no resampling
        assert np.all(np.diff(out, axis=0) == 120)
        flipped += step[0, 0] == -1
    assert 0 < flipped < 20  # both orientations occur
    with pytest.raises(ValueError, match=r"augment_crop=1.5"):
        QualityAugment(1.5)


def test_manifest_training_data_is_augmented_anew_on_every_read(tmp_path):
    from training.procedural.synthetic import write_benchmark
    from training.sft_data import manifest_dataset

    bench = write_benchmark(tmp_path, 2, size=64, seed=1)
    queries = {d: {"question": f"{d}?", "response_prefix": f"The {d} is"} for d in ("lighting", "harmony")}
    words = list(LEVEL_WORDS)  # best first
    plain, _ = manifest_dataset(bench.ratings, queries, words)
    ds, _ = manifest_dataset(bench.ratings, queries, words, augment=0.5, seed=0)
    first, second = ds[0], ds[0]
    assert first["images"][0].size == (32, 32)
    assert not np.array_equal(np.asarray(first["images"][0]), np.asarray(second["images"][0]))
    assert first["completion"] == plain[0]["completion"]  # the target is untouched
