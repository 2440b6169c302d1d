"""The settings of PACE's dual-track scorer (:mod:`pace_judge.tracks`) that :class:`pace_judge.config.PaceConfig`
holds: checked with a command's other settings, before torch loads."""

from __future__ import annotations

from dataclasses import dataclass, field

RANK_PROMPTS = ("comparative", "scored")  # scored: tells the model the anchors' scores
PROBE_WEIGHTS = ("uniform", "agent")  # uniform: w_r = 1/N (eq. 6) | agent: the Visualizer's weight of each probe
LETTERINGS = ("best-first", "reversed", "shuffled")  # Track 1's option order: A = best | A = worst | seeded


@dataclass
class CropConfig:
    grid: tuple[int, int] = field(
        default=(2, 2), metadata={"help": "rows x cols of crops for zoom probes", "range": (1, 8)}
    )
    combine: str = field(
        default="mean",
        metadata={
            "help": "mean | min: how a zoom probe merges the whole image with its crops",
            "choices": ("mean", "min"),
        },
    )
    enabled: bool = field(default=True, metadata={"help": "false: zoom probes are asked on the whole image only"})
    upscale: bool = field(
        default=False,
        metadata={"help": "true: each crop enlarged to the whole image's size (one image's tokens per crop)"},
    )
