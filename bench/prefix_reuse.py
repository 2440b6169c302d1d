"""Shared-prefix KV reuse vs the plain path: speed ratio on one model in one run.

    python bench/prefix_reuse.py            # tiny model and a larger random config (hidden 512, 8 layers, 448 px)
    python bench/prefix_reuse.py --quick    # tiny model only
    python bench/prefix_reuse.py --families          # 1 image x 16 queries on each VLM family's tiny model
    python bench/prefix_reuse.py --families gemma3 qwen3_5 --repeats 10
    python bench/prefix_reuse.py --families --large  # hidden 512, 8 layers, ViT 4x256, 448 px (area budgets)

Ratios, not absolute times, are the result: these machines jitter up to 10x between runs, so both paths are
timed alternately on the same loaded model, best of ``--repeats`` (default 5; 20 with ``--families``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from common import LARGE, QUICK, arguments, best_times, logger, markdown, noise_images, speed_models

from reward.vlm import OptionQuery

WORDS = ("excellent", "good", "fair", "poor", "bad")
ASPECTS = "layout harmony lighting distortion colour texture noise sharpness contrast composition exposure focus"
ASPECTS += " depth balance realism detail"
QUESTIONS = [
    f"How would you rate the {d} of this image? Consider every detail of the {d} carefully before answering."
    for d in ASPECTS.split()
]
# --families: 8 aspects, 2 phrasings each
SHORT = [
    OptionQuery(f"How would you rate the {a} of this image{s}?", WORDS, "It is")
    for a in ASPECTS.split()[:8]
    for s in ("", ", all things considered")
]


def _queries(n: int) -> list[OptionQuery]:
    return [OptionQuery(q, WORDS, "The quality level of this image is") for q in QUESTIONS[:n]]


def run_case(vlm, images: list, queries: list[OptionQuery], repeats: int) -> tuple[float, float, float, float]:
    """Plain and cached seconds, their ratio, the largest log-prob difference (of the finite ones)."""
    (t_plain, _, plain), (t_cached, _, cached) = best_times(
        [lambda r=r: vlm.option_logprobs(images, queries, reuse_prefix=r).logprobs for r in (False, True)], repeats
    )
    finite = torch.isfinite(plain)
    return t_plain, t_cached, t_plain / t_cached, (plain[finite] - cached[finite]).abs().max().item()


def run_batching_case(vlm, n_images: int, size: int, repeats: int) -> list[str]:
    """One query per image: all images in one batched forward vs one forward per image."""
    images = [[im] for im in noise_images(n_images, size, seed=1)]
    query = _queries(1)
    (t_single, _, _), (t_batched, _, _) = best_times(
        [lambda: [vlm.option_logprobs([g], query) for g in images], lambda: vlm.option_logprobs(images, query)],
        repeats,
    )
    return [f"{t_single:.4f}", f"{t_batched:.4f}", f"{t_single / t_batched:.2f}x"]


def families(names: list[str], large: bool, repeats: int) -> None:
    """1 image x 16 queries on each family's tiny random checkpoint (fp32, 2 torch threads)."""
    from reward.testing import make_tiny_vlm
    from reward.vlm import load_vlm
    from reward.vlm.families import FAMILIES

    torch.set_num_threads(2)
    print("| family | prefix reuse speed-up, 1 image x 16 queries | max abs diff (fp32) |\n| --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names or FAMILIES:
            path = make_tiny_vlm(Path(tmp) / name, family=name, **(LARGE if large else {}))
            area = large and FAMILIES[name].pixels == "area"
            budget = {"min_pixels": 448 * 448, "max_pixels": 448 * 448} if area else {}
            vlm = load_vlm(path, dtype="float32", batch_size=16, **budget)
            _, _, speedup, diff = run_case(vlm, [noise_images(1, 448 if large else 96)], SHORT, repeats)
            print(f"| {FAMILIES[name].label} (`{name}`) | {speedup:.2f}x | {diff:.1e} |", flush=True)


def main() -> None:
    args = arguments(
        __doc__,
        quick=QUICK,
        repeats={"type": int, "help": "best of this many rounds"},
        families={"nargs": "*", "help": "1 image x 16 queries on these families' tiny models (none named: all)"},
        large={"action": "store_true", "help": "--families: larger random models, 448 px images"},
    )
    if args.families is not None:
        return families(args.families, args.large, args.repeats or 20)
    torch.manual_seed(0)
    rows, batching = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for label, vlm, size in speed_models(Path(tmp), args.quick):
            for n_images, n_queries in [(1, 4), (1, 16), (4, 4)]:
                images = [[im] for im in noise_images(n_images, size)]
                t_plain, t_cached, ratio, err = run_case(vlm, images, _queries(n_queries), args.repeats or 5)
                rows.append([label, n_images, n_queries, f"{t_plain:.4f}", f"{t_cached:.4f}", f"{ratio:.2f}x"])
                rows[-1].append(f"{err:.1e}")
            batching.append([label, *run_batching_case(vlm, 8, size, args.repeats or 5)])
    logger.info(markdown(["model", "images", "queries", "plain s", "cached s", "ratio", "max abs diff"], rows))
    logger.info("\n" + markdown(["model (8 images x 1 query)", "one-by-one s", "batched s", "ratio"], batching))


if __name__ == "__main__":
    main()
