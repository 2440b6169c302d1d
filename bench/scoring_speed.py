"""The scoring loop before and after its faster path: images/s on one model in one run, as ratios, each change
alone.

    python bench/scoring_speed.py            # tiny Qwen2-VL, the larger random Qwen2-VL and a windowed Qwen2.5-VL
    python bench/scoring_speed.py --quick    # tiny model only

The loop is ``reward.eval.parallel.score_images`` over JPEG files of mixed sizes (as ``reward/evaluate.py`` runs
it), with the zero-shot qbench reward on the loaded model, 64 images per reward call and 16 per forward pass.
Variants, each timed in turn on the same model (best of ``--repeats``). These machines are shared and jitter up to
10x, so besides images/s (wall) the images per CPU-second of this process are given: by default everything runs in
this process on one torch thread (``--workers 0 --threads 1``), where CPU time is the work done whatever the load.

- ``unoptimised``: the path before the faster loop (image processor in the scoring loop, batches in file order,
  per-window vision attention; ``ScoringSpeed.unoptimised()``)
- ``+ workers``: the image processor in the DataLoader workers (the model gets ready tensors)
- ``+ grouping``: and batches grouped by visual token count
- ``fast (default)``: and the vision tower's packed attention as batched SDPA calls (pinned, non-blocking copies
  too, which only act on a GPU)

Every variant's scores are compared with the unoptimised ones (max |difference|, fp32).
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

from reward.eval.parallel import score_images
from reward.rewards.qbench import QBenchConfig, QBenchReward
from reward.testing import make_tiny_vlm
from reward.vlm import load_vlm
from reward.vlm.model import ScoringSpeed

logger = logging.getLogger("bench.scoring_speed")

VARIANTS = {
    "unoptimised": (ScoringSpeed.unoptimised(), False),
    "+ workers": (ScoringSpeed.unoptimised(), True),
    "+ grouping": (ScoringSpeed(preprocess="host", vision_attention="model"), True),
    "fast (default)": (ScoringSpeed(), True),
}


def write_images(folder: Path, n: int, side: int, seed: int = 0) -> list[tuple[str, Path, int]]:
    """``n`` JPEG files from ``side`` down to ``side / 2`` px a side, in a shuffled order of sizes."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    items = []
    for i in range(n):
        h = int(side * (0.5 + 0.5 * rng.random()))
        w = int(side * (0.5 + 0.5 * rng.random()))
        path = folder / f"{i:03d}.jpg"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path, quality=90)
        items.append((path.name, path, i + 1))
    return items


def run_model(vlm, items, batch_size: int, repeats: int, workers: int) -> dict[str, dict[str, float]]:
    """Each variant's best wall time and CPU time (this process's, all its threads) over ``repeats`` runs."""
    reward = QBenchReward(QBenchConfig(model="unused"), vlm=vlm)

    def once(name: str) -> dict[str, dict[str, float]]:
        vlm.speed, workers_prepare = VARIANTS[name]
        return score_images(
            reward, items, batch_size=batch_size, num_workers=workers, prepare_in_workers=workers_prepare
        ).scores

    reference = once("unoptimised")  # warm-up and the scores to compare with
    wall = dict.fromkeys(VARIANTS, float("inf"))
    cpu = dict.fromkeys(VARIANTS, float("inf"))
    diffs = {}
    for _ in range(repeats):
        for name in VARIANTS:  # in turn, so that machine load hits all alike
            w0, c0 = time.perf_counter(), time.process_time()
            scores = once(name)
            cpu[name] = min(cpu[name], time.process_time() - c0)
            wall[name] = min(wall[name], time.perf_counter() - w0)
            diffs[name] = max(abs(scores[k]["score"] - reference[k]["score"]) for k in reference)
    vlm.speed = ScoringSpeed()
    n = len(items)
    return {v: {"images_s": n / wall[v], "images_cpu_s": n / cpu[v], "max_diff": diffs[v]} for v in VARIANTS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model only")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--images", type=int, default=128, help="images for the tiny model (a third for the others)")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers (0: all in this process)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: CPU time is the work done)")
    parser.add_argument("--batch", type=int, default=64, help="images per reward call (the model's batch is 16)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(args.threads)
    configs = [("tiny Qwen2-VL (hidden 64, 2 layers), <= 112 px", {"family": "qwen2_vl"}, 112, args.images)]
    if not args.quick:
        configs += [
            (
                "large Qwen2-VL (hidden 512, 8 layers, ViT 4x256), <= 448 px",
                {"hidden": 512, "layers": 8, "vision_embed": 256, "vision_depth": 4},
                448,
                max(args.images // 3, 16),
            ),
            (
                "Qwen2.5-VL (hidden 64, windowed ViT 2x64), <= 448 px",
                {"family": "qwen2_5_vl", "vision_embed": 64},
                448,
                max(args.images // 3, 16),
            ),
        ]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, kwargs, side, n_images in configs:
            path = make_tiny_vlm(Path(tmp) / f"model{len(rows)}", image_pixels=side * side, **kwargs)
            vlm = load_vlm(path, min_pixels=28 * 28, max_pixels=side * side, batch_size=16)
            items = write_images(Path(tmp) / f"img{len(rows)}", n_images, side)
            n_params = sum(p.numel() for p in vlm.model.parameters())
            result = run_model(vlm, items, args.batch, args.repeats, args.workers)
            rows.append((f"{label}, {n_params / 1e6:.1f}M, {n_images} images", result))
    logger.info(
        "DataLoader workers: %d; torch threads: %d; %d images per reward call, 16 per forward pass; best of %d runs",
        args.workers,
        args.threads,
        args.batch,
        args.repeats,
    )
    logger.info(
        "%-78s %-15s %9s %7s %12s %7s %9s", "model", "variant", "images/s", "ratio", "img/CPU-s", "ratio", "max|diff|"
    )
    for label, result in rows:
        base, base_cpu = result["unoptimised"]["images_s"], result["unoptimised"]["images_cpu_s"]
        for name, r in result.items():
            logger.info(
                "%-78s %-15s %9.1f %6.2fx %12.1f %6.2fx %9.1e",
                label,
                name,
                r["images_s"],
                r["images_s"] / base,
                r["images_cpu_s"],
                r["images_cpu_s"] / base_cpu,
                r["max_diff"],
            )


if __name__ == "__main__":
    main()
