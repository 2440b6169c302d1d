"""PACE's test doubles: a small calibrated protocol with its two anchor images, and a scripted chat backend (the tiny
text-to-image pipeline calibration runs is :func:`reward.testing.make_tiny_text_to_image`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from pace_judge.protocol import Anchor, Option, Probe, Protocol, SubDimension, save_protocol
from reward.vlm import OptionLogProbs, OptionQuery


def example_protocol(dimension: str = "sharpness") -> Protocol:
    """Three probes over two sub-dimensions: unequal weights, a zoom probe, a two-option probe, scores 1-5."""
    yes_some_no = (Option("Yes", 5.0), Option("Somewhat", 3.0), Option("No", 1.0))
    return Protocol(
        dimension=dimension,
        sub_dimensions=[
            SubDimension("edge crispness", "object edges are crisp, not smeared"),
            SubDimension("noise", "flat regions are free of grain"),
        ],
        probes=[
            Probe("Are object edges crisp?", yes_some_no, 1.0, "edge crispness", True),
            Probe(
                "Is there visible grain in flat regions?", (Option("No", 4.0), Option("Yes", 2.0)), 2.0, "noise", False
            ),
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


class ScriptedBackend:
    """A test double for the agents' chat (a tiny random VLM cannot reason): ``script(prompt, n_images) -> str``.

    Probability calls go to a real backend when one is given (so a scripted build can be scored for real).
    ``calls`` records every (prompt, n_images) asked.
    """

    def __init__(self, script: Callable[[str, int], str], probes: Any = None) -> None:
        self.script = script
        self.probes = probes
        self.calls: list[tuple[str, int]] = []

    def chat(
        self,
        prompts: Sequence[str],
        images: Sequence[Sequence[Image.Image]],
        *,
        system: str | None = None,
        max_new_tokens: int = 512,
    ) -> list[str]:
        out = []
        for prompt, group in zip(prompts, images, strict=True):
            self.calls.append((prompt, len(group)))
            out.append(self.script(prompt, len(group)))
        return out

    def option_logprobs(
        self, images: Sequence[Sequence[Image.Image]], queries: Sequence[OptionQuery], *, system: str | None = None
    ) -> OptionLogProbs:
        if self.probes is None:
            raise RuntimeError("this scripted backend has no model for option log-probabilities")
        return self.probes.option_logprobs(images, queries, system=system)
