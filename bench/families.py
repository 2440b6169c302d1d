"""Prefix reuse vs the plain path for every VLM family, on each family's tiny random checkpoint: 1 image x 16 queries.

    python bench/families.py                  # every family of reward.vlm.families.FAMILIES
    python bench/families.py --families gemma3 qwen3_5 --repeats 10
    python bench/families.py --large    # hidden 512, 8 layers, ViT 4x256; 448 px images where the budget is an area

Both paths are timed in turn on the same loaded model, best of ``--repeats`` (ratios: these machines jitter up to
10x); the largest difference of their log-probs is printed beside.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from common import LARGE, arguments, best_times, noise_images

from reward.testing import make_tiny_vlm
from reward.vlm import OptionQuery, load_vlm
from reward.vlm.families import FAMILIES

ASPECTS = ("layout", "harmony", "lighting", "distortion", "colour", "texture", "noise", "sharpness")
QUERIES = [
    OptionQuery(f"How would you rate the {a} of this image{s}?", ("excellent", "good", "fair", "poor", "bad"), "It is")
    for a in ASPECTS
    for s in ("", ", all things considered")
]


def ratio(path: Path, repeats: int, side: int, **budget: int) -> tuple[float, float]:
    """(plain time / reuse time, largest log-prob difference) for 1 image of ``side`` pixels x 16 queries."""
    vlm = load_vlm(path, dtype="float32", batch_size=16, **budget)
    image = [noise_images(1, side)]
    (plain, _, a), (reuse, _, b) = best_times(
        [lambda r=r: vlm.option_logprobs(image, QUERIES, reuse_prefix=r).logprobs for r in (False, True)], repeats
    )
    finite = torch.isfinite(a)
    return plain / reuse, (a[finite] - b[finite]).abs().max().item()


def main() -> None:
    args = arguments(
        __doc__,
        families={"nargs": "*", "default": list(FAMILIES)},
        repeats={"type": int, "default": 20},
        large={"action": "store_true", "help": "larger random models, 448 px images"},
    )
    torch.set_num_threads(2)
    print("| family | prefix reuse speed-up, 1 image x 16 queries | max abs diff (fp32) |")
    print("| --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.families:
            path = make_tiny_vlm(Path(tmp) / name, family=name, **(LARGE if args.large else {}))
            area = args.large and FAMILIES[name].pixels == "area"
            budget = {"min_pixels": 448 * 448, "max_pixels": 448 * 448} if area else {}
            speedup, diff = ratio(path, args.repeats, 448 if args.large else 96, **budget)
            print(f"| {FAMILIES[name].label} (`{name}`) | {speedup:.2f}x | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
