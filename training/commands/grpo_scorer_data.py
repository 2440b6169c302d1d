"""The data of ``training/grpo_scorer.py``: its settings, and the rows checked before any model loads.

A ratings source is read whole at set-up (:func:`reward.data.load_ratings`: every image decoded once, every MOS inside
the data's scale), as SFT reads its own: a bad row is refused naming its file and line, or with ``data.skip_bad=true``
skipped and counted; the rows of one rated dimension train (rows of several are refused, never merged) and the
command says which and how many.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from reward.core.config import SIDE
from reward.core.errors import UserError
from reward.rewards.reasoning_iqa import to_prompt_scale
from reward.rewards.reasoning_prompts import PROMPTS

logger = logging.getLogger(__name__)

SYNTHETIC_DIMENSIONS = ("lighting", "harmony", "layout", "distortion")


@dataclass
class ScorerDataSettings:
    train: str = field(
        default=MISSING,
        metadata={
            "help": '"synthetic" (procedural scenes, known quality) or a ratings source (manifest, NAME:FOLDER)'
        },
    )
    test: str | None = field(
        default=None, metadata={"help": "the same kinds (synthetic: a held-out seed), scored at the end"}
    )
    dimension: str | None = field(
        default=None,
        metadata={
            "help": "the rated dimension that trains (null: the data's only one; synthetic: lighting, harmony, layout "
            "or distortion, default lighting)"
        },
    )
    mos_range: list[float] | None = field(
        default=None,
        metadata={"help": "[low, high]: the data's MOS scale, mapped onto the prompt's 1-5; null: the source's own"},
    )
    skip_bad: bool = field(
        default=False, metadata={"help": "bad rows: false refuses the first (file:line), true skips and counts them"}
    )
    rows: int = field(default=4096, metadata={"help": "synthetic: training images", "range": (1, 10**9)})
    test_rows: int = field(default=200, metadata={"help": "synthetic: test images", "range": (2, 10**7)})
    synthetic_size: int = field(default=64, metadata={"help": "synthetic: image side in pixels", "range": SIDE})

    def problems(self) -> list[str]:
        """What is wrong with these settings alone (the data is read later, before any model loads)."""
        out = []
        if self.mos_range is not None and (len(self.mos_range) != 2 or self.mos_range[0] >= self.mos_range[1]):
            out.append(f"data.mos_range={list(self.mos_range)}: give [low, high] with low < high, e.g. [0, 100]")
        synthetic = "synthetic" in (self.train, self.test)
        if synthetic and self.dimension is not None and self.dimension not in SYNTHETIC_DIMENSIONS:
            out.append(f"data.dimension={self.dimension!r}: the synthetic scenes rate {list(SYNTHETIC_DIMENSIONS)}")
        return out


class Rows:
    """The training or test rows, each image read (or rendered) when asked for: ``prompt`` (the released prompt's
    turns), ``image``, ``mos`` on the prompt's 1-5 scale, ``image_id`` and, where the data names one,
    ``distortion``; :meth:`dataset` gives them to trl as a ``datasets.Dataset`` of indices whose transform makes each
    row when it is read. A ratings source is read and checked here, at once (see the module docstring)."""

    def __init__(
        self, data: ScorerDataSettings, prompt: str, seed: int, split: str, dimension: str | None = None
    ) -> None:
        """``split`` ``train`` or ``test``; ``dimension``: the one that trains (the test split: the training rows')."""
        source = data.train if split == "train" else data.test
        dimension = dimension or data.dimension
        released = PROMPTS[prompt]
        system = [{"role": "system", "content": released.system}] if released.system else []
        self.turns = [*system, {"role": "user", "content": released.question}]
        self.seed, self.size, self.skipped, self.source = seed, data.synthetic_size, 0, str(source)
        self.synthetic, self.range = source == "synthetic", mos_range(data, str(source))
        if self.synthetic:
            self.dim = dimension or "lighting"
            self.n = data.rows if split == "train" else data.test_rows
            self.seed += 0 if split == "train" else 1_000_003  # the test stream: another seed
            return
        self.rows, self.dim, self.skipped = _read(data, str(source), split, self.range, dimension)
        self.n = len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        from reward.data.images import load_image

        if self.synthetic:
            from training.procedural.synthetic import example_at

            ex = example_at(self.seed, i, self.size)
            image, mos, distortion = ex.image, ex.mos[self.dim], None
        else:
            row = self.rows[i]
            image, mos, distortion = load_image(row.image), row.mos, row.extra.get("distortion")
        return {
            "prompt": self.turns,
            "image": image,
            "mos": to_prompt_scale(mos, self.range),
            "image_id": i,
            "distortion": distortion,
        }

    def dataset(self) -> Any:
        import datasets

        def rows(batch: dict[str, list[int]]) -> dict[str, list[Any]]:
            made = [self[i] for i in batch["image_id"]]
            return {key: [row[key] for row in made] for key in made[0]}

        table = datasets.Dataset.from_dict({"image_id": list(range(self.n))})
        table.set_transform(rows)
        return table


def _read(
    data: ScorerDataSettings, source: str, split: str, scale: tuple[float, float], dimension: str | None
) -> tuple[list[Any], str, int]:
    """The checked rows of ``source`` rated on one dimension, that dimension and how many bad rows were skipped; said
    in the log."""
    from reward.data import ManifestError, load_ratings

    try:
        read = load_ratings(source, skip_bad=data.skip_bad, mos_range=scale, default_split=split)
    except ManifestError as err:
        hint = "" if data.skip_bad else "; or data.skip_bad=true to skip such rows and count them"
        scale_hint = " (data.mos_range=[low, high] is the data's scale)" if "outside mos_range" in str(err) else ""
        raise UserError(f"data.{split}: {str(err).rstrip('.')}{scale_hint}{hint}") from None
    dims = sorted({r.dimension for r in read.rows})
    if dimension is None and len(dims) > 1:
        raise UserError(
            f"data.{split}={source}: rows rated on {len(dims)} dimensions {dims}; a scorer learns one: set "
            f"data.dimension= one of them"
        )
    dim = dimension or dims[0]
    rows = [r for r in read.rows if r.dimension == dim]
    if not rows:
        raise UserError(f"data.dimension={dim!r}: no row of data.{split}={source} is rated on it; its: {dims}")
    skipped = f", {len(read.skipped)} bad row(s) skipped (data.skip_bad=true)" if read.skipped else ""
    logger.info("data.%s: %d rows rated on %r from %s%s", split, len(rows), dim, read.source, skipped)
    return rows, dim, len(read.skipped)


def mos_range(data: ScorerDataSettings, source: str) -> tuple[float, float]:
    """The MOS scale of ``source``: ``data.mos_range``, else the dataset's own (synthetic and manifests: 1-5)."""
    from reward.data.datasets.load import mos_range_of

    low, high = data.mos_range or ((1.0, 5.0) if source == "synthetic" else mos_range_of(source))
    return float(low), float(high)
