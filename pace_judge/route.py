"""Fast and slow paths for a dimension named in words (PACE §4.2, A.1.3).

Order: a configured expert reward (exact name, or cosine > theta to its name); a stored protocol of the memory
bank (cosine > theta); else the agents build a protocol from an example image (slow path) and it is stored.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from PIL import Image

from pace_judge.backends import Backend
from pace_judge.config import PaceConfig
from pace_judge.protocol import Protocol
from pace_judge.scorer import Judgement
from reward.data.images import load_image, to_rgb

logger = logging.getLogger(__name__)


class ExpertJudge:
    """A registered reward standing in for a protocol; its scores are mapped linearly onto 1-5."""

    def __init__(self, dimension: str, cfg: dict[str, Any]) -> None:
        from reward.rewards.registry import get_reward, reward_info

        cfg = dict(cfg)
        name = cfg.pop("name", None)
        if not name:
            raise ValueError(f"experts.{dimension} needs name: a registered reward (e.g. qbench, sa-iqa)")
        if name == "pace":
            raise ValueError(f"experts.{dimension}: an expert cannot be pace itself")
        spec = reward_info(name)
        low, high = spec.score_range
        if not (torch.isfinite(torch.tensor([low, high])).all()):
            raise ValueError(f"experts.{dimension}: reward {name!r} has no finite score_range to map onto 1-5")
        self.name, self.dimension, self.range = name, dimension, (low, high)
        self.reward = get_reward(name, cfg)

    def judge(self, images: list[Image.Image]) -> Judgement:
        raw = self.reward.score(images).scores.float()
        low, high = self.range
        unit = ((raw - low) / (high - low)).clamp(0, 1)
        scores = 1.0 + 4.0 * unit
        expl = [
            {
                "score": float(s),
                "alpha1": float(u),
                "alpha2": None,
                "expert": self.name,
                "raw": float(r),
                "dimension": self.dimension,
                "probes": [],
            }
            for s, u, r in zip(scores, unit, raw, strict=True)
        ]
        return Judgement(scores, unit, None, expl)


@dataclass
class Route:
    """Where a dimension went: an expert reward, or a protocol (stored or just built); ``info`` says how."""

    info: dict[str, Any] = field(default_factory=dict)
    expert: ExpertJudge | None = None
    protocol: Protocol | None = None


def _expert_for(cfg: PaceConfig, dimension: str) -> str | None:
    experts = cfg.experts
    if not experts:
        return None
    for name in experts:
        if name.lower() == dimension.lower():
            return name
    from pace_judge.memory_bank import Embedder

    emb = Embedder(cfg.embedder)
    names = list(experts)
    cos = emb.encode(names) @ emb.encode([dimension])[0]
    best = int(cos.argmax())
    return names[best] if float(cos[best]) > cfg.theta else None


def resolve(cfg: PaceConfig, backend: Backend, example: Image.Image | None, *, defer: bool = False) -> Route | None:
    """Route ``cfg.dimension``; ``None`` when the slow path needs an image not yet seen (``defer``)."""
    dimension = cfg.dimension or ""
    expert = _expert_for(cfg, dimension)
    if expert is not None:
        judge = ExpertJudge(dimension, cfg.experts[expert])
        logger.info("%r -> expert reward %s (fast path)", dimension, judge.name)
        return Route({"dimension": dimension, "path": f"expert {judge.name}", "matched": expert}, expert=judge)
    bank = None
    if cfg.memory:
        from pace_judge.memory_bank import Embedder, MemoryBank

        bank = MemoryBank(cfg.memory, Embedder(cfg.embedder))
        hit = bank.route(dimension, cfg.theta)
        if hit.fast and hit.slug is not None:
            logger.info(
                "%r -> stored protocol %r (cosine %.3f > %.2f, fast path)",
                dimension,
                hit.dimension,
                hit.cosine,
                cfg.theta,
            )
            info = {"dimension": dimension, "path": "fast", "matched": hit.dimension, "cosine": hit.cosine}
            return Route(info, protocol=bank.load(hit.slug))
        if hit.dimension is not None:
            logger.info(
                "%r: closest stored %r has cosine %.3f <= %.2f: slow path",
                dimension,
                hit.dimension,
                hit.cosine,
                cfg.theta,
            )
    if example is None and cfg.example_image:
        example = to_rgb(load_image(cfg.example_image))
    if example is None and defer:
        return None
    from pace_judge.agents import agent_config, build_protocol

    model = cfg.model.get("path") if isinstance(cfg.model, dict) else cfg.model
    backbone = str(model or cfg.server.get("model") or "unknown")
    protocol = build_protocol(backend, dimension, example, agent_config(cfg.agents), backbone=backbone)
    if bank is not None:
        bank.add(protocol)
    return Route({"dimension": dimension, "path": "slow", "stored": bank is not None}, protocol=protocol)
