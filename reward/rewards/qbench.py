"""Q-Bench+ zero-shot quality: the softmax of "good" against "poor" after "The quality of the image is".

Eq. 1 of the Q-Bench+ paper; with ``ensemble=true``, eq. 2 (logits summed over synonym sets). ``backend=openai``
asks OpenAI-compatible servers (``server.base_urls``) instead of a model in this process (:mod:`reward.vlm.server`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from PIL import Image

from reward.core.config import parse
from reward.core.errors import UserError
from reward.data.images import as_images
from reward.rewards.base import CallableReward, RewardOutput
from reward.rewards.scoring import QBENCH_NEGATIVE_WORDS, QBENCH_POSITIVE_WORDS, synonym_ensemble
from reward.rewards.settings import QBenchConfig
from reward.vlm.hub import check_models
from reward.vlm.inputs import ImagePreparer, PreparedImages, as_groups
from reward.vlm.loading import ModelLoading, load_vlm
from reward.vlm.model import VLM, OptionQuery

if TYPE_CHECKING:  # the servers' client is imported for backend=openai only
    from reward.vlm.server import OpenAIBackend


class QBenchReward(CallableReward):
    """Zero-shot good/poor quality in [0, 1] from any chat VLM."""

    def __init__(
        self, cfg: QBenchConfig, vlm: VLM | OpenAIBackend | None = None, loading: ModelLoading | None = None
    ) -> None:
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
        self.vlm = vlm or load_vlm(str(cfg.model), loading or cfg, batch_size=cfg.batch_size)
        self.query = OptionQuery(cfg.prompt, tuple(cfg.positive) + tuple(cfg.negative), cfg.response_prefix)
        self.vlm.candidate_ids(self.query, cfg.system)  # fail now, not mid-run, on multi-token words

    def image_preparer(self) -> ImagePreparer | None:
        """The image processor for DataLoader workers (``score`` then takes its ``PreparedImages``)."""
        return self.vlm.image_preparer()

    def score(self, images: Sequence[Image.Image | PreparedImages] | Any, prompts: Sequence[str] | None = None) -> Any:
        """Scores in [0, 1]; an image a server could not answer for scores NaN (a failure, never a number). Images as
        :func:`reward.data.images.as_images` takes them (PIL, tensors, arrays, one or a batch)."""
        images = as_images(images, keep=(PreparedImages,))
        out = self.vlm.option_logprobs(as_groups(images), [self.query], system=self.cfg.system)
        failed = out.failed[:, 0]
        n_pos = len(self.cfg.positive)
        if n_pos > 1:  # eq. 2 sums the words' logits: a word a server's top-k left out (taken as 0) has no bound
            absent = ~failed & ~torch.isfinite(out.logprobs[:, 0]).all(dim=-1)
            count = getattr(self.vlm, "count_failed", None)
            if absent.any() and count is not None:
                count(
                    "options_absent", "a synonym absent from the top-k fails the item under eq. 2", int(absent.sum())
                )
            failed = failed | absent
        logp = out.logprobs[:, 0].masked_fill(failed[:, None], 0.0)
        scores = synonym_ensemble(logp[:, :n_pos], logp[:, n_pos:], self.cfg.temperature)
        return RewardOutput(scores=scores.to(torch.float32).masked_fill(failed, math.nan))


def build(cfg: dict[str, Any]) -> QBenchReward:
    config = parse(QBenchConfig, cfg, where="reward")
    config.positive, config.negative = tuple(config.positive), tuple(config.negative)
    if config.backend == "openai":
        from reward.vlm.server import served_vlm

        return QBenchReward(config, vlm=served_vlm(config.server, tokenizer=config.model))
    if not config.model:
        raise UserError("reward=qbench needs reward.model=PATH (a VLM checkpoint), or reward.backend=openai")
    check_models({"reward.model": config.model})
    return QBenchReward(config)
