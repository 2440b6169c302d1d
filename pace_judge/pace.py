"""The ``pace`` reward: PACE's dual-track judge behind ``reward.get_reward("pace", cfg)``.

    python reward/evaluate.py reward=pace reward.model=PATH reward.protocol=FILE data=MANIFEST out=DIR

With ``protocol=FILE`` the protocol is used as is (no agents, no memory). With ``dimension=...`` the dimension is
routed (PACE §4.2): to a configured expert reward, to a stored protocol of the memory bank whose dimension is
close enough (cosine > theta), or else the agents build a protocol (slow path) which is stored for reuse.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from PIL import Image

from pace_judge.backends import Backend, ModelConfig, make_backend
from pace_judge.scorer import CropConfig, DualTrackScorer, Judgement
from reward.core.config import from_mapping
from reward.rewards.base import RewardOutput
from reward.vlm.loading import LOADING_KEYS, ModelLoading

logger = logging.getLogger(__name__)


@dataclass
class PaceConfig(ModelLoading):
    """Settings of ``reward=pace`` (loading knobs from :class:`reward.vlm.ModelLoading`, used when ``model`` is a
    path)."""

    name: str = "pace"
    model: Any = None  # VLM checkpoint path, or {path, dtype, device, batch_size}; needed by backend=local
    dimension: str | None = None  # a quality dimension in words; routed to an expert, the memory or the agents
    protocol: str | None = None  # a protocol JSON used as is (no agents); alternative to dimension
    memory: str | None = None  # memory bank folder (stored protocols, routing)
    omega: list[float] = field(default_factory=lambda: [0.5, 0.5])  # Track 1 / Track 2 weights, sum 1
    theta: float = 0.8  # routing: fast path when the best cosine to a stored dimension is above this
    backend: str = "local"  # local (transformers) | openai (an OpenAI-compatible server, e.g. vLLM)
    server: dict[str, Any] = field(default_factory=dict)  # openai backend: base_url, model, api_key, top_logprobs
    crops: dict[str, Any] = field(default_factory=dict)  # grid: [2, 2], combine: mean | min, enabled: true
    experts: dict[str, Any] = field(default_factory=dict)  # dimension -> registered reward config ({name: qbench})
    embedder: str | None = None  # sentence-transformers model for routing; default: all-MiniLM-L6-v2 (offline)
    agents: dict[str, Any] = field(default_factory=dict)  # agent settings (pace_judge.agents.AgentConfig)
    example_image: str | None = None  # the Visualizer's grounding image (default: the first image scored)
    batch_size: int = 32  # (image group, probe) queries per forward pass


def model_config(model: Any, cfg: PaceConfig) -> ModelConfig | None:
    if model is None:
        return None
    if isinstance(model, str):
        knobs = {k: getattr(cfg, k) for k in LOADING_KEYS}
        return ModelConfig(model, batch_size=cfg.batch_size, **knobs)
    return from_mapping(ModelConfig, model, where="reward.model")


def crop_config(raw: dict[str, Any]) -> CropConfig:
    c = from_mapping(CropConfig, raw, where="crops")
    grid = tuple(int(v) for v in c.grid)
    if len(grid) != 2 or min(grid) < 1:
        raise ValueError(f"crops.grid must be [rows, cols] of positive integers, got {c.grid}")
    if c.combine not in ("mean", "min"):
        raise ValueError(f"crops.combine must be mean or min, got {c.combine!r}")
    return CropConfig(grid, c.combine, bool(c.enabled))  # type: ignore[arg-type]


def validate(cfg: PaceConfig) -> None:
    """Every config problem at once, before any model is loaded."""
    problems = []
    if bool(cfg.protocol) == bool(cfg.dimension):
        problems.append("pass exactly one of protocol=FILE (used as is) or dimension='...' (routed/built)")
    if len(cfg.omega) != 2 or min(cfg.omega) < 0 or abs(sum(cfg.omega) - 1.0) > 1e-6:
        problems.append(f"omega must be two non-negative weights summing to 1 (e.g. [0.5, 0.5]), got {cfg.omega}")
    if not -1.0 <= cfg.theta <= 1.0:
        problems.append(f"theta is a cosine threshold in [-1, 1], got {cfg.theta}")
    if cfg.backend not in ("local", "openai"):
        problems.append(f"backend must be local or openai, got {cfg.backend!r}")
    if cfg.backend == "local" and cfg.model is None:
        problems.append("backend=local needs model=PATH (a VLM checkpoint directory)")
    if problems:
        raise ValueError("invalid pace config:\n  - " + "\n  - ".join(problems))


class PaceReward:
    """Scores in [1, 5]; ``last_judgement`` keeps the explanations of the last batch."""

    def __init__(self, cfg: PaceConfig, backend: Backend | None = None) -> None:
        validate(cfg)
        self.cfg = cfg
        self.crops = crop_config(cfg.crops)
        protocol = None
        if cfg.protocol:  # a bad protocol file fails before a model is loaded
            from pace_judge.protocol import load_protocol

            protocol = load_protocol(cfg.protocol)
        self.backend = backend or make_backend(cfg.backend, model_config(cfg.model, cfg), cfg.server)
        self.scorer: DualTrackScorer | None = None
        self.expert: Any = None
        self.route: dict[str, Any] = {}
        self.last_judgement: Judgement | None = None
        if protocol is not None:
            self.use_protocol(
                protocol, {"dimension": protocol.dimension, "path": "protocol file", "file": cfg.protocol}
            )
        else:
            self._resolve(None, defer=True)  # the slow path waits for an example image (the first one scored)

    def use_protocol(self, protocol: Any, route: dict[str, Any]) -> None:
        omega = (float(self.cfg.omega[0]), float(self.cfg.omega[1]))
        self.scorer = DualTrackScorer(protocol, self.backend, omega=omega, crops=self.crops)
        self.route = route
        if not protocol.calibrated:
            logger.warning(
                "protocol for %r has no anchors: Track 1 only, mapped to the option scale [%g, %g]; "
                "calibrate it with pace_judge/calibrate.py",
                protocol.dimension,
                *protocol.score_bounds,
            )

    def _resolve(self, example: Image.Image | None, *, defer: bool = False) -> None:
        from pace_judge.route import resolve

        resolve(self, example, defer=defer)

    def judge(self, images: Sequence[Image.Image]) -> Judgement:
        """Scores with explanations (per-probe option probabilities, sub-dimension scores, alpha1, alpha2)."""
        if self.scorer is None and self.expert is None:
            self._resolve(images[0] if images else None)
            self.route["example"] = "first image scored"
        judge = self.expert if self.expert is not None else self.scorer
        assert judge is not None
        self.last_judgement = judge.judge(list(images))
        return self.last_judgement

    def score(self, images: Sequence[Image.Image], prompts: Sequence[str] | None = None) -> RewardOutput:
        if not images:
            return RewardOutput(scores=torch.zeros(0))
        return RewardOutput(scores=self.judge(images).scores.float())


def build(cfg: dict[str, Any]) -> PaceReward:
    return PaceReward(from_mapping(PaceConfig, cfg, where="reward"))
