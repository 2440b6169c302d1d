"""Q-Bench+ zero-shot quality: the softmax of "good" against "poor" after "The quality of the image is".

Eq. 1 of the Q-Bench+ paper; with ``ensemble=true``, eq. 2 (logits summed over synonym sets).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import MISSING
from PIL import Image

from reward.core.config import parse
from reward.rewards.base import RewardOutput
from reward.rewards.scoring import QBENCH_NEGATIVE_WORDS, QBENCH_POSITIVE_WORDS, synonym_ensemble
from reward.vlm import VLM, OptionQuery, load_vlm
from reward.vlm.inputs import ImagePreparer, PreparedImages, as_groups
from reward.vlm.loading import ModelLoading, loading_of


@dataclass
class QBenchConfig(ModelLoading):
    """Settings of ``reward=qbench`` (the loading knobs dtype, device, device_map, attn_implementation, min_pixels
    and max_pixels come from :class:`reward.vlm.ModelLoading`)."""

    name: str = "qbench"
    model: str = MISSING  # checkpoint directory of the VLM
    prompt: str = "Rate the quality of the image."  # user question
    response_prefix: str = "The quality of the image is"  # the answer word follows it
    positive: tuple[str, ...] = ("good",)  # positive word(s); with ensemble, the synonym set P
    negative: tuple[str, ...] = ("poor",)  # negative word(s); with ensemble, the synonym set N
    ensemble: bool = False  # use Q-Bench+'s synonym sets (good/high/fine vs poor/low/bad) unless words given
    temperature: float = 1.0  # softmax temperature T
    system: str | None = None  # optional system prompt
    batch_size: int = 16  # images per forward pass


class QBenchReward:
    """Zero-shot good/poor quality in [0, 1] from any chat VLM."""

    def __init__(self, cfg: QBenchConfig, vlm: VLM | None = None, loading: ModelLoading | None = None) -> None:
        if cfg.ensemble and cfg.positive == ("good",) and cfg.negative == ("poor",):
            cfg.positive, cfg.negative = QBENCH_POSITIVE_WORDS, QBENCH_NEGATIVE_WORDS
        if not cfg.positive or not cfg.negative:
            raise ValueError("qbench: positive and negative need at least one word each")
        if len(cfg.positive) != len(cfg.negative):
            raise ValueError(
                f"qbench: {len(cfg.positive)} positive but {len(cfg.negative)} negative words; eq. 2 sums logits "
                "per set, so give the same number of words on each side"
            )
        self.cfg = cfg
        self.vlm = vlm or load_vlm(cfg.model, loading, batch_size=cfg.batch_size)
        self.query = OptionQuery(cfg.prompt, tuple(cfg.positive) + tuple(cfg.negative), cfg.response_prefix)
        self.vlm.candidate_ids(self.query, cfg.system)  # fail now, not mid-run, on multi-token words

    def image_preparer(self) -> ImagePreparer | None:
        """The image processor for DataLoader workers (``score`` then takes its ``PreparedImages``)."""
        return self.vlm.image_preparer()

    def score(self, images: Sequence[Image.Image | PreparedImages], prompts: Sequence[str] | None = None) -> Any:
        logp = self.vlm.option_logprobs(as_groups(images), [self.query], system=self.cfg.system).logprobs
        logp = logp[:, 0]
        n_pos = len(self.cfg.positive)
        scores = synonym_ensemble(logp[:, :n_pos], logp[:, n_pos:], self.cfg.temperature)
        return RewardOutput(scores=scores.to(torch.float32))


def build(cfg: dict[str, Any]) -> QBenchReward:
    config = parse(QBenchConfig, cfg, where="reward")
    config.positive, config.negative = tuple(config.positive), tuple(config.negative)
    return QBenchReward(config, loading=loading_of(config))
