"""Fast and slow paths for a dimension named in words (PACE §4.2, A.1.3): expert rewards, then a stored protocol
of the memory bank (one rule: :func:`pace_judge.memory_bank.match`), else the agents build one (slow path), which is
stored. A protocol from the bank is only used calibrated."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import torch
from PIL import Image

from pace_judge.agents import ProtocolBuildError, build_protocol
from pace_judge.config import PaceConfig
from pace_judge.memory_bank import Embedder, MemoryBank, exact_key, match
from pace_judge.protocol import Protocol, load_protocol
from pace_judge.tracks import Judgement
from reward.core.errors import UserError
from reward.data.images import load_image
from reward.rewards.base import RewardOutput

logger = logging.getLogger(__name__)

NEAR = 0.1  # a closest name within this of theta is a near miss: said as a warning


class ExpertJudge:
    """Registered rewards standing in for a protocol (A.1.3: "an ensemble of specialized IQA experts"): each member's
    score mapped from its ``score_range`` onto 1-5, their weighted mean; a member that fails fails the judgement.
    ``cfg``: one reward config (``{name: qbench, ...}``), a list of them, or ``{members: [...], weights: [...]}``."""

    def __init__(self, dimension: str, expert: str, cfg: Any) -> None:
        from reward.rewards.registry import get_reward, reward_info

        where, weights = f"experts.{expert}", None
        members = cfg if isinstance(cfg, list) else [cfg]
        if isinstance(cfg, dict) and "members" in cfg:
            if extra := sorted(set(cfg) - {"members", "weights", "combine"}):
                raise UserError(f"{where}: unknown key(s) {extra}; an ensemble has members, weights, combine: mean")
            if cfg.get("combine", "mean") != "mean":
                raise UserError(f"{where}.combine={cfg['combine']!r}: only mean (weighted by weights) is supported")
            members, weights = cfg["members"], cfg.get("weights")
        if not isinstance(members, list) or not members or not all(isinstance(m, dict) for m in members):
            raise UserError(f"{where}: give a reward config {{name: ...}}, a list of them, or {{members: [...]}}")
        self.weights = [float(w) for w in weights] if weights is not None else [1.0] * len(members)
        if len(self.weights) != len(members) or min(self.weights) < 0 or sum(self.weights) <= 0:
            raise UserError(f"{where}.weights: one non-negative weight per member, not all zero; got {weights}")
        self.dimension, self.expert, self.members = dimension, expert, []
        for i, raw in enumerate(members):
            raw = dict(raw)
            name, at = raw.pop("name", None), where + (f".members[{i}]" if len(members) > 1 else "")
            if not name or name == "pace":
                raise UserError(f"{at} needs name: a registered reward (e.g. qbench, sa-iqa), not pace itself")
            low, high = reward_info(name).score_range
            if not torch.isfinite(torch.tensor([low, high])).all():
                raise UserError(f"{at}: reward {name!r} has no finite score_range to map onto 1-5")
            self.members.append((name, (low, high), get_reward(name, raw)))
        self.name = "+".join(m[0] for m in self.members)

    def named(self, out: RewardOutput, member: str) -> tuple[torch.Tensor, str | None]:
        """The score of the dimension named as the expert (``experts.lighting``: its ``lighting``, never the fused
        score), of its only one, or its score when it has none."""
        dims = out.dimensions
        key = exact_key({d: d for d in dims}, self.expert) or (next(iter(dims)) if len(dims) == 1 else None)
        if dims and key is None:
            raise UserError(
                f"experts.{self.expert}: reward {member} scores the dimensions {list(dims)}, none named "
                f"{self.expert!r}; name the expert after the one it stands for (experts.{next(iter(dims))}=...), or "
                "have the reward score only that one (dimensions: [NAME] in its config)"
            )
        return (out.scores if key is None else dims[key]).double(), key

    def judge(self, images: list[Image.Image]) -> Judgement:
        raws = [self.named(reward.score(images), name) for name, _, reward in self.members]
        mapped = [
            1.0 + 4.0 * ((r - low) / (high - low)).clamp(0, 1)
            for (r, _), (_, (low, high), _) in zip(raws, self.members, strict=True)
        ]
        w = torch.tensor(self.weights, dtype=torch.float64)
        scores = (torch.stack(mapped, 1) * w).sum(1) / w.sum()
        unit = (scores - 1.0) / 4.0
        same = {"alpha2": None, "expert": self.name, "scale": "experts 1-5", "dimension": self.dimension, "probes": []}
        expl = []
        for i in range(len(images)):
            members = [
                {"expert": name, "dimension": dim, "raw": float(r[i]), "score": float(m[i]), "weight": wt}
                for (name, _, _), (r, dim), m, wt in zip(self.members, raws, mapped, self.weights, strict=True)
            ]
            raw = members[0]["raw"] if len(members) == 1 else None
            expl.append({"score": float(scores[i]), "alpha1": float(unit[i]), **same, "raw": raw, "members": members})
        return Judgement(scores.float(), unit.float(), None, expl)


def calibrated(cfg: PaceConfig, bank: MemoryBank, slug: str, backend: Any) -> Protocol:
    """The bank's protocol ``slug``, calibrated: as stored, or now from ``cfg.calibration`` and stored back (§4.2);
    else an error giving the command that calibrates it."""
    from pace_judge.calibration import calibrate

    file = bank.protocol_file(slug)
    protocol = load_protocol(file)
    if protocol.calibrated:
        return protocol
    source = cfg.calibration
    if not (source.benchmark or source.pipeline):
        raise UserError(
            f"{bank.folder}: the protocol for {protocol.dimension!r} is stored uncalibrated (no anchors); PACE "
            "calibrates a protocol once before using it, and scores on its option scale would not be comparable "
            f"with calibrated ones. Calibrate it once:\n  perceptual-rewards calibrate protocol={file} "
            f"memory={bank.folder} benchmark=CALIBRATION_MANIFEST [test=TEST_MANIFEST]   (or pipeline=SD_DIR "
            "model.path=VLM_DIR scores=s1,s2,s3,s4)\nor set calibration.benchmark=MANIFEST (or "
            "calibration.pipeline=DIR calibration.scores=[...]) to calibrate it here."
        )
    mode = "benchmark" if source.benchmark else "generative"
    logger.info("calibrating the stored protocol for %r (%s mode)", protocol.dimension, mode)
    calibrate(source, protocol, bank.folder / slug, backend)
    bank.add(protocol, replace=True)
    return load_protocol(file)


def resolve(
    cfg: PaceConfig, backend: Any
) -> tuple[dict[str, Any], ExpertJudge | Protocol | Callable[[Image.Image | None], Protocol]]:
    """Route ``cfg.dimension``: ``(how, an expert judge or a protocol)``, or on the slow path ``(how, the build of its
    protocol from an example image)``. A near miss of ``theta`` is said, with the ``theta=`` that routes it."""
    dimension, theta = cfg.dimension or "", cfg.theta
    embedder = Embedder(cfg.embedder)
    missed = []  # (what, the closest name, its cosine) not above theta
    if cfg.experts:
        hit = match(embedder, dimension, {name: name for name in cfg.experts}, theta, warn=not cfg.memory)
        if hit.fast:
            judge = ExpertJudge(dimension, hit.slug, cfg.experts[hit.slug])
            logger.info("%r -> expert reward %s (fast path)", dimension, judge.name)
            return {"dimension": dimension, "path": f"expert {judge.name}", "matched": hit.slug}, judge
        if hit.slug is not None:
            missed.append(("expert", hit.dimension, hit.cosine))
    bank = reference = None
    if cfg.memory:
        bank = MemoryBank(cfg.memory, embedder)
        hit = bank.route(dimension, theta)
        if hit.fast:
            logger.info("%r -> stored %r (cosine %.3f > %.2f, fast path)", dimension, hit.dimension, hit.cosine, theta)
            info = {"dimension": dimension, "path": "fast", "matched": hit.dimension, "cosine": hit.cosine}
            return info, calibrated(cfg, bank, hit.slug, backend)
        if hit.slug is not None:  # the Visualizer's reference rules (appendix A.1.2, [refcontext])
            missed.append(("stored protocol", hit.dimension, hit.cosine))
            reference = (load_protocol(bank.protocol_file(hit.slug), check_anchors=False), hit.cosine)
    said = "; ".join(
        f"the closest {what} is {name!r} at cosine {cos:.3f}, not above theta={theta} (theta="
        f"{math.floor(cos * 100 - 1e-9) / 100:.2f} routes it there, or dimension={name!r})"
        for what, name, cos in missed
    )
    if cfg.fast_only:
        raise UserError(
            f"dimension={dimension!r}: no expert names it and no stored protocol is within theta={theta}"
            f"{'; ' + said if said else ''}. fast_only=true never builds a protocol: add an expert "
            "(experts.NAME=...), import a calibrated protocol into memory= (perceptual-rewards memory import), or set "
            "fast_only=false for the agents"
        )
    if said:
        near = max(cos for _, _, cos in missed) > theta - NEAR
        logger.log(logging.WARNING if near else logging.INFO, "%r: slow path (the agents): %s", dimension, said)

    def build(example: Image.Image | None) -> Protocol:
        backbone = str(cfg.model or cfg.server.model or "unknown")
        try:
            protocol = build_protocol(backend, dimension, example, cfg.agents, backbone=backbone, reference=reference)
        except ProtocolBuildError as err:
            raise ProtocolBuildError(f"{err}\nRouting: {said}" if said else str(err), err.failures) from None
        if bank is None:
            return protocol
        slug = bank.add(protocol)  # stored at once (uncalibrated until calibrated): the agents' work is never lost
        return calibrated(cfg, bank, slug, backend)

    info = {"dimension": dimension, "path": "slow", "stored": bank is not None}
    return (info, build(load_image(cfg.example_image))) if cfg.example_image else (info, build)
