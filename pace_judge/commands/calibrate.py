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
from pace_judge.backends import Backend
from pace_judge.calibration import CalibrationError, CalibrationSource, calibrate, evaluate_test
from pace_judge.protocol import Protocol, load_protocol, save_protocol
from reward.core.config import BATCH, parse
from reward.core.outputs import fingerprint, path_inputs, prepare_output
from reward.core.summary import log_summary
from reward.data.manifest import allow_absolute_paths_field
from reward.vlm.loading import ModelLoading
from reward.vlm.server import ServerConfig

logger = logging.getLogger(__name__)


@dataclass
class AgentModel(ModelLoading):
    """The Generator agent's VLM (backend=local); loading knobs from :class:`reward.vlm.ModelLoading`."""

    path: str | None = field(default=None, metadata={"help": "backend=local: the VLM writing the prompts"})
    batch_size: int = field(default=32, metadata={"help": "queries per forward pass", "range": BATCH})
    max_pixels: int | None = field(
        default=802_816,
        metadata={"help": "1024 visual tokens per image (Qwen-VL: pixels / 28^2)", "range": (1, None)},
    )


@dataclass
class CalibrateSettings(CalibrationSource):
    """The calibration source (:class:`pace_judge.calibration.CalibrationSource`: benchmark or generative mode) and
    what to calibrate."""

    protocol: str = field(
        default=MISSING,
        metadata={"help": "the protocol JSON to calibrate (rewritten with its anchors unless output is set)"},
    )
    output: str | None = field(
        default=None, metadata={"help": "write the calibrated protocol here instead (anchors/ beside it)"}
    )
    memory: str | None = field(
        default=None,
        metadata={"help": "also store the calibrated protocol in this memory bank (replacing the old entry)"},
    )
    embedder: str | None = field(
        default=None, metadata={"help": "sentence-transformers path for the memory (default: all-MiniLM-L6-v2)"}
    )
    backend: str = field(default="local", metadata={"help": "the Generator agent's backend: local | openai"})
    model: AgentModel = field(default_factory=AgentModel)
    server: ServerConfig = field(
        default_factory=ServerConfig,
        metadata={
            "help": "backend=openai: the OpenAI-compatible servers (base_urls, model, api_key_env, top_logprobs...)"
        },
    )
    agents: AgentConfig = field(
        default_factory=AgentConfig, metadata={"help": "the Generator agent (e.g. retries, prompts=FILE)"}
    )
    overwrite: bool = field(
        default=False, metadata={"help": "generative mode: move an existing candidates folder aside (OUT.old-<time>)"}
    )
    allow_absolute_paths: bool = allow_absolute_paths_field()


def _scoring_backend(settings: CalibrateSettings) -> Backend | None:
    """The VLM that scores the test split: ``model.path`` (local) or the configured server; ``None`` without one."""
    from pace_judge.backends import ModelConfig, make_backend
    from reward.vlm.loading import LOADING_KEYS

    if settings.backend == "local" and not settings.model.path:
        return None
    if settings.backend == "openai" and not settings.server.urls:
        return None
    model = None
    if settings.model.path:
        knobs = {k: getattr(settings.model, k) for k in LOADING_KEYS}
        model = ModelConfig(settings.model.path, batch_size=settings.model.batch_size, **knobs)
    return make_backend(settings.backend, model, settings.server)


def run(cfg: Any, backend: Backend | None = None) -> Protocol:
    """Calibrate the protocol; returns it calibrated (written to disk and, if set, to the memory bank).
    ``backend``: the Generator agent's (default: built from the settings)."""
    setup = set_up(parse(CalibrateSettings, cfg, where=""))
    calibrate(setup.config, setup.protocol, setup.folder, backend)
    setup.protocol.provenance["calibration"]["inputs"] = setup.inputs  # what the anchors came from, by content
    if setup.settings.benchmark and setup.settings.test:
        _score_test_split(setup, backend)
    save_protocol(setup.protocol, setup.target)
    setup.output = None  # the candidates folder is released
    return report(setup)


