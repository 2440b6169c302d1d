"""Prefix reuse vs the plain path for every VLM family, on each family's tiny random checkpoint: 1 image x 16 queries.

    python bench/families.py                  # every family of reward.vlm.families.FAMILIES
    python bench/families.py --families gemma3 qwen3_5 --repeats 10
    python bench/families.py --large    # hidden 512, 8 layers, ViT 4x256; 448 px images where the budget is an area

Ratios, not absolute times, are the result (these machines jitter up to 10x between runs): both paths are timed in
turn on the same loaded model, best of ``--repeats``; the largest difference of their log-probs is printed beside.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from reward.testing import make_tiny_vlm
from reward.vlm import OptionQuery, load_vlm
from reward.vlm.families import FAMILIES

logger = logging.getLogger("bench.families")
ASPECTS = ("layout", "harmony", "lighting", "distortion", "colour", "texture", "noise", "sharpness")
QUERIES = [
    OptionQuery(f"How would you rate the {a} of this image{s}?", ("excellent", "good", "fair", "poor", "bad"), "It is")
    for a in ASPECTS
    for s in ("", ", all things considered")
]


LARGE = {"hidden": 512, "layers": 8, "vision_embed": 256, "vision_depth": 4}


def ratio(path: Path, repeats: int, side: int, **budget: int) -> tuple[float, float]:
    """(plain time / reuse time, largest log-prob difference) for 1 image of ``side`` pixels x 16 queries."""
    vlm = load_vlm(path, dtype="float32", batch_size=16, **budget)
    image = [[Image.fromarray(np.random.default_rng(0).integers(0, 256, (side, side, 3), dtype=np.uint8))]]
    runs = {reuse: vlm.option_logprobs(image, QUERIES, reuse_prefix=reuse).logprobs for reuse in (False, True)}
    finite = torch.isfinite(runs[False])
    diff = (runs[False][finite] - runs[True][finite]).abs().max().item()
    best = {False: float("inf"), True: float("inf")}
    for _ in range(repeats):
        for reuse in best:
            start = time.perf_counter()
            vlm.option_logprobs(image, QUERIES, reuse_prefix=reuse)
            best[reuse] = min(best[reuse], time.perf_counter() - start)
    return best[False] / best[True], diff


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="*", default=list(FAMILIES))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--large", action="store_true", help="larger random models, 448 px images")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
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
