"""``python training/photos.py heldout|brisque|calibrate``: the real-photo tools (:mod:`training.procedural.photos`).

- ``heldout``: distorted versions of the held-out photos as a ratings manifest (``out/ratings.jsonl``);
- ``brisque``: the classical peer (BRISQUE) on a ratings manifest, SRCC/PLCC against its MOS;
- ``calibrate``: per-type, per-level MOS means from KADID-10k's ``dmos.csv`` (JSON for ``data.calibration=``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reward.core.config import check_subcommand, parse
from reward.core.summary import log_summary
from reward.data.files import atomic_write_json
from training.procedural.photos import calibration_from_kadid, evaluate_brisque, load_calibration, write_heldout

logger = logging.getLogger(__name__)

SUBCOMMANDS = ("heldout", "brisque", "calibrate")
NEEDS = {"heldout": ("out",), "brisque": ("data",), "calibrate": ("dmos", "out")}


@dataclass
class PhotosSettings:
    cmd: str = field(
        default="heldout", metadata={"help": "heldout | brisque | calibrate (the first word of the command line)"}
    )
    out: str | None = field(
        default=None,
        metadata={"help": "heldout: folder of the manifest; brisque: folder of metrics.json; calibrate: JSON file"},
    )
    photos: str | None = field(
        default=None, metadata={"help": "heldout: photo folder (default: the photos of installed packages)"}
    )
    crop: int = field(default=112, metadata={"help": "heldout: crop side in pixels, at native scale"})
    crops: int = field(default=2, metadata={"help": "heldout: random crops per held-out photo"})
    side: int | None = field(default=None, metadata={"help": "heldout: downscale photos to this short side first"})
    seed: int = field(default=0, metadata={"help": "heldout: crop positions and noise"})
    calibration: str | None = field(
        default=None, metadata={"help": "heldout: MOS table JSON (default: the built-in KADID-shaped table)"}
    )
    data: str | None = field(default=None, metadata={"help": "brisque: ratings manifest to score"})
    dmos: str | None = field(default=None, metadata={"help": "calibrate: KADID-10k's dmos.csv"})


def run(cfg: Any) -> Any:
    s = parse(PhotosSettings, cfg, where="")
    check_subcommand(s, NEEDS)
    if s.cmd == "heldout":
        manifest = write_heldout(
            s.out,
            s.photos,
            crop=s.crop,
            crops_per_photo=s.crops,
            seed=s.seed,
            calibration=load_calibration(s.calibration),
            side=s.side,
        )
        log_summary("photos heldout", {"crop": s.crop, "crops per photo": s.crops}, {"manifest": manifest})
        return manifest
    if s.cmd == "brisque":
        metrics = evaluate_brisque(s.data, s.out)
        logger.info("BRISQUE on %s: %s", s.data, json.dumps(metrics))
        files = {"metrics": Path(s.out) / "brisque_metrics.json" if s.out else None}
        log_summary("photos brisque", {"images": metrics["n"], "SRCC": metrics["srcc"]}, files)
        return metrics
    path = atomic_write_json(s.out, calibration_from_kadid(s.dmos))
    log_summary("photos calibration", {"from": s.dmos}, {"calibration": path})
    return path
