"""The ``sa-iqa`` reward: a fine-tuned SA-IQA scorer directory, every dimension of an image in one call.

Each dimension's score is the expected value over the level words' probabilities after the dimension's response
prefix (SA-IQA eq. 6-7 of App. D.2); all dimensions of one image share one encoded image prefix. The fused score
(``fusion: bradley-terry``) is SA-IQA eq. 3, S = sum_d w_d x_d, with the Bradley-Terry weights of
``fusion_weights.json``, divided by sum_d w_d: a positive constant, so the ranking of images is eq. 3's and the
score stays on the 1-5 scale (weights summing to 0 or less are refused); a file fitted with ``divide_by_sum=false``
(its ``meta``) gives eq. 3 as written, undivided, on the weights' scale (the reward's own ``score_range`` says it,
not the registered 1-5). Without a weights file the fused score is the plain mean of the dimensions (``fusion:
mean``), a reward the paper never used: the reward says so once when it loads, and every run records which fusion it
used. The scorer folder's format is :mod:`reward.rewards.scorer_folder`. ``backend=openai`` asks OpenAI-compatible
servers serving the scorer (``server.base_urls``; :mod:`reward.vlm.server`) instead of loading it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from PIL import Image

from reward.core.config import parse
from reward.core.errors import MissingInputError, UserError
from reward.core.fingerprints import weights_fingerprint
from reward.data.images import as_images
from reward.rewards.base import CallableReward, RewardOutput
from reward.rewards.scorer_folder import WEIGHTS_FILENAME, read_metadata
from reward.rewards.scoring import expected_value
from reward.rewards.settings import SaIqaConfig
from reward.vlm.hub import resolve_model_dir
from reward.vlm.inputs import ImagePreparer, PreparedImages, as_groups
from reward.vlm.loading import load_vlm
from reward.vlm.model import VLM, OptionQuery

if TYPE_CHECKING:  # the servers' client is imported for backend=openai only
    from reward.vlm.server import OpenAIBackend

logger = logging.getLogger(__name__)


class SaIqaReward(CallableReward):
    """Per-dimension SA-IQA scores and their fusion, in [1, 5]."""

    def __init__(
        self,
        vlm: VLM | OpenAIBackend,
        meta: dict[str, Any],
        *,
        weights: torch.Tensor | None = None,
        divide_by_sum: bool = True,
        dimensions: Sequence[str] | None = None,
        reuse_prefix: bool = True,
        scorer: str | None = None,
        fitted_on: dict[str, Any] | None = None,
    ) -> None:
        self.dimensions = list(dimensions or meta["queries"])  # build() checks them against the scorer's
        words = tuple(meta["level_words"])
        self.values = torch.tensor(meta["level_values"], dtype=torch.float32)
        self.queries = [
            OptionQuery(meta["queries"][d]["question"], words, meta["queries"][d]["response_prefix"])
            for d in self.dimensions
        ]
        self.vlm = vlm
        self.weights, self.divide_by_sum = weights, divide_by_sum
        self.fusion = "mean" if weights is None else "bradley-terry" + ("" if divide_by_sum else ", eq. 3 undivided")
        self.reuse_prefix = reuse_prefix
        self.scorer, self.fitted_on = scorer, fitted_on  # the scorer folder; what the fusion weights were fitted on
        self._weights_digest: dict[str, Any] | None = None
        for q in self.queries:
            vlm.candidate_ids(q)  # multi-token level words fail here, before any scoring

    def image_preparer(self) -> ImagePreparer | None:
        """The image processor for DataLoader workers (``score`` then takes its ``PreparedImages``)."""
        return self.vlm.image_preparer()

    @property
    def score_range(self) -> tuple[float, float] | None:
        """The fused score's range under eq. 3 undivided (the weights' scale; rewards sets read it), else ``None``: the
        registered 1-5."""
        if self.weights is None or self.divide_by_sum:
            return None
        ends = torch.stack([self.weights * self.values.min(), self.weights * self.values.max()])
        low, high = float(ends.min(dim=0).values.sum()), float(ends.max(dim=0).values.sum())
        return (low, high) if low < high else None

    @property
    def record(self) -> dict[str, Any]:
        """What a run records about this reward's numbers: ``fusion`` (mean | bradley-terry), the weights and what
        they were fitted on, and the scorer by the content of its weights (``perceptual-rewards fit`` reads it
        beside the scores it fits on)."""
        weights = None if self.weights is None else dict(zip(self.dimensions, self.weights.tolist(), strict=True))
        if self.scorer is not None and self._weights_digest is None:
            self._weights_digest = weights_fingerprint(self.scorer)
        scorer = {"path": self.scorer, "weights": self._weights_digest} if self.scorer is not None else None
        return {"fusion": self.fusion, "fusion_weights": weights, "fusion_fitted_on": self.fitted_on, "scorer": scorer}

    def score(
        self, images: Sequence[Image.Image | PreparedImages] | Any, prompts: Sequence[str] | None = None
    ) -> RewardOutput:
        """Fused and per-dimension scores in [1, 5]; a dimension a server could not answer is NaN, and so is the
        fused score of that image (a failure, never a number). Images as :func:`reward.data.images.as_images` takes
        them."""
        images = as_images(images, keep=(PreparedImages,))
        out = self.vlm.option_logprobs(as_groups(images), self.queries, reuse_prefix=self.reuse_prefix)
        failed = out.failed  # [B, D]
        per_dim = expected_value(out.logprobs.masked_fill(failed[..., None], 0.0), self.values)  # [B, D]
        if self.weights is None:
            fused = per_dim.mean(dim=1)
        else:
            fused = per_dim @ self.weights / (self.weights.sum() if self.divide_by_sum else 1.0)
        per_dim = per_dim.masked_fill(failed, math.nan)
        dims = {d: per_dim[:, i].contiguous() for i, d in enumerate(self.dimensions)}
        return RewardOutput(scores=fused.float().masked_fill(failed.any(dim=1), math.nan), dimensions=dims)


def build(cfg: dict[str, Any]) -> SaIqaReward:
    config = parse(SaIqaConfig, cfg, where="reward")
    config.model = str(resolve_model_dir(config.model, key="reward.model"))  # a folder, or a Hub id (HF cache)
    meta = read_metadata(config.model)
    dims = config.dimensions or list(meta["queries"])
    unknown = [d for d in dims if d not in meta["queries"]]
    if unknown:
        raise UserError(
            f"reward.dimensions={list(dims)}: {unknown} not in the scorer {config.model}; it has "
            f"{list(meta['queries'])}"
        )
    weights, divide, fitted_on = fusion_of(config, dims)  # a file that cannot be used: refused before the model loads
    base = meta.get("base_model")  # set when the scorer holds a LoRA adapter
    vlm: VLM | OpenAIBackend
    if config.backend == "openai":  # the scorer's queries and words from its folder, the answers from the servers
        from reward.vlm.server import served_vlm

        vlm = served_vlm(config.server, tokenizer=config.model)
    else:
        vlm = load_vlm(
            base or config.model,
            config,
            batch_size=config.batch_size,
            adapter=config.model if base else None,
            key="reward.model",
        )
    return SaIqaReward(
        vlm,
        meta,
        weights=weights,
        divide_by_sum=divide,
        dimensions=dims,
        reuse_prefix=config.reuse_prefix,
        scorer=config.model,
        fitted_on=fitted_on,
    )


def fusion_of(config: SaIqaConfig, dims: Sequence[str]) -> tuple[torch.Tensor | None, bool, dict[str, Any] | None]:
    """The weights of ``reward.fusion`` (or the scorer folder's file) ordered as ``dims``, whether the fused score
    is divided by their sum (unless the file says ``divide_by_sum: false``) and what they were fitted on, said once:
    Bradley-Terry weights, the plain mean of several dimensions (not eq. 3: a warning), or nothing to fuse. A file
    the fused score cannot use is a :class:`~reward.rewards.fusion_weights.FusionWeightsError` naming it and the fix;
    so is the scorer folder's own file fitted on another scorer (:func:`check_fitted_on`)."""
    path = Path(config.fusion) if config.fusion else Path(config.model) / WEIGHTS_FILENAME
    if config.fusion and not path.is_file():
        raise MissingInputError(f"reward.fusion={config.fusion} does not exist; write it with perceptual-rewards fit")
    if not path.is_file():
        if len(dims) > 1:
            logger.warning(
                "reward=sa-iqa: no %s in %s: the fused score is the plain mean of %s (fusion: mean), not SA-IQA eq. "
                "3; fit Bradley-Terry weights with perceptual-rewards fit or pass reward.fusion=FILE",
                WEIGHTS_FILENAME,
                config.model,
                list(dims),
            )
        return None, True, None
    from reward.rewards.fusion_weights import FusionWeightsError, load_weights  # imported when there is a file

    fw = load_weights(path)
    fitted_on = check_fitted_on(fw.meta.get("fitted_on"), path, config)
    table = dict(zip(fw.dimensions, fw.weights, strict=True))
    if missing := [d for d in dims if d not in table]:
        raise FusionWeightsError(
            f"{path}: no weight for dimension(s) {missing} (it has {list(fw.dimensions)}); refit with "
            "perceptual-rewards fit on the scorer's dimensions, or score only those it has: reward.dimensions=[...]"
        )
    w = torch.tensor([float(table[d]) for d in dims])
    logger.info("reward=sa-iqa: fusion: bradley-terry with the weights of %s", path)
    if fw.meta.get("divide_by_sum") is False:
        logger.info("%s: eq. 3 as written (divide_by_sum=false): S = x.w, on the weights' scale", path)
        return w, False, fitted_on
    if w.sum() <= 0:
        raise FusionWeightsError(
            f"{path}: the weights sum to {w.sum().item():.4g}; the fused score is divided by that sum (keeping eq. "
            "3's ranking and the 1-5 scale), so it must be positive: refit with perceptual-rewards fit (its default, "
            "nonneg=true, keeps every weight >= 0)"
        )
    if (w < 0).any():
        logger.warning("%s has negative weights: the fused score may leave the 1-5 scale", path)
    return w, True, fitted_on


def check_fitted_on(fitted: Any, path: Path, config: SaIqaConfig) -> dict[str, Any] | None:
    """What the weights file ``path`` was fitted on (its ``meta.fitted_on``: the scorer and the digest of its
    weights), checked against the scorer ``reward.model`` holds now: another model's weights (SFT replaced the
    model, a file copied from another scorer) are refused when the file is the scorer folder's own, which claims to
    be fitted on it, and used with a warning naming both when ``reward.fusion`` names the file (a choice)."""
    if not (isinstance(fitted, dict) and isinstance(fitted.get("weights"), dict)):
        logger.info("%s records no scorer it was fitted on: not checked against %s", path, config.model)
        return None
    now = weights_fingerprint(config.model)
    if now is None or now == fitted["weights"]:
        return fitted
    said = (
        f"{path} was fitted on the scores of the scorer {fitted.get('path')} (weights "
        f"{fitted['weights'].get('sha256', '?')[:12]}), and reward.model={config.model} holds other weights "
        f"({now['sha256'][:12]})"
    )
    if not config.fusion:
        from reward.rewards.fusion_weights import FusionWeightsError

        raise FusionWeightsError(
            f"{said}: its fused score would weight this model's dimensions by another's. Refit them on this scorer "
            f"(perceptual-rewards fit pairs=PAIRS.jsonl reward=sa-iqa reward.model={config.model} out={path} "
            f"overwrite=true), or pass reward.fusion={path} to use them knowingly"
        )
    logger.warning("%s; using them, as reward.fusion names the file (refit on this scorer for its own)", said)
    return fitted
