"""The ``reasoning-iqa`` reward: a scorer trained by GRPO (``training/grpo_scorer.py``), as Q-Insight
(arXiv:2503.22679) and VisualQuality-R1 (arXiv:2505.14460) train theirs, read two ways behind one ``score``:

- ``mode=sample`` (the papers' inference): K answers sampled, each ``<answer>N</answer>`` parsed
  (:func:`parse_score`), the parsed numbers averaged; an image none of whose answers parses is a failure (NaN),
  never a made-up number (the released inference code substitutes a random score there);
- ``mode=expected`` (one forward pass, deterministic): the expected value over the probabilities of the score digits
  1-5 at the answer position after the folder's ``answer_prefix`` (``<answer>``: the thinking is skipped, as
  VisualQuality-R1's "Fast" prompt does), the rule of the rating-word scorers (:func:`expected_value`).

Both give a score on the prompt's 1-5 scale; :func:`from_prompt_scale` maps it back to the training data's MOS scale
(``reasoning.mos_range`` in the folder's ``sa_iqa.json``, :mod:`reward.rewards.scorer_folder`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from reward.core.config import parse
from reward.core.errors import UserError
from reward.data.images import as_images
from reward.rewards.base import RewardOutput
from reward.rewards.scorer_folder import read_metadata
from reward.rewards.settings import ReasoningIqaConfig
from reward.rewards.trl_callable import TrlCallable
from reward.vlm import load_vlm
from reward.vlm.hub import resolve_model_dir
from reward.vlm.loading import loading_of

if TYPE_CHECKING:
    from reward.vlm import VLM

_RATING = (
    "What is your overall rating on the quality of this picture? The rating should be a float between 1 and 5, "
    "rounded to two decimal places, with 1 representing very poor quality and 5 representing excellent quality."
)
# The released prompts: VisualQuality-R1's question with its thinking and no-thinking ("Fast") templates; Q-Insight's
# score task asks the same rating question, its answer a JSON {"rating": N} inside the answer tags.
PROMPTS = {
    "visualquality-r1": "You are doing the image quality assessment task. Here is the question: "
    + _RATING
    + " First output the thinking process in <think> </think> tags and then output the final answer with only one "
    "score in <answer> </answer> tags.",
    "visualquality-r1-fast": "You are doing the image quality assessment task. Here is the question: "
    + _RATING
    + " Please only output the final answer with only one score in <answer> </answer> tags.",
    "q-insight": _RATING
    + ' Return the final answer in JSON format with the following keys: "rating": The score. Output the thinking '
    "process in <think> </think> and final answer in <answer> </answer> tags.",
}
THINKS = {"visualquality-r1": True, "visualquality-r1-fast": False, "q-insight": True}
SCORE_WORDS = ("1", "2", "3", "4", "5")  # mode=expected: the answer's first digit
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def parse_score(text: str) -> float | None:
    """The first number inside ``<answer>...</answer>``, or ``None`` (no answer tags, no number, NaN or inf).

    >>> parse_score("<think>sharp</think><answer>3.45</answer>"), parse_score('<answer>{"rating": 2}</answer>')
    (3.45, 2.0)
    >>> parse_score("3.45"), parse_score("<answer>good</answer>"), parse_score("<answer>1e999</answer>")
    (None, None, None)
    """
    answer = _ANSWER.search(text)
    number = _NUMBER.search(answer.group(1)) if answer else None
    value = float(number.group()) if number else math.nan
    return value if math.isfinite(value) else None


def to_prompt_scale(mos: float, mos_range: Sequence[float]) -> float:
    """A MOS on ``mos_range`` mapped linearly onto the prompt's 1-5. ``to_prompt_scale(50, (0, 100))`` -> 3.0."""
    low, high = mos_range
    return 1.0 + 4.0 * (float(mos) - low) / (high - low)


