"""The scoring loop before and after its faster path: images/s on one model in one run, as ratios, each change
alone.

    python bench/scoring_speed.py            # tiny Qwen2-VL, the larger random Qwen2-VL and a windowed Qwen2.5-VL
    python bench/scoring_speed.py --quick    # tiny model only

The loop is ``reward.eval.parallel.score_images`` (as ``reward/evaluate.py`` runs it) over JPEG files of mixed
sizes, the zero-shot qbench reward, 64 images per reward call, 16 per forward pass. Each variant is timed in turn on
the same model, best of ``--repeats``; beside images/s (wall), images per CPU-second of this process, which the load
of these shared machines does not change (by default all in this process on one torch thread). The variants, each
adding one change: ``unoptimised`` (``ScoringSpeed.unoptimised()``), ``+ workers`` (the image processor in the
DataLoader workers), ``+ grouping`` (batches grouped by visual token count), ``fast (default)`` (the vision tower's
packed attention as batched SDPA calls); each one's max score difference from the unoptimised scores (fp32).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
from common import LARGE, QUICK, arguments, best_times, logger, markdown
from PIL import Image
from scoring_paths import ScoringSpeed, use_speed

from reward.eval.parallel import score_images
from reward.rewards.qbench import QBenchConfig, QBenchReward
from reward.testing import make_tiny_vlm
from reward.vlm import load_vlm

WINDOWED = {"family": "qwen2_5_vl", "vision_embed": 64}
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
        h, w = int(side * (0.5 + 0.5 * rng.random())), int(side * (0.5 + 0.5 * rng.random()))
        path = folder / f"{i:03d}.jpg"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path, quality=90)
        items.append((path.name, path, i + 1))
    return items


def run_model(vlm, items, batch_size: int, repeats: int, workers: int) -> list[list[str]]:
    """Each variant's best images/s (wall) and images per CPU-second (this process, all its threads) over ``repeats``
    runs, as ratios to the unoptimised path's, and its largest score difference from the unoptimised scores."""
    reward = QBenchReward(QBenchConfig(model="unused"), vlm=vlm)

    def once(name: str) -> dict[str, dict[str, float]]:
        speed, workers_prepare = VARIANTS[name]
        use_speed(vlm, speed)
        return score_images(
            reward, items, batch_size=batch_size, num_workers=workers, prepare_in_workers=workers_prepare
        ).scores

    reference = once("unoptimised")  # warm-up and the scores to compare with
    times = best_times([lambda v=v: once(v) for v in VARIANTS], repeats)
    use_speed(vlm, ScoringSpeed())
    n, (base, base_cpu, _) = len(items), times[0]
    rows = []
    for name, (wall, cpu, scores) in zip(VARIANTS, times, strict=True):
        diff = max(abs(scores[k]["score"] - reference[k]["score"]) for k in reference)
        rows.append([name, f"{n / wall:.1f}", f"{base / wall:.2f}x", f"{n / cpu:.1f}", f"{base_cpu / cpu:.2f}x"])
        rows[-1].append(f"{diff:.1e}")
    return rows


def main() -> None:
    args = arguments(
        __doc__,
        quick=QUICK,
        repeats={"type": int, "default": 5},
        images={"type": int, "default": 128, "help": "images for the tiny model (a third for the others)"},
        workers={"type": int, "default": 0, "help": "DataLoader workers (0: all in this process)"},
        threads={"type": int, "default": 1, "help": "torch threads (1: CPU time is the work done)"},
        batch={"type": int, "default": 64, "help": "images per reward call (the model's batch is 16)"},
    )
    torch.set_num_threads(args.threads)
    fewer = max(args.images // 3, 16)
    configs = [("tiny Qwen2-VL (hidden 64, 2 layers), <= 112 px", {"family": "qwen2_vl"}, 112, args.images)]
    if not args.quick:
        configs += [
            ("large Qwen2-VL (hidden 512, 8 layers, ViT 4x256), <= 448 px", LARGE, 448, fewer),
            ("Qwen2.5-VL (hidden 64, windowed ViT 2x64), <= 448 px", WINDOWED, 448, fewer),
        ]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, kwargs, side, n_images) in enumerate(configs):
            path = make_tiny_vlm(Path(tmp) / f"model{i}", image_pixels=side * side, **kwargs)
            vlm = load_vlm(path, min_pixels=28 * 28, max_pixels=side * side, batch_size=16)
            items = write_images(Path(tmp) / f"img{i}", n_images, side)
            label += f", {sum(p.numel() for p in vlm.model.parameters()) / 1e6:.1f}M, {n_images} images"
            rows += [[label, *row] for row in run_model(vlm, items, args.batch, args.repeats, args.workers)]
    logger.info(
        "DataLoader workers: %d; torch threads: %d; %d images per reward call, 16 per forward pass; best of %d runs",
        *(args.workers, args.threads, args.batch, args.repeats),
    )
    logger.info(markdown(["model", "variant", "images/s", "ratio", "img/CPU-s", "ratio", "max abs diff"], rows))


if __name__ == "__main__":
    main()
