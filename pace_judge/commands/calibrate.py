"""``python pace_judge/calibrate.py``: one-time calibration of a PACE protocol with two rated anchor images
(:mod:`pace_judge.calibration`: generative human-in-the-loop mode, or benchmark mode)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from pace_judge.backends import Backend
from pace_judge.calibration import calibrate_benchmark, calibrate_generative
from pace_judge.protocol import Protocol, load_protocol, save_protocol
from reward.core.config import parse, store_schema

logger = logging.getLogger(__name__)


@dataclass
class PromptLists:
    positive: list[str] | None = None  # text-to-image prompts for high-quality candidates
    negative: list[str] | None = None  # ... and for low-quality ones (give both to skip the Generator agent)


@dataclass
class AgentModel:
    path: str | None = None  # backend=local: the VLM writing the prompts
    dtype: str = "auto"
    device: str | None = None
    batch_size: int = 32


@dataclass
class CalibrateSettings:
    protocol: str = MISSING  # the protocol JSON to calibrate (rewritten with its anchors unless output is set)
    output: str | None = None  # write the calibrated protocol here instead (anchors/ beside it)
    memory: str | None = None  # also store the calibrated protocol in this memory bank (replacing the old entry)
    embedder: str | None = None  # sentence-transformers path for the memory (default: all-MiniLM-L6-v2)
    # generative mode
    pipeline: str | None = None  # diffusers text-to-image checkpoint (e.g. Stable Diffusion v1.5)
    out: str | None = None  # candidates and contact sheet (default: PROTOCOL_DIR/calibration)
    candidates: int = 4  # images rendered: half from positive prompts, half from negative ones
    scores: list[float] | None = None  # one 1-5 score per candidate, e.g. scores=1,3,4,5; null: asked on the terminal
    prompts: PromptLists = field(default_factory=PromptLists)
    steps: int = 30  # diffusion steps
    guidance: float = 7.5  # classifier-free guidance scale
    height: int = 512
    width: int = 512
    seed: int = 0
    dtype: str = "auto"  # pipeline dtype (auto: bf16 on GPU, fp32 on CPU)
    device: str | None = None  # null: cuda if available
    backend: str = "local"  # the Generator agent's backend: local | openai
    model: AgentModel = field(default_factory=AgentModel)
    server: dict[str, Any] = field(default_factory=dict)  # backend=openai: base_url, model, api_key, top_logprobs
    agents: dict[str, Any] = field(default_factory=dict)  # e.g. {retries: 2, prompts: FILE}
    # benchmark mode
    benchmark: str | None = None  # calibration split's ratings manifest: highest- and lowest-MOS images are anchors
    test: str | None = None  # the test split's manifest: checked to be disjoint from the calibration split
    dimension: str | None = None  # manifest rows of this dimension (default: the protocol's)


store_schema("calibrate_schema", CalibrateSettings)


def run(cfg: Any, backend: Backend | None = None) -> Protocol:
    """Calibrate the protocol; returns it calibrated (written to disk and, if set, to the memory bank).
    ``backend``: the Generator agent's (default: built from the settings)."""
    s = parse(CalibrateSettings, cfg, where="")
    c = dataclasses.asdict(s)
    protocol = load_protocol(s.protocol, check_anchors=False)
    target = Path(s.output or s.protocol)
    folder = target.resolve().parent
    mode = calibrate_benchmark if s.benchmark else calibrate_generative
    record = mode(c, protocol, folder, backend)
    protocol.provenance["calibration"] = record
    save_protocol(protocol, target)
    high, low = protocol.anchors["high"], protocol.anchors["low"]  # type: ignore[index]
    logger.info(
        "calibrated %r: high anchor %.2f, low anchor %.2f -> %s", protocol.dimension, high.score, low.score, target
    )
    if s.memory:
        from pace_judge.memory_bank import Embedder, MemoryBank

        MemoryBank(s.memory, Embedder(s.embedder)).add(load_protocol(target), replace=True)
    return load_protocol(target)
