"""``python pace_judge/calibrate.py``: one-time calibration of a PACE protocol with two rated anchor images
(:mod:`pace_judge.calibration`: generative human-in-the-loop mode, or benchmark mode)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from pace_judge.agents import AgentConfig
from pace_judge.calibration import CalibrationSource, calibrate, evaluate_test
from pace_judge.config import DEFAULT_MAX_PIXELS, load_backend
from pace_judge.memory_bank import Embedder, MemoryBank
from pace_judge.protocol import Protocol, load_protocol, save_protocol
from reward.core.config import BATCH
from reward.core.outputs import fingerprint, path_inputs, prepare_output
from reward.core.summary import log_summary
from reward.data.manifest import allow_absolute_paths_field
from reward.vlm.loading import ModelLoading, ServerConfig

logger = logging.getLogger(__name__)


@dataclass
class AgentModel(ModelLoading):
    """The Generator agent's VLM (backend=local); loading knobs from :class:`reward.vlm.ModelLoading`."""

    path: str | None = field(default=None, metadata={"help": "backend=local: the VLM writing the prompts"})
    batch_size: int = field(default=32, metadata={"help": "queries per forward pass", "range": BATCH})
    max_pixels: int | None = field(
        default=DEFAULT_MAX_PIXELS,
        metadata={"help": "1024 visual tokens per image (Qwen-VL: pixels / 28^2)", "range": (1, None)},
    )


@dataclass
class CalibrateSettings(CalibrationSource):
    """The calibration source (benchmark or generative mode) and what to calibrate."""

    protocol: str = field(
        default=MISSING,
        metadata={"help": "the protocol JSON to calibrate (rewritten with its anchors unless output is set)"},
    )
    output: str | None = field(
        default=None,
        metadata={"help": "write the calibrated protocol here instead (anchors/ beside it)", "output": "file"},
    )
    memory: str | None = field(
        default=None,
        metadata={
            "help": "also store the calibrated protocol in this memory bank (replacing the old entry)",
            "output": True,
        },
    )
    embedder: str | None = field(
        default=None, metadata={"help": "sentence-transformers path for the memory (default: all-MiniLM-L6-v2)"}
    )
    backend: str = field(default="local", metadata={"help": "the Generator agent's backend: local | openai"})
    model: AgentModel = field(default_factory=AgentModel)
    server: ServerConfig = field(
        default_factory=ServerConfig,
        metadata={"help": "backend=openai: the OpenAI-compatible servers (base_urls ...)"},
    )
    agents: AgentConfig = field(
        default_factory=AgentConfig, metadata={"help": "the Generator agent (e.g. retries, prompts=FILE)"}
    )
    overwrite: bool = field(
        default=False, metadata={"help": "generative mode: move an existing candidates folder aside (OUT.old-<time>)"}
    )
    allow_absolute_paths: bool = allow_absolute_paths_field()

    def problems(self, where: str = "") -> list[str]:
        found = super().problems(where)
        if not self.benchmark and not self.pipeline:
            found.append(
                "generative calibration needs pipeline=DIR (a diffusers text-to-image checkpoint), "
                "or use benchmark=MANIFEST"
            )
        return found


def run(settings: CalibrateSettings, backend: Any = None) -> Protocol:
    """Calibrate the protocol; returns it as written (and stored in the memory bank, if set). ``backend``: the
    Generator agent's and the test split's model (default: ``model.path`` or the servers, loaded when needed)."""
    protocol, target, output, inputs = set_up(settings)
    agent = not settings.benchmark and not (settings.prompts.positive and settings.prompts.negative)
    calibrate(settings, protocol, target.resolve().parent, backend or (_backend(settings) if agent else None))
    protocol.provenance["calibration"]["inputs"] = inputs  # what the anchors came from, by content
    if settings.benchmark and settings.test:
        if scorer := backend or _backend(settings):
            test = evaluate_test(protocol, settings, scorer, batch_size=settings.model.batch_size)
            protocol.provenance["calibration"]["test"] = test
            said = "test split %s (%d images, scale %g-%g): SRCC %.3f, PLCC %.3f, HOR %.3f"
            logger.info(said, settings.test, test["n"], *test["scale"], test["srcc"], test["plcc"], test["hor"])
        else:
            logger.info("pass model.path=VLM (or backend=openai) to also score the test split with the protocol")
    save_protocol(protocol, target)
    del output  # the candidates folder is released
    return report(settings, protocol, target)


def _backend(settings: CalibrateSettings) -> Any:
    """``model.path`` (backend=local) or the servers; ``None`` without one (generative mode: the servers' error)."""
    if settings.backend == "local" and not settings.model.path:
        return None
    if settings.backend == "openai" and not settings.server.urls and settings.benchmark:
        return None
    return load_backend(settings.backend, settings.model.path, settings.model, settings.server)


def set_up(settings: CalibrateSettings) -> tuple[Protocol, Path, Any, dict[str, Any]]:
    """The protocol read and, for generative calibration, its candidates folder checked before anything renders:
    ``(protocol, where it is written, the candidates folder, the inputs by content)``."""
    protocol = load_protocol(
        settings.protocol, check_anchors=False, allow_absolute_paths=settings.allow_absolute_paths
    )
    target = Path(settings.output or settings.protocol)
    config = dataclasses.asdict(settings)
    if settings.benchmark:
        read = {k: v for k, v in config.items() if k not in ("out", "output", "memory", "overwrite")}
        return protocol, target, None, {k: fingerprint(v) for k, v in path_inputs(read).items()}
    settings.out = str(settings.out or target.resolve().parent / "calibration")
    output = prepare_output(  # held (with its folder's lock) until the calibration is done
        settings.out,
        "pace_judge/calibrate",
        {k: v for k, v in config.items() if k not in ("out", "overwrite")},
        inputs={"protocol": settings.protocol, "pipeline": settings.pipeline, "model": settings.model.path},
        overwrite=settings.overwrite,
        resume_hint=None,  # calibration starts anew: no resume= setting
    )
    return protocol, target, output, output.identity["inputs"]


def report(settings: CalibrateSettings, protocol: Protocol, target: Path) -> Protocol:
    """The anchors said, the memory bank updated (if set), the closing summary; the protocol as written."""
    high, low = protocol.anchors["high"].score, protocol.anchors["low"].score  # type: ignore[index]
    logger.info("calibrated %r: high anchor %.2f, low anchor %.2f -> %s", protocol.dimension, high, low, target)
    if settings.memory:
        MemoryBank(settings.memory, Embedder(settings.embedder)).add(load_protocol(target), replace=True)
    facts = {"dimension": protocol.dimension, "high anchor": high, "low anchor": low}
    files = {"protocol": target, "candidates": settings.out, "memory bank": settings.memory}
    log_summary("pace calibrate", facts, files)
    return load_protocol(target)