def from_prompt_scale(score: float, mos_range: Sequence[float]) -> float:
    """The inverse of :func:`to_prompt_scale`. ``from_prompt_scale(3.0, (0, 100))`` -> 50.0."""
    low, high = mos_range
    return low + (float(score) - 1.0) * (high - low) / 4.0


def scorer_meta(prompt: str, mos_range: Sequence[float] = (1.0, 5.0), **record: Any) -> dict[str, Any]:
    """The ``sa_iqa.json`` of a GRPO-trained scorer asked ``PROMPTS[prompt]`` (``record``: more provenance).

    >>> scorer_meta("visualquality-r1-fast")["reasoning"]["answer_prefix"]
    '<answer>'
    """
    think = THINKS[prompt]
    prefix = "<think>\n</think>\n<answer>" if think else "<answer>"  # mode=expected: an empty thinking, then the digit
    return {
        "queries": {"quality": {"question": PROMPTS[prompt], "response_prefix": "<answer>"}},
        "level_words": list(SCORE_WORDS),
        "level_values": [1.0, 2.0, 3.0, 4.0, 5.0],
        **record,
        "reasoning": {"prompt": prompt, "think": think, "answer_prefix": prefix, "mos_range": list(mos_range)},
    }


class ReasoningIqaReward(TrlCallable):
    """Scores in 1-5 of a GRPO-trained scorer, by sampling (``mode=sample``) or one forward (``expected``)."""

    def __init__(self, vlm: VLM, meta: dict[str, Any], config: ReasoningIqaConfig) -> None:
        self.vlm, self.config, self.reasoning = vlm, config, meta["reasoning"]
        query = meta["queries"]["quality"]
        from reward.vlm import OptionQuery

        self.query = OptionQuery(query["question"], SCORE_WORDS, self.reasoning["answer_prefix"], sep="")
        if config.mode == "expected":
            vlm.candidate_ids(self.query)  # a digit that is not one token after the prefix fails here

    def score(self, images: Sequence[Any] | Any, prompts: Sequence[str] | None = None) -> RewardOutput:
        """Scores in 1-5 (NaN: an image none of whose K answers parsed)."""
        import torch  # here, not at import: the prompts and scales above are read by commands before torch loads

        from reward.rewards.scoring import expected_value
        from reward.vlm.inputs import as_groups

        images = as_images(images)
        if self.config.mode == "expected":
            out = self.vlm.option_logprobs(as_groups(images), [self.query])
            scores = expected_value(out.logprobs[:, 0].masked_fill(out.failed, 0.0), [1, 2, 3, 4, 5])
            return RewardOutput(scores=scores.masked_fill(out.failed[:, 0], math.nan))
        k, cfg = self.config.samples, self.config
        answers = self.vlm.generate(
            [[img] for img in images for _ in range(k)],
            [self.query.question] * (len(images) * k),
            max_new_tokens=cfg.max_new_tokens,
            do_sample=True,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            seed=cfg.seed,
        )
        parsed = torch.tensor([math.nan if (s := parse_score(a)) is None else s for a in answers]).view(-1, k)
        return RewardOutput(scores=parsed.nanmean(dim=1).float())  # all NaN -> NaN


def build(cfg: dict[str, Any]) -> ReasoningIqaReward:
    config = parse(ReasoningIqaConfig, cfg, where="reward")
    config.model = str(resolve_model_dir(config.model, key="reward.model"))
    meta = read_metadata(config.model)
    if "reasoning" not in meta:
        raise UserError(
            f"reward.model={config.model} is a rating-word scorer (no 'reasoning' in its sa_iqa.json): score it with "
            "reward=sa-iqa, or point reward.model at a folder written by training/grpo_scorer.py"
        )
    base = meta.get("base_model")
    vlm = load_vlm(
        base or config.model, loading_of(config), batch_size=config.batch_size, adapter=config.model if base else None
    )
    return ReasoningIqaReward(vlm, meta, config)
