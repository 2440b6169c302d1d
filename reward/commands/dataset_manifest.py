"""What ``python reward/dataset_manifest.py`` does: write a dataset read by name as an editable JSONL manifest.

The manifest holds exactly the rows every command reads from ``NAME:FOLDER[:SPLIT]`` (the same split, MOS flipped
where the dataset is a DMOS, images found where they are), one JSON object per line with image paths relative to
the manifest's folder; a sidecar ``.json`` beside it records the dataset, its scale, the split rule and seed, the
file read and the rows left out. The rows name their ``dataset``, so a command reading the manifest still takes
the dataset's own scale as ``mos_range``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from reward.core.errors import UserError
from reward.core.outputs import check_output_file
from reward.core.summary import log_summary
from reward.data import load_ratings
from reward.data.datasets import check_source
from reward.data.files import atomic_write_json, atomic_write_jsonl, safe_name

logger = logging.getLogger(__name__)


@dataclass
class DatasetManifestSettings:
    data: str = field(
        default=MISSING, metadata={"help": "NAME:FOLDER[:SPLIT], e.g. kadid10k:/data/kadid10k:test (no split: all)"}
    )
    out: str | None = field(
        default=None,
        metadata={
            "help": "the JSONL manifest, at or below FOLDER's images' common folder; null: FOLDER/NAME-SPLIT.jsonl",
            "output": "file",
        },
    )
    skip_bad: bool = field(
        default=False, metadata={"help": "true: leave out (and count, in the sidecar) rows whose image is missing"}
    )
    check_images: bool = field(
        default=False,
        metadata={"help": "true: decode every image now, so that a corrupt one is named (slow on big datasets)"},
    )
    overwrite: bool = field(
        default=False,
        metadata={"help": "true: an existing manifest (and its sidecar) is moved aside to NAME.old-<time>"},
    )

    def problems(self) -> list[str]:
        wrong = self.out and Path(self.out).suffix != ".jsonl"
        return [f"out={self.out}: a manifest is a .jsonl file"] if wrong else []


def run(settings: DatasetManifestSettings) -> dict[str, Any]:
    """Read the dataset, write the manifest and its sidecar; returns the sidecar's content."""
    src = check_source(settings.data)
    if src is None:
        raise UserError(
            f"data={settings.data}: give a dataset by name, NAME:FOLDER[:SPLIT] (e.g. spaq:/data/SPAQ:test)"
        )
    src = src.with_default("all")
    out = Path(settings.out) if settings.out else Path(src.folder) / f"{safe_name(f'{src.name}-{src.split}')}.jsonl"
    check_output_file(out, overwrite=settings.overwrite, companions=(".json",))
    manifest = load_ratings(str(src), skip_bad=settings.skip_bad, check_images=settings.check_images)
    home = out.resolve().parent
    rows = []
    for row in manifest.rows:
        try:
            image = Path(row.image).relative_to(home).as_posix()
        except ValueError:
            raise UserError(
                f"out={out}: the manifest must sit at or above its images (paths in a manifest stay inside its "
                f"folder), but {row.image} is not below {home}; write it in {manifest.info['folder']}"
            ) from None
        rows.append({"image": image, "dimension": row.dimension, "mos": row.mos, **row.extra})
    atomic_write_jsonl(out, rows)
    sidecar = {
        "manifest": str(out),
        "data": str(src),
        "rows": len(rows),
        **manifest.info,
        "skipped": [vars(r) for r in manifest.skipped],
    }
    atomic_write_json(out.with_suffix(".json"), sidecar)
    logger.info(
        "wrote %s: %d rows (%d images, %d skipped) from %s; split %s (%s); scale %s",
        out,
        len(rows),
        len({row["image"] for row in rows}),  # written (the reader's count holds rows it refused later)
        len(manifest.skipped),
        manifest.info["file"],
        src.split,
        manifest.info["split_rule"],
        manifest.info["scale"],
    )
    log_summary(
        "dataset_manifest",
        {"rows": len(rows), "skipped": len(manifest.skipped)},
        {"manifest": out, "sidecar": out.with_suffix(".json")},
    )
    return sidecar
