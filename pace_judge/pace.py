"""The ``pace`` reward: PACE's dual-track judge behind ``reward.get_reward("pace", cfg)``, with ``protocol=FILE``
used as is, or ``dimension=...`` routed (:mod:`pace_judge.route`).

    python reward/evaluate.py reward=pace reward.model=PATH reward.protocol=FILE data=MANIFEST out=DIR
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from PIL import Image

from pace_judge.config import PaceConfig, load_backend, validate
from pace_judge.protocol import Protocol, load_protocol
from pace_judge.route import ExpertJudge, resolve
from pace_judge.tracks import DualTrackScorer, Judgement
from reward.core.config import parse
from reward.data.images import as_images
from reward.rewards.base import CallableReward, RewardOutput

logger = logging.getLogger(__name__)


class PaceReward(CallableReward):
    """Scores in [1, 5] (:meth:`judge`: with their explanations); ``route`` says where the dimension went."""

    def __init__(self, cfg: PaceConfig, backend: Any = None, where: str = "") -> None:
        validate(cfg, where, check_model=backend is None)
        self.cfg = cfg
        # a bad protocol file fails before a model is loaded
        protocol = load_protocol(cfg.protocol, allow_absolute_paths=cfg.allow_absolute_paths) if cfg.protocol else None
        self.backend = backend if backend is not None else load_backend(cfg.backend, cfg.model, cfg, cfg.server)
        self.scorer: DualTrackScorer | None = None
        self.expert: ExpertJudge | None = None
        self.build: Callable[[Image.Image | None], Protocol] | None = None  # the slow path, waiting for an image
        if protocol is None:
            self.route, found = resolve(cfg, self.backend)
        else:
            found = protocol
            self.route = {"dimension": protocol.dimension, "path": "protocol file", "file": cfg.protocol}
        if callable(found):
            self.build = found
        else:
            self._use(self.route, found)

    def _use(self, route: dict[str, Any], judge: ExpertJudge | Protocol) -> None:
        self.route = route
        if isinstance(judge, ExpertJudge):
            self.expert = judge
            return
        cfg = self.cfg
        self.scorer = DualTrackScorer(
            judge,
            self.backend,
            omega=(float(cfg.omega[0]), float(cfg.omega[1])),
            crops=cfg.crops,
            track2_prompt=cfg.track2.prompt,
            probe_weights=cfg.probe_weights,
            lettering=cfg.lettering,
            lettering_seed=cfg.lettering_seed,
        )
        if not judge.calibrated:
            said = "protocol for %r has no anchors: Track 1 only, on the option scale [%g, %g]; calibrate it with %s"
            logger.warning(said, judge.dimension, *judge.score_bounds, "perceptual-rewards calibrate")

    def judge(self, images: Sequence[Image.Image]) -> Judgement:
        """Scores with explanations (per-probe option probabilities, sub-dimension scores, alpha1, alpha2)."""
        if self.build is not None:  # the slow path: the first image scored is the example
            build, self.build = self.build, None
            self._use({**self.route, "example": "first image scored"}, build(images[0] if images else None))
        return (self.expert or self.scorer).judge(list(images))  # type: ignore[union-attr]

    def score(self, images: Sequence[Image.Image] | Any, prompts: Sequence[str] | None = None) -> RewardOutput:
        images = as_images(images)  # PIL, tensors, arrays, one or a batch
        if not images:
            return RewardOutput(scores=torch.zeros(0))
        return RewardOutput(scores=self.judge(images).scores.float())


def build(cfg: dict[str, Any]) -> PaceReward:
    return PaceReward(parse(PaceConfig, cfg, where="reward"), where="reward")
