"""Cost per image of PACE's fast path (N probes + Track 2, with and without crops) against one direct Q-Bench query
on the same model, as ratios in one run, beside the token-count ideal.

    python bench/pace_cost.py            # tiny model and a larger random config (hidden 512, 8 layers, 448 px)
    python bench/pace_cost.py --quick    # tiny model only

The paper reports 0.67 s vs 0.12 s per image (5.6x) on an A100. Both rewards are timed in turn on the same model,
best of ``--repeats``. The token-count ideal is the ratio of the tokens each path runs (image prefixes once per group
thanks to prefix reuse, plus every suffix): the ratio if cost were proportional to tokens.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
from common import QUICK, arguments, best_times, logger, markdown, noise_images, speed_models
from PIL import Image

from pace_judge.config import PaceConfig
from pace_judge.pace import PaceReward
from pace_judge.protocol import Anchor, Option, Probe, Protocol, SubDimension, save_protocol
from pace_judge.tracks import CropConfig
from reward.rewards.qbench import QBenchConfig, QBenchReward

PROBES = [
    ("Are object edges crisp?", True),
    ("Is there visible grain in flat regions?", True),
    ("Are the outlines of small objects clearly defined?", False),
    ("Is the main subject in focus?", False),
    ("Are the colours free of banding?", False),
]


def write_protocol(folder: Path, n_probes: int) -> Path:
    """A calibrated protocol with ``n_probes`` Yes/Somewhat/No probes (two with zoom): a smooth high anchor image,
    a noisy low one."""
    (folder / "anchors").mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.linspace(0, 255, 64 * 64 * 3).reshape(64, 64, 3).astype(np.uint8)).save(
        folder / "anchors/high.png"
    )
    noise_images(1, 64)[0].save(folder / "anchors/low.png")
    options = (Option("Yes", 5.0), Option("Somewhat", 3.0), Option("No", 1.0))
    protocol = Protocol(
        dimension="sharpness",
        probes=[Probe(q, options, 1.0, "edge crispness", zoom) for q, zoom in PROBES[:n_probes]],
        sub_dimensions=[SubDimension("edge crispness", "object edges are crisp, not smeared")],
        anchors={"high": Anchor("anchors/high.png", 4.6), "low": Anchor("anchors/low.png", 1.4)},
    )
    return save_protocol(protocol, folder / "protocol.json")


def tokens(vlm, images: list[Image.Image], text: str) -> int:
    return int(vlm.processor(text=[text], images=images or None, return_tensors="pt")["input_ids"].shape[1])


def token_ideal(vlm, pace: PaceReward, qbench: QBenchReward, image: Image.Image, n_images: int) -> float:
    """Tokens PACE runs per image (shared prefixes once per group, every suffix, the anchors once per batch) over
    Q-Bench's."""
    scorer = pace.scorer
    assert scorer is not None and scorer.rank is not None and scorer.anchor_images
    prefix = tokens(vlm, [image], vlm.render(1, "", ""))  # image group prefix (+ a few template tokens)
    suffixes = [tokens(vlm, [], q.question) + 4 for q in scorer.queries]  # question + end of turn + assistant start
    zoom_suffixes = [n for n, z in zip(suffixes, scorer.zoom, strict=True) if z]
    track1 = prefix + sum(suffixes) + scorer.n_crops * (prefix + sum(zoom_suffixes))  # crops: zoom probes only
    rank_text = vlm.render(3, scorer.rank.question, "")
    track2 = tokens(vlm, [*scorer.anchor_images, image], rank_text)
    end = vlm.processor.tokenizer.convert_ids_to_tokens(vlm.model.config.vision_end_token_id)  # Qwen-VL's marker
    anchors_prefix = rank_text[: rank_text.index(end, rank_text.index(end) + len(end)) + len(end)]
    shared = tokens(vlm, list(scorer.anchor_images), anchors_prefix)
    track2 = track2 - shared + shared / n_images  # the anchors' prefix runs once per batch
    q_text = vlm.render(1, qbench.query.question, qbench.query.response_prefix)
    return (track1 + track2) / tokens(vlm, [image], q_text)


def run(vlm, size: int, n_images: int, n_probes: int, repeats: int, folder: Path) -> list[list[str]]:
    """Per crops setting: PACE's and Q-Bench's best seconds per image, their ratio and the token-count ideal."""
    images = noise_images(n_images, size)
    protocol = write_protocol(folder, n_probes)
    qbench = QBenchReward(QBenchConfig(model="in-memory"), vlm=vlm)
    rows = []
    for crops in (True, False):
        config = PaceConfig(model="in-memory", protocol=str(protocol), crops=CropConfig(enabled=crops))
        pace = PaceReward(config, backend=vlm)
        pace.score(images), qbench.score(images)  # warm-up
        (t_pace, _, _), (t_qbench, _, _) = best_times([lambda r=r: r.score(images) for r in (pace, qbench)], repeats)
        ideal = token_ideal(vlm, pace, qbench, images[0], n_images)
        cells = [
            f"{t_pace / n_images:.4f}",
            f"{t_qbench / n_images:.4f}",
            f"{t_pace / t_qbench:.2f}x",
            f"{ideal:.2f}x",
        ]
        rows.append(["2x2" if crops else "off", *cells])
    return rows


def main() -> None:
    args = arguments(
        __doc__,
        quick=QUICK,
        repeats={"type": int, "default": 3},
        images={"type": int, "default": 8, "help": "images per call"},
        probes={"type": int, "default": 5, "help": "probes in the protocol (two of them zoom)"},
    )
    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, vlm, size) in enumerate(speed_models(Path(tmp), args.quick)):
            for r in run(vlm, size, args.images, args.probes, args.repeats, Path(tmp) / f"p{i}"):
                rows.append([label, *r])
    logger.info(
        "PACE fast path (%d probes + Track 2) vs one Q-Bench query, %d images per call", args.probes, args.images
    )
    logger.info(markdown(["model", "crops", "PACE s/img", "QB s/img", "ratio", "token ideal"], rows))
    logger.info("paper (A100, Qwen2.5-VL-7B): 0.67 s vs 0.12 s per image = 5.6x")


if __name__ == "__main__":
    main()
