"""The ``pace`` reward: PACE's dual-track judge behind ``reward.get_reward("pace", cfg)``.

    python reward/evaluate.py reward=pace reward.model=PATH reward.protocol=FILE data=MANIFEST out=DIR

With ``protocol=FILE`` the protocol is used as is (no agents, no memory). With ``dimension=...`` the dimension is
routed (PACE §4.2): to configured expert rewards, to a stored protocol of the memory bank whose dimension is
close enough (cosine > theta), or else the agents build a protocol (slow path) which is stored for reuse. A protocol
from the memory bank is always used calibrated (with ``calibration=...`` it is calibrated first; without, the error
gives the command that calibrates it), so its scores are on the anchors' human scale; each explanation names its
``scale`` and ``protocol_id``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from PIL import Image

from pace_judge.backends import Backend, make_backend
from pace_judge.config import PaceConfig, crop_config, model_config, track2_prompt, validate
from pace_judge.scorer import DualTrackScorer, Judgement
from reward.core.config import parse
from reward.data.images import as_images
from reward.integrations.trl_rewards import TrlCallable
from reward.rewards.base import RewardOutput

logger = logging.getLogger(__name__)


class PaceReward(TrlCallable):
    """Scores in [1, 5]; ``last_judgement`` keeps the explanations of the last batch."""

    def __init__(self, cfg: PaceConfig, backend: Backend | None = None, where: str = "") -> None:
        validate(cfg, where, check_model=backend is None)
        self.cfg = cfg
        self.crops = crop_config(cfg.crops)
        protocol = None
        if cfg.protocol:  # a bad protocol file fails before a model is loaded
            from pace_judge.protocol import load_protocol

            protocol = load_protocol(cfg.protocol, allow_absolute_paths=cfg.allow_absolute_paths)
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
        self.scorer = DualTrackScorer(
            protocol,
            self.backend,
            omega=omega,
            crops=self.crops,
            track2_prompt=track2_prompt(self.cfg.track2),
            probe_weights=self.cfg.probe_weights,
            lettering=self.cfg.lettering,
            lettering_seed=self.cfg.lettering_seed,
        )
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

        route = resolve(self.cfg, self.backend, example, defer=defer)
        if route is None:
            return
        if route.expert is not None:
            self.expert, self.route = route.expert, route.info
        else:
            self.use_protocol(route.protocol, route.info)

    def judge(self, images: Sequence[Image.Image]) -> Judgement:
        """Scores with explanations (per-probe option probabilities, sub-dimension scores, alpha1, alpha2)."""
        if self.scorer is None and self.expert is None:
            self._resolve(images[0] if images else None)
            self.route["example"] = "first image scored"
        judge = self.expert if self.expert is not None else self.scorer
        assert judge is not None
        self.last_judgement = judge.judge(list(images))
        return self.last_judgement

    def identity(self) -> dict[str, Any]:
        """What the scores' numbers mean, for a caller that must not mix runs (e.g. a resumed scores file): the
        route, the scale (``anchors 1.4-4.6`` / ``options 1-5 (uncalibrated)`` / ``experts 1-5``) and the protocol
        id; ``None`` values until a deferred slow path has run."""
        scorer = self.scorer
        scale = "experts 1-5" if self.expert is not None else (scorer.scale if scorer is not None else None)
        return {
            "route": dict(self.route),
            "scale": scale,
            "protocol_id": scorer.protocol_id if scorer else None,
            "probe_weights": self.cfg.probe_weights,
            "lettering": scorer.lettering if scorer else None,
        }

    def score(self, images: Sequence[Image.Image] | Any, prompts: Sequence[str] | None = None) -> RewardOutput:
        images = as_images(images)  # PIL, tensors, arrays, one or a batch
        if not images:
            return RewardOutput(scores=torch.zeros(0))
        return RewardOutput(scores=self.judge(images).scores.float())


def build(cfg: dict[str, Any]) -> PaceReward:
    return PaceReward(parse(PaceConfig, cfg, where="reward"), where="reward")
