"""Benchmark: a run's identity check (``run.json``'s inputs) first and on an unchanged rerun.

    python bench/identity.py [--weights-gib 2] [--images 10000]

Fingerprints a weights file and a manifest of small PNGs as a command does at start: first with an empty digest
cache (every byte read), then again (an unchanged rerun: stats and cache look-ups only); both times and their ratio.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from common import arguments, logger, markdown
from PIL import Image


def main() -> None:
    args = arguments(__doc__, weights_gib={"type": float, "default": 2.0}, images={"type": int, "default": 10_000})
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        os.environ["PERCEPTUAL_REWARDS_CACHE"] = str(root / "cache")
        from reward.core.fingerprints import fingerprint

        rng = np.random.default_rng(0)
        with open(root / "model.safetensors", "wb") as f:
            for _ in range(int(args.weights_gib * 16)):
                f.write(rng.bytes(64 << 20))
        (root / "img").mkdir()
        for i in range(args.images):
            Image.fromarray(rng.integers(0, 255, (32, 32, 3), np.uint8)).save(root / f"img/{i}.png")
        rows = (json.dumps({"image": f"img/{i}.png", "dimension": "q", "mos": 3}) for i in range(args.images))
        (root / "ratings.jsonl").write_text("\n".join(rows) + "\n")
        times = []
        for _ in range(2):
            start = time.perf_counter()
            fingerprint(root / "model.safetensors"), fingerprint(root / "ratings.jsonl")
            times.append(time.perf_counter() - start)
    label = f"{args.weights_gib:g} GiB of weights + {args.images:,} images"
    rows = [[f"first ({label})", f"{times[0]:.2f}"], ["unchanged rerun", f"{times[1]:.2f}"]]
    logger.info(markdown(["identity check", "seconds"], [*rows, ["ratio", f"{times[0] / times[1]:.0f}x"]]))


if __name__ == "__main__":
    main()
