"""Cost per image of PACE's fast path (N probes + Track 2, with and without crops) against one direct Q-Bench query
on the same model, as ratios in one run, beside the token-count ideal.

    python bench/pace_cost.py            # tiny model and a larger random config (hidden 512, 8 layers, 448 px)
    python bench/pace_cost.py --quick    # tiny model only

The paper reports 0.67 s vs 0.12 s per image (5.6x) on an A100. Both rewards are timed alternately on the same
loaded model, best of ``--repeats`` (these machines jitter up to 10x: ratios, not absolute times, are the result).
The token-count ideal is the ratio of tokens each path must run through the model (image prefixes once per image
group thanks to prefix reuse, plus every suffix): what the ratio would be if cost were proportional to tokens.
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

from pace_judge.backends import LocalBackend
from pace_judge.config import PaceConfig
from pace_judge.pace import PaceReward
from pace_judge.protocol import Option, Probe, save_protocol
from pace_judge.testing import example_protocol, write_example_protocol
from reward.rewards.qbench import QBenchConfig, QBenchReward
from reward.testing import make_tiny_vlm
from reward.vlm import load_vlm

logger = logging.getLogger("bench.pace_cost")

PROBES = [
    ("Are object edges crisp?", True),
    ("Is there visible grain in flat regions?", True),
    ("Are the outlines of small objects clearly defined?", False),
    ("Is the main subject in focus?", False),
    ("Are the colours free of banding?", False),
]


def write_protocol(folder: Path, n_probes: int) -> Path:
    """A calibrated protocol with ``n_probes`` Yes/Somewhat/No probes (two with zoom)."""
    path = write_example_protocol(folder)  # anchors
    protocol = example_protocol()
    from pace_judge.protocol import load_protocol

    protocol.anchors = load_protocol(path).anchors
    opts = (Option("Yes", 5.0), Option("Somewhat", 3.0), Option("No", 1.0))
    protocol.probes = [Probe(q, opts, 1.0, "edge crispness", zoom) for q, zoom in PROBES[:n_probes]]
    return save_protocol(protocol, path)


def tokens(vlm, images: list[Image.Image], text: str) -> int:
    return int(vlm.processor(text=[text], images=images or None, return_tensors="pt")["input_ids"].shape[1])


def token_ideal(vlm, pace: PaceReward, qbench: QBenchReward, image: Image.Image, n_images: int) -> float:
    """Tokens PACE runs per image (shared prefixes once per group, every suffix, the anchors once per batch) over
    Q-Bench's."""
    scorer = pace.scorer
    assert scorer is not None and scorer.rank is not None and scorer.anchor_images is not None
    prefix = tokens(vlm, [image], vlm.render(1, "", ""))  # image group prefix (+ a few template tokens)
    suffixes = [tokens(vlm, [], q.question) + 4 for q in scorer.queries]  # question + end of turn + assistant start
    zoom_suffixes = [n for n, z in zip(suffixes, scorer.zoom, strict=True) if z]
    track1 = prefix + sum(suffixes) + scorer.n_crops * (prefix + sum(zoom_suffixes))  # crops: zoom probes only
    rank_text = vlm.render(3, scorer.rank.question, "")
    track2 = tokens(vlm, [*scorer.anchor_images, image], rank_text)
    end = vlm.prefix.vision_end
    anchors_prefix = rank_text[: rank_text.index(end, rank_text.index(end) + len(end)) + len(end)]
    shared = tokens(vlm, list(scorer.anchor_images), anchors_prefix)
    track2 = track2 - shared + shared / n_images  # the anchors' prefix runs once per batch
    q_text = vlm.render(1, qbench.query.question, qbench.query.response_prefix)
    return (track1 + track2) / tokens(vlm, [image], q_text)


def run(vlm, size: int, n_images: int, n_probes: int, repeats: int, folder: Path) -> list[dict[str, float]]:
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(n_images)]
    protocol = write_protocol(folder, n_probes)
    qbench = QBenchReward(QBenchConfig(model="in-memory"), vlm=vlm)
    rows = []
    for crops in (True, False):
        pace = PaceReward(
            PaceConfig(model="in-memory", protocol=str(protocol), crops={"enabled": crops}), backend=LocalBackend(vlm)
        )
        pace.score(images), qbench.score(images)  # warm-up
        best = [float("inf"), float("inf")]
        for _ in range(repeats):
            for i, reward in enumerate((pace, qbench)):
                t0 = time.perf_counter()
                reward.score(images)
                best[i] = min(best[i], time.perf_counter() - t0)
        ideal = token_ideal(vlm, pace, qbench, images[0], n_images)
        rows.append(
            {
                "crops": crops,
                "pace_s": best[0] / n_images,
                "qbench_s": best[1] / n_images,
                "ratio": best[0] / best[1],
                "ideal": ideal,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model only")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--images", type=int, default=8, help="images per call")
    parser.add_argument("--probes", type=int, default=5, help="probes in the protocol (two of them zoom)")
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
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, kwargs, size in configs:
            vlm = load_vlm(make_tiny_vlm(Path(tmp) / label.split()[0], **kwargs), batch_size=64)
            for r in run(vlm, size, args.images, args.probes, args.repeats, Path(tmp) / f"p-{label.split()[0]}"):
                results.append((label, r))
    logger.info(
        "PACE fast path (%d probes + Track 2) vs one Q-Bench query, %d images per call", args.probes, args.images
    )
    logger.info("%-48s %6s %11s %11s %7s %13s", "model", "crops", "PACE s/img", "QB s/img", "ratio", "token ideal")
    for label, r in results:
        logger.info(
            "%-48s %6s %11.4f %11.4f %6.2fx %12.2fx",
            label,
            "2x2" if r["crops"] else "off",
            r["pace_s"],
            r["qbench_s"],
            r["ratio"],
            r["ideal"],
        )
    logger.info("paper (A100, Qwen2.5-VL-7B): 0.67 s vs 0.12 s per image = 5.6x")


if __name__ == "__main__":
    main()
