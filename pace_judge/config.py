"""Settings of the ``pace`` reward and the PACE judge (:class:`PaceConfig`), checked before any model loads, and
the model they score with (:func:`load_backend`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf

from pace_judge.agents import AgentConfig
from pace_judge.calibration import CalibrationSource
from pace_judge.track_settings import LETTERINGS, PROBE_WEIGHTS, RANK_PROMPTS, CropConfig
from reward.core.config import BATCH, FRACTION, PIXELS, cross_field_problems, to_plain
from reward.core.config import problems as config_problems
from reward.core.errors import UserError
from reward.vlm import load_vlm
from reward.vlm.hub import missing_model
from reward.vlm.loading import ModelLoading, ServerConfig, loading_of


@dataclass
class Track2Settings:
    prompt: str = field(
        default="comparative",
        metadata={
            "help": "comparative: the anchors' scores are not told (PACE §4.5) | scored: they are",
            "choices": RANK_PROMPTS,
        },
    )


DEFAULT_MAX_PIXELS = 802_816  # 1024 visual tokens per image on Qwen-VL (pixels / 28^2): a 1024x768 photo stays whole


@dataclass
class PaceConfig(ModelLoading):
    """Settings of ``reward=pace`` (loading knobs from :class:`reward.vlm.ModelLoading`, at the top level)."""

    name: str = "pace"
    max_pixels: int | None = field(
        default=DEFAULT_MAX_PIXELS,
        metadata={"help": "visual-token budget per image (and crop); null: the checkpoint's", "range": PIXELS},
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
    memory: str | None = field(
        default=None, metadata={"help": "memory bank folder (stored protocols, routing)", "output": True}
    )
    omega: list[float] = field(
        default_factory=lambda: [0.5, 0.5], metadata={"help": "Track 1 / Track 2 weights, sum 1", "range": FRACTION}
    )
    theta: float = field(
        default=0.8, metadata={"help": "routing: fast path above this cosine to a stored dimension", "range": (-1, 1)}
    )
    fast_only: bool = field(
        default=False,
        metadata={"help": "PACE-Fast: experts and stored protocols only; a dimension routed nowhere is refused"},
    )
    backend: str = field(
        default="local",
        metadata={
            "help": "local (transformers) | openai (an OpenAI-compatible server, e.g. vLLM)",
            "choices": ("local", "openai"),
        },
    )
    server: ServerConfig = field(
        default_factory=ServerConfig,
        metadata={"help": "backend=openai: the OpenAI-compatible servers (base_urls ...)"},
    )
    crops: CropConfig = field(
        default_factory=CropConfig, metadata={"help": "zoom probes: asked on the whole image and on a grid of crops"}
    )
    track2: Track2Settings = field(default_factory=Track2Settings)
    probe_weights: str = field(
        default="uniform",
        metadata={
            "help": "Track 1's w_r: uniform (1/N, eq. 6) | agent (the Visualizer's weights)",
            "choices": PROBE_WEIGHTS,
        },
    )
    lettering: str = field(
        default="best-first",
        metadata={
            "help": "Track 1's option letters: best-first (A = best) | reversed | shuffled (seeded)",
            "choices": LETTERINGS,
        },
    )
    lettering_seed: int = field(
        default=0,
        metadata={"help": "lettering=shuffled: the seed of the options' order (recorded in each explanation)"},
    )
    calibration: CalibrationSource = field(
        default_factory=CalibrationSource,
        metadata={
            "help": "benchmark=MANIFEST or pipeline=DIR scores=[...]: calibrates a protocol the memory bank "
            "routes to before it is stored or used"
        },
    )
    allow_absolute_paths: bool = field(
        default=False, metadata={"help": "protocol anchors may be absolute paths (default: inside the file's folder)"}
    )
    experts: Any = field(  # a mapping; Any: given whole as YAML text where Hydra's grammar cannot read it
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

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.experts, str):  # experts={清晰度: {...}}: Hydra cannot read the key, so it came as text
            try:
                self.experts = OmegaConf.to_container(OmegaConf.create(self.experts))
            except Exception as err:  # noqa: BLE001 - YAML's error, named with the key
                said = " ".join(str(err).split())
                raise UserError(f"experts={self.experts!r}: not a YAML mapping ({said})") from None
        if not isinstance(self.experts, dict):
            raise UserError(f"experts={self.experts!r}: give a mapping {{DIMENSION: {{name: REWARD, ...}}}}")

    def problems(self, where: str = "") -> list[str]:
        """The checks between fields (types and ranges are the fields')."""
        key, found = f"{where}." if where else "", []
        if bool(self.protocol) == bool(self.dimension):
            which = "both" if self.protocol else "neither"
            found.append(
                f"pass exactly one of {key}protocol=FILE (used as is) or {key}dimension='...' (routed/built), got "
                f"{which}"
            )
        if len(self.omega) != 2 or min(self.omega) < 0 or abs(sum(self.omega) - 1.0) > 1e-6:
            found.append(f"omega must be two non-negative weights summing to 1 (e.g. [0.5, 0.5]), got {self.omega}")
        if self.backend == "local" and self.model is None:
            found.append(f"backend=local needs {key}model=PATH (a VLM checkpoint directory)")
        if len(self.crops.grid) != 2 or min(self.crops.grid) < 1:
            found.append(f"crops.grid must be [rows, cols] of positive integers, got {self.crops.grid}")
        if (self.calibration.benchmark or self.calibration.pipeline) and not self.memory:
            found.append(
                f"{key}calibration=... calibrates protocols of the memory bank and stores them there: set "
                f"{key}memory=DIR too (a protocol file is calibrated with perceptual-rewards calibrate protocol=FILE "
                "...)"
            )
        return found


def load_backend(kind: str, model: str | None, settings: Any, server: Any) -> Any:
    """``local``: the VLM at ``model`` (the knobs of ``settings``); ``openai``: the servers of ``server``."""
    if kind == "openai":
        from reward.vlm.server import served_vlm

        return served_vlm(server)
    if kind != "local" or not model:
        raise UserError(f"backend={kind}: choose local with a model=PATH (a VLM checkpoint) or openai (a server)")
    return load_vlm(str(model), loading_of(settings), batch_size=settings.batch_size)


def validate(cfg: PaceConfig, where: str = "", *, check_model: bool = True) -> None:
    """Every problem at once, before any model loads (keys prefixed by ``where``: ``reward`` under ``reward=pace``):
    the fields' types and ranges (a config built directly), :meth:`PaceConfig.problems`, and the model's files
    (``check_model`` false: a backend was given, so the model path is not checked)."""
    key = f"{where}." if where else ""
    problems = config_problems(type(cfg), to_plain(cfg), where) + cross_field_problems(cfg, where)
    if check_model and cfg.backend == "local" and (problem := missing_model(cfg.model, f"{key}model", cached=True)):
        problems.append(problem)
    if problems:
        raise UserError(
            f"invalid {'reward=pace settings' if where else 'pace config'}:\n  - " + "\n  - ".join(problems)
        )
