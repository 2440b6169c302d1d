"""Settings of the ``pace`` reward and the PACE judge (:class:`PaceConfig`), validated before any model loads."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pace_judge.agents import AgentConfig
from pace_judge.backends import ModelConfig
from pace_judge.calibration import CalibrationSource
from pace_judge.scorer import CropConfig
from reward.core.config import BATCH, FRACTION, parse
from reward.core.errors import ConfigError
from reward.vlm.hub import missing_model
from reward.vlm.loading import LOADING_KEYS, ModelLoading
from reward.vlm.server import ServerConfig


@dataclass
class Track2Settings:
    prompt: str = field(
        default="comparative",
        metadata={"help": "comparative: the anchors' scores are not told (PACE §4.5) | scored: they are"},
    )


DEFAULT_MAX_PIXELS = 802_816  # 1024 visual tokens per image on Qwen-VL (pixels / 28^2): a 1024x768 photo stays whole


@dataclass
class PaceConfig(ModelLoading):
    """Settings of ``reward=pace`` (loading knobs from :class:`reward.vlm.ModelLoading`, at the top level)."""

    name: str = "pace"
    max_pixels: int | None = field(
        default=DEFAULT_MAX_PIXELS,
        metadata={
            "help": "visual-token budget per image (and per crop); null: the checkpoint's",
            "range": (1, None),
        },
    )
    model: str | None = field(
        default=None, metadata={"help": "VLM checkpoint directory or Hub id; needed by backend=local"}
    )
    dimension: str | None = field(
        default=None, metadata={"help": "a quality dimension in words; routed to an expert, the memory or the agents"}
    )
    protocol: str | None = field(
        default=None, metadata={"help": "a protocol JSON used as is (no agents); alternative to dimension"}
    )
    memory: str | None = field(default=None, metadata={"help": "memory bank folder (stored protocols, routing)"})
    omega: list[float] = field(
        default_factory=lambda: [0.5, 0.5], metadata={"help": "Track 1 / Track 2 weights, sum 1", "range": FRACTION}
    )
    theta: float = field(
        default=0.8,
        metadata={
            "help": "routing: fast path when the best cosine to a stored dimension is above this",
            "range": (-1, 1),
        },
    )
    fast_only: bool = field(
        default=False,
        metadata={"help": "PACE-Fast: experts and stored protocols only; a dimension routed nowhere is refused"},
    )
    backend: str = field(
        default="local", metadata={"help": "local (transformers) | openai (an OpenAI-compatible server, e.g. vLLM)"}
    )
    server: ServerConfig = field(
        default_factory=ServerConfig,
        metadata={
            "help": "backend=openai: the OpenAI-compatible servers (base_urls, model, api_key_env, top_logprobs...)"
        },
    )
    crops: CropConfig = field(
        default_factory=CropConfig, metadata={"help": "zoom probes: asked on the whole image and on a grid of crops"}
    )
    track2: Track2Settings = field(default_factory=lambda: Track2Settings())
    probe_weights: str = field(
        default="uniform", metadata={"help": "Track 1's w_r: uniform (1/N, eq. 6) | agent (the Visualizer's weights)"}
    )
    lettering: str = field(
        default="best-first",
        metadata={"help": "Track 1's option letters: best-first (A = best) | reversed | shuffled (seeded)"},
    )
    lettering_seed: int = field(
        default=0,
        metadata={"help": "lettering=shuffled: the seed of the options' order (recorded in each explanation)"},
    )
    calibration: CalibrationSource = field(
        default_factory=lambda: CalibrationSource(),
        metadata={
            "help": (
                "benchmark=MANIFEST or pipeline=DIR scores=[...]: calibrates a protocol the memory bank "
                "routes to before it is stored or used"
            )
        },
    )
    allow_absolute_paths: bool = field(
        default=False, metadata={"help": "protocol anchors may be absolute paths (default: inside the file's folder)"}
    )
    experts: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "dimension -> a registered reward standing in for a protocol: one reward config ({name: qbench, "
            "model: PATH}), a list of them (their mean), or {members: [...], weights: [...]}"
        },
    )
    embedder: str | None = field(
        default=None, metadata={"help": "sentence-transformers model for routing; default: all-MiniLM-L6-v2 (offline)"}
    )
    agents: AgentConfig = field(
        default_factory=AgentConfig, metadata={"help": "the agents that build a protocol for a new dimension"}
    )
    example_image: str | None = field(
        default=None, metadata={"help": "the Visualizer's grounding image (default: the first image scored)"}
    )
    batch_size: int = field(
        default=32,
        metadata={"help": "(image group, probe) queries per forward pass", "may_change": True, "range": BATCH},
    )


def model_config(model: str | None, cfg: PaceConfig) -> ModelConfig | None:
    """The local VLM of ``cfg``: ``model`` with the loading knobs and batch size of ``cfg``'s top level."""
    if model is None:
        return None
    knobs = {k: getattr(cfg, k) for k in LOADING_KEYS}
    return ModelConfig(str(model), batch_size=cfg.batch_size, **knobs)


