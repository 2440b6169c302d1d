"""A small calibrated protocol with anchor images, written offline for tests, the bench and the README."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from pace_judge.protocol import Anchor, Option, Probe, Protocol, SubDimension, save_protocol


def example_protocol(dimension: str = "sharpness") -> Protocol:
    """Three probes over two sub-dimensions: unequal weights, a zoom probe, a two-option probe, scores 1-5."""
    yes_some_no = (Option("Yes", 5.0), Option("Somewhat", 3.0), Option("No", 1.0))
    return Protocol(
        dimension=dimension,
        sub_dimensions=[
            SubDimension("edge crispness", "object edges are crisp, not smeared"),
            SubDimension("noise", "flat regions are free of grain"),
        ],  # fmt: skip
        probes=[
            Probe("Are object edges crisp?", yes_some_no, 1.0, "edge crispness", True),
            Probe(
                "Is there visible grain in flat regions?", (Option("No", 4.0), Option("Yes", 2.0)), 2.0, "noise", False
            ),  # fmt: skip
            Probe("Are the outlines of small objects clearly defined?", yes_some_no, 0.5, "edge crispness", False),
        ],
        provenance={"backbone": "hand-written", "rounds": 0, "critic": []},
    )


def write_example_protocol(folder: str | Path, *, seed: int = 0, anchors: bool = True) -> Path:
    """``folder/protocol.json`` (+ ``anchors/high.png`` and ``anchors/low.png`` when ``anchors``)."""
    folder = Path(folder)
    protocol = example_protocol()
    if anchors:
        rng = np.random.default_rng(seed)
        (folder / "anchors").mkdir(parents=True, exist_ok=True)
        smooth = np.linspace(0, 255, 64 * 64 * 3).reshape(64, 64, 3).astype(np.uint8)
        Image.fromarray(smooth).save(folder / "anchors" / "high.png")
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(folder / "anchors" / "low.png")
        protocol.anchors = {"high": Anchor("anchors/high.png", 4.6), "low": Anchor("anchors/low.png", 1.4)}
    return save_protocol(protocol, folder / "protocol.json")
