"""Fast and slow paths for a dimension named in words (PACE §4.2, A.1.3).

Order: configured expert rewards (exact name, or cosine > theta to its name; several are averaged on 1-5); a stored
protocol of the memory bank (cosine > theta); else the agents build a protocol from an example image (slow path), with
the closest stored protocol as reference, and it is stored. A protocol from the bank is only used calibrated: without
anchors it is calibrated from ``calibration`` (and stored back) or refused with the command that calibrates it.
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
from reward.core.errors import UserError
from reward.data.images import load_image, to_rgb

logger = logging.getLogger(__name__)


class ExpertJudge:
    """Registered rewards standing in for a protocol (PACE A.1.3: "an ensemble of specialized IQA experts ... to
    compute a consensus score"): each member's score is mapped linearly from its ``score_range`` onto 1-5 (a reward
    already on 1-5 is unchanged) and the consensus is their mean (``weights``: a weighted mean). A member that fails
    fails the judgement: no default score stands in for it.

    ``cfg`` is one reward config (``{name: qbench, ...}``), a list of them, or ``{members: [...], weights: [...]}``.
    """

    def __init__(self, dimension: str, cfg: Any) -> None:
        from reward.rewards.registry import get_reward, reward_info

        members, weights = _expert_members(dimension, cfg)
        self.dimension = dimension
        self.members: list[tuple[str, tuple[float, float], Any]] = []
        for i, raw in enumerate(members):
            raw = dict(raw)
            name = raw.pop("name", None)
            where = f"experts.{dimension}" + (f".members[{i}]" if len(members) > 1 else "")
            if not name:
                raise ValueError(f"{where} needs name: a registered reward (e.g. qbench, sa-iqa)")
            if name == "pace":
                raise ValueError(f"{where}: an expert cannot be pace itself")
            low, high = reward_info(name).score_range
            if not (torch.isfinite(torch.tensor([low, high])).all()):
                raise ValueError(f"{where}: reward {name!r} has no finite score_range to map onto 1-5")
            self.members.append((name, (low, high), get_reward(name, raw)))
        self.weights = weights or [1.0] * len(self.members)
        self.name = "+".join(m[0] for m in self.members)

    def judge(self, images: list[Image.Image]) -> Judgement:
        raws, mapped = [], []
        for _, (low, high), reward in self.members:
            raw = reward.score(images).scores.double()
            raws.append(raw)
            mapped.append(1.0 + 4.0 * ((raw - low) / (high - low)).clamp(0, 1))
        w = torch.tensor(self.weights, dtype=torch.float64)
        scores = (torch.stack(mapped, 1) * w).sum(1) / w.sum()
        unit = (scores - 1.0) / 4.0
        expl = []
        for i in range(len(images)):
            members = [
                {"expert": name, "raw": float(r[i]), "score": float(m[i]), "weight": float(wt)}
                for (name, _, _), r, m, wt in zip(self.members, raws, mapped, self.weights, strict=True)
            ]
            expl.append(
                {
                    "score": float(scores[i]),
                    "alpha1": float(unit[i]),
                    "alpha2": None,
                    "expert": self.name,
                    "raw": members[0]["raw"] if len(members) == 1 else None,
                    "members": members,
                    "scale": "experts 1-5",
                    "dimension": self.dimension,
                    "probes": [],
                }
            )
        return Judgement(scores.float(), unit.float(), None, expl)


def _expert_members(dimension: str, cfg: Any) -> tuple[list[dict[str, Any]], list[float] | None]:
    """The member configs and weights of ``experts.<dimension>`` (one reward, a list, or ``{members, weights}``)."""
    where = f"experts.{dimension}"
    weights = None
    if isinstance(cfg, dict) and "members" in cfg:
        extra = sorted(set(cfg) - {"members", "weights", "combine"})
        if extra:
            raise ValueError(f"{where}: unknown key(s) {extra}; an ensemble has members, weights, combine: mean")
        if cfg.get("combine", "mean") != "mean":
            raise ValueError(f"{where}.combine={cfg['combine']!r}: only mean (weighted by weights) is supported")
        members, weights = cfg["members"], cfg.get("weights")
    elif isinstance(cfg, list):
        members = cfg
    else:
        members = [cfg]
    if not isinstance(members, list) or not members or not all(isinstance(m, dict) for m in members):
        raise ValueError(f"{where}: give a reward config {{name: ...}}, a list of them, or {{members: [...]}}")
    if weights is not None:
        weights = [float(w) for w in weights]
        if len(weights) != len(members) or min(weights) < 0 or sum(weights) <= 0:
            raise ValueError(f"{where}.weights: one non-negative weight per member, not all zero; got {weights}")
    return [dict(m) for m in members], weights


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


class UncalibratedProtocolError(UserError):
    """A protocol of the memory bank has no anchors and no calibration source is configured."""


def _calibrate_command(bank: Any, slug: str) -> str:
    file = bank.protocol_file(slug)
    return (
        f"python pace_judge/calibrate.py protocol={file} memory={bank.folder} benchmark=CALIBRATION_MANIFEST "
        f"[test=TEST_MANIFEST]   (or pipeline=SD_DIR model.path=VLM_DIR scores=s1,s2,s3,s4)"
    )


def calibrated(cfg: PaceConfig, bank: Any, slug: str, backend: Backend) -> Protocol:
    """The bank's protocol ``slug``, calibrated: as stored, or calibrated now from ``cfg.calibration`` and stored back
    (PACE §4.2: "Once calibrated, the new protocol is stored"); with no calibration source, an error giving the
    command that calibrates it. Scores on the option scale never come out of the memory bank."""
    from pace_judge.calibration import calibrate
    from pace_judge.config import calibration_source

    protocol = bank.load_slug(slug)
    if protocol.calibrated:
        return protocol
    source = calibration_source(cfg.calibration)
    if not source:
        raise UncalibratedProtocolError(
            f"{bank.folder}: the protocol for {protocol.dimension!r} is stored uncalibrated (no anchors); PACE "
            "calibrates a protocol once before using it, and scores on its option scale would not be comparable "
            f"with calibrated ones. Calibrate it once:\n  {_calibrate_command(bank, slug)}\nor set "
            "calibration.benchmark=MANIFEST (or calibration.pipeline=DIR calibration.scores=[...]) to calibrate it "
            "here."
        )
    logger.info(
        "calibrating the stored protocol for %r (%s mode)",
        protocol.dimension,
        source.get("benchmark") and "benchmark" or "generative",
    )
    calibrate(source, protocol, bank.folder / slug, backend)
    bank.add(protocol, replace=True)
    return bank.load_slug(slug)


def resolve(cfg: PaceConfig, backend: Backend, example: Image.Image | None, *, defer: bool = False) -> Route | None:
    """Route ``cfg.dimension``; ``None`` when the slow path needs an image not yet seen (``defer``)."""
    dimension = cfg.dimension or ""
    expert = _expert_for(cfg, dimension)
    if expert is not None:
        judge = ExpertJudge(dimension, cfg.experts[expert])
        logger.info("%r -> expert reward %s (fast path)", dimension, judge.name)
        return Route({"dimension": dimension, "path": f"expert {judge.name}", "matched": expert}, expert=judge)
    bank = None
    reference = None
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
            return Route(info, protocol=calibrated(cfg, bank, hit.slug, backend))
        if hit.unknown:
            logger.info("%r: the embedder cannot represent it (unknown: %s): slow path", dimension, hit.unknown)
        elif hit.slug is not None:
            logger.info(
                "%r: closest stored %r has cosine %.3f <= %.2f: slow path",
                dimension,
                hit.dimension,
                hit.cosine,
                cfg.theta,
            )
            from pace_judge.protocol import load_protocol

            stored = load_protocol(bank.protocol_file(hit.slug), check_anchors=False)
            reference = (stored, hit.cosine)  # the Visualizer's reference context (appendix A.1.2, [refcontext])
    if cfg.fast_only:
        from reward.core.errors import ConfigError

        closest = (
            f"; the closest stored dimension is {hit.dimension!r} at cosine {hit.cosine:.3f}"
            if bank and hit.slug
            else ""
        )
        raise ConfigError(
            f"dimension={dimension!r}: no expert names it and no stored protocol is within theta={cfg.theta}"
            f"{closest}. fast_only=true never builds a protocol: add an expert (experts.NAME=...), import a "
            "calibrated protocol into memory= (pace_judge/memory.py import), or set fast_only=false for the agents"
        )
    if example is None and cfg.example_image:
        example = to_rgb(load_image(cfg.example_image))
    if example is None and defer:
        return None
    from pace_judge.agents import agent_config, build_protocol

    model = cfg.model.get("path") if isinstance(cfg.model, dict) else cfg.model
    backbone = str(model or cfg.server.model or "unknown")
    protocol = build_protocol(
        backend, dimension, example, agent_config(cfg.agents), backbone=backbone, reference=reference
    )
    if bank is None:
        return Route({"dimension": dimension, "path": "slow", "stored": False}, protocol=protocol)
    slug = bank.add(protocol)  # stored at once (uncalibrated until calibrated): the agents' work is never lost
    info = {"dimension": dimension, "path": "slow", "stored": True}
    return Route(info, protocol=calibrated(cfg, bank, slug, backend))
