"""A GRPO-trained scorer read two ways (``reward=reasoning-iqa``): one forward pass (``mode=expected``) against K
sampled answers averaged (``mode=sample``, the papers' way), as speed ratios and the SRCC between the two.

    python bench/reasoning_speed.py --scorer DIR/scorer        # a folder written by training/grpo_scorer.py
    python bench/reasoning_speed.py                             # a tiny random scorer (speed only: nothing parses)

Images are procedural scenes (training/procedural); each mode is timed on the same images, best of ``--repeats``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
from common import arguments, best_times, logger, markdown

from reward.eval.metrics import srcc
from reward.rewards.reasoning_iqa import build, scorer_meta
from reward.rewards.scorer_folder import write_metadata
from reward.testing import make_tiny_vlm
from training.procedural.synthetic import example_at


def main() -> None:
    args = arguments(
        __doc__,
        scorer=dict(default=None, help="scorer folder (default: a tiny random one)"),
        images=dict(type=int, default=32, help="images scored"),
        repeats=dict(type=int, default=2, help="best of this many rounds"),
        max_new_tokens=dict(type=int, default=16, help="mode=sample: tokens per answer"),
    )
    with tempfile.TemporaryDirectory(prefix="reasoning-speed-") as work:
        scorer = args.scorer
        if scorer is None:  # a random tiny VLM as a scorer folder of the no-thinking prompt
            scorer = str(make_tiny_vlm(Path(work) / "scorer"))
            write_metadata(scorer, scorer_meta("visualquality-r1-fast"))
        examples = [example_at(7, i, 64) for i in range(args.images)]
        images, mos = [e.image for e in examples], [e.mos["lighting"] for e in examples]
        common = {"model": scorer, "dtype": "float32", "max_new_tokens": args.max_new_tokens}
        modes = {"expected": build(common | {"mode": "expected"})}
        modes |= {f"sample K={k}": build(common | {"mode": "sample", "samples": k}) for k in (1, 8)}
        timed = best_times([lambda r=r: r.score(images).scores.numpy() for r in modes.values()], args.repeats)
        base, _, expected = timed[0]
        rows, record = [], {}
        for (name, _), (wall, _, scores) in zip(modes.items(), timed, strict=True):
            ok = np.isfinite(scores) & np.isfinite(expected)
            both = float(srcc(scores[ok], expected[ok])) if ok.sum() > 2 else None
            truth = float(srcc(scores[ok], np.array(mos)[ok])) if ok.sum() > 2 else None
            parsed = float(np.isfinite(scores).mean())
            shown = [f"{v:.3f}" if v is not None else "-" for v in (both, truth)]
            rows.append([name, f"{args.images / wall:.1f}", f"{wall / base:.1f}x", f"{parsed:.2f}", *shown])
            record[name] = {"images_per_s": args.images / wall, "vs_expected": wall / base, "srcc_expected": both}
        print(markdown(["mode", "images/s", "time vs expected", "parsed", "SRCC vs expected", "SRCC vs MOS"], rows))
        logger.info("%s", json.dumps(record))


if __name__ == "__main__":
    main()