@dataclasses.dataclass
class CalibrateSetup:
    """What a calibration works on: the settings (and their dict), the protocol, where it is written, the
    candidates folder (generative calibration, held with its lock until done) and the inputs known by content."""

    settings: CalibrateSettings
    config: dict[str, Any]
    protocol: Protocol
    target: Path
    folder: Path
    output: Any  # reward.core.outputs.Output, or None
    inputs: dict[str, Any]


def set_up(settings: CalibrateSettings) -> CalibrateSetup:
    """The protocol read and, for generative calibration, its candidates folder checked before anything renders."""
    config = dataclasses.asdict(settings)
    protocol = load_protocol(
        settings.protocol, check_anchors=False, allow_absolute_paths=settings.allow_absolute_paths
    )
    target = Path(settings.output or settings.protocol)
    folder = target.resolve().parent
    output = None
    if not settings.benchmark:  # generative: the candidates folder, checked before anything is rendered
        if not settings.pipeline:
            raise CalibrationError(
                "generative calibration needs pipeline=DIR (a diffusers text-to-image checkpoint), "
                "or use benchmark=MANIFEST"
            )
        out = Path(settings.out or folder / "calibration")
        record = {k: v for k, v in config.items() if k not in ("out", "overwrite")}
        output = prepare_output(  # held (with its folder's lock) until the calibration is done
            out,
            "pace_judge/calibrate",
            record,
            inputs={"protocol": settings.protocol, "pipeline": settings.pipeline, "model": settings.model.path},
            overwrite=settings.overwrite,
            resume_hint=None,  # calibration starts anew: no resume= setting
        )
        config["out"] = str(out)
    read = {k: v for k, v in config.items() if k not in ("out", "output", "memory", "overwrite")}
    inputs = (
        output.identity["inputs"] if output is not None else {k: fingerprint(v) for k, v in path_inputs(read).items()}
    )
    return CalibrateSetup(settings, config, protocol, target, folder, output, inputs)


def _score_test_split(setup: CalibrateSetup, backend: Backend | None) -> None:
    """The test split's numbers on the dataset's own scale, kept with the calibration record."""
    settings = setup.settings
    scorer = backend if backend is not None else _scoring_backend(settings)
    if scorer is None:
        logger.info("pass model.path=VLM (or backend=openai) to also score the test split with the protocol")
        return
    test = evaluate_test(setup.protocol, setup.config, scorer, batch_size=settings.model.batch_size)
    setup.protocol.provenance["calibration"]["test"] = test
    logger.info(
        "test split %s (%d images, scale %g-%g): SRCC %.3f, PLCC %.3f, HOR %.3f",
        settings.test,
        test["n"],
        *test["scale"],
        test["srcc"],
        test["plcc"],
        test["hor"],
    )


def report(setup: CalibrateSetup) -> Protocol:
    """The anchors said, the memory bank updated (if set), the closing summary; the protocol as written."""
    settings, protocol, target = setup.settings, setup.protocol, setup.target
    high, low = protocol.anchors["high"], protocol.anchors["low"]  # type: ignore[index]
    logger.info(
        "calibrated %r: high anchor %.2f, low anchor %.2f -> %s", protocol.dimension, high.score, low.score, target
    )
    if settings.memory:
        from pace_judge.memory_bank import Embedder, MemoryBank

        MemoryBank(settings.memory, Embedder(settings.embedder)).add(load_protocol(target), replace=True)
    facts = {"dimension": protocol.dimension, "high anchor": high.score, "low anchor": low.score}
    candidates = setup.config.get("out")
    log_summary(
        "pace calibrate", facts, {"protocol": target, "candidates": candidates, "memory bank": settings.memory}
    )
    return load_protocol(target)
