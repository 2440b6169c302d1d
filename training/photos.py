"""Real photos with synthetic distortions: held-out set, the BRISQUE peer, KADID-10k calibration.

    perceptual-rewards photos heldout out=HELDOUT [photos=DIR crop=112 side=224 crops=2 seed=0]
    perceptual-rewards photos brisque data=HELDOUT/ratings.jsonl [out=DIR]
    perceptual-rewards photos calibrate dmos=KADID/dmos.csv out=calibration.json

- ``heldout``: distorted versions of the held-out photos as a ratings manifest (``out/ratings.jsonl``);
- ``brisque``: the classical peer (BRISQUE) on a ratings manifest, SRCC/PLCC against its MOS;
- ``calibrate``: per-type, per-level MOS means from KADID-10k's ``dmos.csv`` (JSON for ``data.calibration=``).

The tools are :mod:`training.procedural.photos`; the settings are :class:`PhotosSettings` below.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reward.core.config import SIDE
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
    crop: int = field(default=112, metadata={"help": "heldout: crop side in pixels, at native scale", "range": SIDE})
    crops: int = field(default=2, metadata={"help": "heldout: random crops per held-out photo", "range": (1, 1000)})
    side: int | None = field(
        default=None, metadata={"help": "heldout: downscale photos to this short side first", "range": SIDE}
    )
    seed: int = field(default=0, metadata={"help": "heldout: crop positions and noise"})
    calibration: str | None = field(
        default=None, metadata={"help": "heldout: MOS table JSON (default: the built-in KADID-shaped table)"}
    )
    data: str | None = field(default=None, metadata={"help": "brisque: ratings manifest to score"})
    dmos: str | None = field(default=None, metadata={"help": "calibrate: KADID-10k's dmos.csv"})


def run(settings: PhotosSettings) -> Any:
    from reward.core.cli import check_subcommand

    check_subcommand(settings, NEEDS)
    if settings.cmd == "heldout":
        table = load_calibration(settings.calibration)
        sizes = {"crop": settings.crop, "crops_per_photo": settings.crops, "side": settings.side}
        manifest = write_heldout(settings.out, settings.photos, **sizes, seed=settings.seed, calibration=table)
        log_summary(
            "photos heldout", {"crop": settings.crop, "crops per photo": settings.crops}, {"manifest": manifest}
        )
        return manifest
    if settings.cmd == "brisque":
        metrics = evaluate_brisque(settings.data, settings.out)
        logger.info("BRISQUE on %s: %s", settings.data, json.dumps(metrics))
        files = {"metrics": Path(settings.out) / "brisque_metrics.json" if settings.out else None}
        log_summary("photos brisque", {"images": metrics["n"], "SRCC": metrics["srcc"]}, files)
        return metrics
    path = atomic_write_json(settings.out, calibration_from_kadid(settings.dmos))
    log_summary("photos calibration", {"from": settings.dmos}, {"calibration": path})
    return path


if __name__ == "__main__":
    from reward.core.cli import main

    main("photos", run, schema=PhotosSettings, doc=__doc__, subcommands=SUBCOMMANDS)
