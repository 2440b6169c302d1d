"""Shared-prefix KV reuse vs the plain path: speed ratio on one model in one run.

    python bench/prefix_reuse.py            # tiny model and a larger random config (hidden 512, 8 layers, 448 px)
    python bench/prefix_reuse.py --quick    # tiny model only

Ratios, not absolute times, are the result: these machines jitter up to 10x between runs, so both paths are
timed alternately on the same loaded model, best of ``--repeats``.
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

logger = logging.getLogger("bench.prefix_reuse")

QUESTIONS = [
    f"How would you rate the {d} of this image? Consider every detail of the {d} carefully before answering."
    for d in [
        "layout",
        "harmony",
        "lighting",
        "distortion",
        "colour",
        "texture",
        "noise",
        "sharpness",
        "contrast",
        "composition",
        "exposure",
        "focus",
        "depth",
        "balance",
        "realism",
        "detail",
    ]
]


def _queries(n: int) -> list[OptionQuery]:
    words = ("excellent", "good", "fair", "poor", "bad")
    return [OptionQuery(q, words, "The quality level of this image is") for q in QUESTIONS[:n]]


def _time_alternating(fns, repeats: int) -> list[float]:
    """Best-of-``repeats`` time of each function, run in turn so that machine load hits all alike."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def run_case(vlm, n_images: int, n_queries: int, size: int, repeats: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    images = [[Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))] for _ in range(n_images)]
    queries = _queries(n_queries)
    plain = vlm.option_logprobs(images, queries, reuse_prefix=False).logprobs  # warm-up and reference
    cached = vlm.option_logprobs(images, queries, reuse_prefix=True).logprobs
    finite = torch.isfinite(plain)
    err = (plain[finite] - cached[finite]).abs().max().item()
    t_plain, t_cached = _time_alternating(
        [
            lambda: vlm.option_logprobs(images, queries, reuse_prefix=False),
            lambda: vlm.option_logprobs(images, queries, reuse_prefix=True),
        ],
        repeats,
    )
    return {"plain_s": t_plain, "cached_s": t_cached, "ratio": t_plain / t_cached, "max_abs_diff": err}


def run_batching_case(vlm, n_images: int, size: int, repeats: int) -> dict[str, float]:
    """One query per image: all images in one batched forward vs one forward per image."""
    rng = np.random.default_rng(1)
    images = [[Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))] for _ in range(n_images)]
    query = _queries(1)
    t_single, t_batched = _time_alternating(
        [lambda: [vlm.option_logprobs([g], query) for g in images], lambda: vlm.option_logprobs(images, query)],
        repeats,
    )
    return {"single_s": t_single, "batched_s": t_batched, "ratio": t_single / t_batched}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model only")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.manual_seed(0)
    configs = [("tiny (hidden 64, 2 layers, 56 px)", {}, 56)]
    if not args.quick:
        configs.append(
            (
                "large (hidden 512, 8 layers, ViT 4x256, 448 px)",
                {"hidden": 512, "layers": 8, "vision_embed": 256, "vision_depth": 4, "image_pixels": 448 * 448},
                448,
            )
        )
    cases = [(1, 4), (1, 16), (4, 4)]
    rows, batching = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for label, kwargs, size in configs:
            vlm = load_vlm(make_tiny_vlm(Path(tmp) / label.split()[0], **kwargs), batch_size=64)
            n_params = sum(p.numel() for p in vlm.model.parameters())
            for n_images, n_queries in cases:
                r = run_case(vlm, n_images, n_queries, size, args.repeats)
                rows.append((f"{label}, {n_params / 1e6:.1f}M", n_images, n_queries, r))
            b = run_batching_case(vlm, 8, size, args.repeats)
            batching.append((f"{label}, {n_params / 1e6:.1f}M", b))
    logger.info(
        "%-48s %6s %7s %9s %9s %7s %9s", "model", "images", "queries", "plain s", "cached s", "ratio", "max|diff|"
    )
    for label, n_images, n_queries, r in rows:
        logger.info(
            "%-48s %6d %7d %9.4f %9.4f %6.2fx %9.1e",
            label,
            n_images,
            n_queries,
            r["plain_s"],
            r["cached_s"],
            r["ratio"],
            r["max_abs_diff"],
        )
    logger.info("")
    logger.info("%-48s %12s %10s %7s", "model (8 images x 1 query)", "one-by-one s", "batched s", "ratio")
    for label, b in batching:
        logger.info("%-48s %12.4f %10.4f %6.2fx", label, b["single_s"], b["batched_s"], b["ratio"])


if __name__ == "__main__":
    main()
