"""Shared-prefix KV reuse vs the plain path: speed ratio on one model in one run.

    python bench/prefix_reuse.py            # tiny model and a larger random config (hidden 512, 8 layers, 448 px)
    python bench/prefix_reuse.py --quick    # tiny model only

Ratios, not absolute times, are the result: these machines jitter up to 10x between runs, so both paths are
timed alternately on the same loaded model, best of ``--repeats``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from common import QUICK, arguments, best_times, logger, markdown, noise_images, speed_models

from reward.vlm import OptionQuery

ASPECTS = "layout harmony lighting distortion colour texture noise sharpness contrast composition exposure focus"
ASPECTS += " depth balance realism detail"
QUESTIONS = [
    f"How would you rate the {d} of this image? Consider every detail of the {d} carefully before answering."
    for d in ASPECTS.split()
]


def _queries(n: int) -> list[OptionQuery]:
    words = ("excellent", "good", "fair", "poor", "bad")
    return [OptionQuery(q, words, "The quality level of this image is") for q in QUESTIONS[:n]]


def run_case(vlm, n_images: int, n_queries: int, size: int, repeats: int) -> list[str]:
    """Plain and cached seconds, their ratio, the largest log-prob difference."""
    images = [[im] for im in noise_images(n_images, size)]
    queries = _queries(n_queries)
    plain = vlm.option_logprobs(images, queries, reuse_prefix=False).logprobs  # warm-up and reference
    cached = vlm.option_logprobs(images, queries, reuse_prefix=True).logprobs
    finite = torch.isfinite(plain)
    (t_plain, _, _), (t_cached, _, _) = best_times(
        [lambda r=r: vlm.option_logprobs(images, queries, reuse_prefix=r) for r in (False, True)], repeats
    )
    err = (plain[finite] - cached[finite]).abs().max().item()
    return [f"{t_plain:.4f}", f"{t_cached:.4f}", f"{t_plain / t_cached:.2f}x", f"{err:.1e}"]


def run_batching_case(vlm, n_images: int, size: int, repeats: int) -> list[str]:
    """One query per image: all images in one batched forward vs one forward per image."""
    images = [[im] for im in noise_images(n_images, size, seed=1)]
    query = _queries(1)
    (t_single, _, _), (t_batched, _, _) = best_times(
        [lambda: [vlm.option_logprobs([g], query) for g in images], lambda: vlm.option_logprobs(images, query)],
        repeats,
    )
    return [f"{t_single:.4f}", f"{t_batched:.4f}", f"{t_single / t_batched:.2f}x"]


def main() -> None:
    args = arguments(__doc__, quick=QUICK, repeats={"type": int, "default": 5})
    torch.manual_seed(0)
    rows, batching = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for label, vlm, size in speed_models(Path(tmp), args.quick):
            for n_images, n_queries in [(1, 4), (1, 16), (4, 4)]:
                rows.append([label, n_images, n_queries, *run_case(vlm, n_images, n_queries, size, args.repeats)])
            batching.append([label, *run_batching_case(vlm, 8, size, args.repeats)])
    logger.info(markdown(["model", "images", "queries", "plain s", "cached s", "ratio", "max abs diff"], rows))
    logger.info("\n" + markdown(["model (8 images x 1 query)", "one-by-one s", "batched s", "ratio"], batching))


if __name__ == "__main__":
    main()