def crop_config(raw: CropConfig | dict[str, Any]) -> CropConfig:
    c = parse(CropConfig, _plain(raw), where="crops")
    grid = tuple(int(v) for v in c.grid)
    if len(grid) != 2 or min(grid) < 1:
        raise ValueError(f"crops.grid must be [rows, cols] of positive integers, got {c.grid}")
    if c.combine not in ("mean", "min"):
        raise ValueError(f"crops.combine must be mean or min, got {c.combine!r}")
    return CropConfig(grid, c.combine, bool(c.enabled), bool(c.upscale))  # type: ignore[arg-type]


def track2_prompt(raw: Track2Settings | dict[str, Any]) -> str:
    """``track2.prompt``: which Track 2 question is asked (pace_judge.tracks.RANK_PROMPTS)."""
    from pace_judge.tracks import RANK_PROMPTS

    prompt = parse(Track2Settings, _plain(raw), where="track2").prompt
    if prompt not in RANK_PROMPTS:
        raise ValueError(f"track2.prompt={prompt!r}: choose one of {', '.join(RANK_PROMPTS)}")
    return prompt


def calibration_source(raw: CalibrationSource | dict[str, Any]) -> dict[str, Any]:
    """``calibration``: a :class:`pace_judge.calibration.CalibrationSource` as a mapping (empty: none configured)."""
    source = parse(CalibrationSource, _plain(raw), where="calibration")
    return dataclasses.asdict(source) if source.configured else {}


def _plain(raw: Any) -> dict[str, Any]:
    return dataclasses.asdict(raw) if dataclasses.is_dataclass(raw) and not isinstance(raw, type) else dict(raw or {})


def calibration_source_or_none(cfg: PaceConfig) -> dict[str, Any]:
    try:
        return calibration_source(cfg.calibration)
    except ValueError:
        return {}  # reported by validate


def validate(cfg: PaceConfig, where: str = "", *, check_model: bool = True) -> None:
    """Every config problem at once, before any model is loaded: a :class:`~reward.core.errors.ConfigError` (one
    message, exit 2) whose keys carry the prefix ``where`` (``reward`` under ``reward=pace``). ``check_model``
    false: the model is not loaded from ``model`` (a backend was given), so its path is not checked."""
    problems = []
    key = f"{where}." if where else ""
    if bool(cfg.protocol) == bool(cfg.dimension):
        which = "both" if cfg.protocol else "neither"
        problems.append(
            f"pass exactly one of {key}protocol=FILE (used as is) or {key}dimension='...' (routed/built), got {which}"
        )
    if len(cfg.omega) != 2 or min(cfg.omega) < 0 or abs(sum(cfg.omega) - 1.0) > 1e-6:
        problems.append(f"omega must be two non-negative weights summing to 1 (e.g. [0.5, 0.5]), got {cfg.omega}")
    if not -1.0 <= cfg.theta <= 1.0:
        problems.append(f"theta is a cosine threshold in [-1, 1], got {cfg.theta}")
    if cfg.backend not in ("local", "openai"):
        problems.append(f"backend must be local or openai, got {cfg.backend!r}")
    if cfg.backend == "local" and cfg.model is None:
        problems.append("backend=local needs model=PATH (a VLM checkpoint directory)")
    if check_model and cfg.backend == "local" and (problem := missing_model(cfg.model, f"{key}model", cached=True)):
        problems.append(problem)
    for key, check in (("crops", crop_config), ("track2", track2_prompt), ("calibration", calibration_source)):
        try:
            check(getattr(cfg, key))
        except ValueError as err:
            problems.append(str(err))
    from pace_judge.tracks import LETTERINGS, PROBE_WEIGHTS

    if cfg.probe_weights not in PROBE_WEIGHTS:
        problems.append(f"probe_weights={cfg.probe_weights!r}: choose one of {', '.join(PROBE_WEIGHTS)}")
    if cfg.lettering not in LETTERINGS:
        problems.append(f"lettering={cfg.lettering!r}: choose one of {', '.join(LETTERINGS)}")
    if calibration_source_or_none(cfg) and not cfg.memory:
        problems.append(
            "calibration=... calibrates protocols of the memory bank and stores them there: set memory=DIR too "
            "(a protocol file is calibrated with python pace_judge/calibrate.py protocol=FILE ...)"
        )
    if problems:
        raise ConfigError(
            f"invalid {'reward=pace settings' if where else 'pace config'}:\n  - " + "\n  - ".join(problems)
        )
