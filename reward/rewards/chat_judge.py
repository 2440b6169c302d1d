"""The ``chat-judge`` reward: a chat model behind any OpenAI-compatible API asked SA-IQA's App. B.2 prompt of each
dimension (its Table 3 rows of commercial models), the answer read as ``{"score": N}``, N in 1-5; any other answer is
a failed item (``not_score_json``), never a made-up score. The fused score is the mean of the dimensions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from reward.core.config import parse
from reward.core.errors import UserError
from reward.data.images import as_images
from reward.data.manifest import parse_json
from reward.rewards.base import CallableReward, RewardOutput
from reward.rewards.levels import EXPERT_DEFINITIONS, dimension_words
from reward.rewards.settings import ChatJudgeConfig
from reward.vlm.server import AnswerError, OpenAIBackend

B2_PROMPT = (  # App. B.2: the type-4 query between a role and the answer format
    "You are an interior spatial aesthetics evaluation assistant. The input is an image of an interior space. Please "
    "evaluate the spatial aesthetic {dimension} quality level of this image. {definition} Output only one score from "
    '[1,2,3,4,5], where a higher score indicates higher quality. Return in the format {{"score": score}}.'
)


def read_score(text: str) -> float:
    """The score of an answer ``{"score": N}`` (N a number in 1-5), else :class:`AnswerError` ``not_score_json`` (an
    answer nested too deeply for ``json`` too).

    >>> read_score('{"score": 4}'), read_score('```json\\n{"score": 2}\\n```')
    (4.0, 2.0)
    >>> read_score("The score is 4.")
    Traceback (most recent call last):
    reward.vlm.server.AnswerError: the answer is not {"score": N} with N in 1-5: 'The score is 4.'
    """
    body = text.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    try:
        score = parse_json(body).get("score")
    except (ValueError, AttributeError):
        score = None
    if isinstance(score, bool) or not isinstance(score, int | float) or not 1 <= score <= 5:
        raise AnswerError("not_score_json", f'the answer is not {{"score": N}} with N in 1-5: {text[:80]!r}')
    return float(score)


class ChatJudge(CallableReward):
    """Each dimension's score in [1, 5] from a chat model's JSON answer, and their mean."""

    def __init__(self, backend: OpenAIBackend, prompts: dict[str, str], max_tokens: int = 64) -> None:
        self.backend, self.prompts, self.max_tokens = backend, prompts, max_tokens
        self.dimensions = list(prompts)

    def score(self, images: Sequence[Any] | Any, prompts: Sequence[str] | None = None) -> RewardOutput:
        """Per-dimension scores (NaN where the answer failed, counted in ``backend.stats``) and their mean."""
        images = as_images(images)
        asked = [self.prompts[d] for _ in images for d in self.dimensions]
        groups = [[image] for image in images for _ in self.dimensions]
        answers = self.backend.answers(asked, groups, max_new_tokens=self.max_tokens, parse=read_score)
        values = [math.nan if isinstance(a, Exception) else a for a in answers]
        table = torch.tensor(values, dtype=torch.float32).reshape(len(images), len(self.dimensions))
        dims = {d: table[:, i].contiguous() for i, d in enumerate(self.dimensions)}
        return RewardOutput(scores=table.mean(dim=1), dimensions=dims)


def build(cfg: dict[str, Any]) -> ChatJudge:
    config = parse(ChatJudgeConfig, cfg, where="reward")
    defaults = {
        d: B2_PROMPT.format(dimension=dimension_words(d), definition=text) for d, text in EXPERT_DEFINITIONS.items()
    }
    prompts = {**defaults, **config.prompts}
    missing = [d for d in config.dimensions if d not in prompts]
    if missing:
        raise UserError(
            f"reward.dimensions: no prompt for {missing}; App. B.2 has {list(EXPERT_DEFINITIONS)}: give "
            "reward.prompts.NAME='... Return in the format {\"score\": score}.'"
        )
    return ChatJudge(OpenAIBackend(config.server), {d: prompts[d] for d in config.dimensions}, config.max_tokens)
