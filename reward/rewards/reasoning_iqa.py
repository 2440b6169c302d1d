"""The ``reasoning-iqa`` reward: a scorer trained by GRPO (``training/grpo_scorer.py``), as Q-Insight
(arXiv:2503.22679) and VisualQuality-R1 (arXiv:2505.14460) train theirs, read three ways behind one ``score``:

- ``mode=expected`` (one forward pass, deterministic): the expected value over the probabilities of the digits 1-5
  right after the prompt's ``answer_prefix``, where a model trained in that format writes its score's first digit
  (after ``<answer>``, or Q-Insight's ``<answer>\n{"rating": ``; an empty thinking before it), the rule of the
  rating-word scorers (:func:`expected_value`). Only the first digit is read: an answer "3.45" counts as 3, so a
  model that writes decimals reads up to a point lower than its answers (its ranking of images is what this reads);
- ``mode=sample``: K answers sampled, each parsed as its release parses it
  (:func:`reward.rewards.reasoning_prompts.parse_score`), the parsed numbers averaged;
- ``mode=release``: one answer sampled as the prompt's release scores an image (VisualQuality-R1's README:
  temperature 0.1, top-k 50, seed 1; Q-Insight's ``Q-Insight/demo_score.py``: temperature 1, top-k 50, top-p 0.95,
  seed 42), parsed as its training parsed it.

An image none of whose answers parses is a failure (NaN), never a made-up number (VisualQuality-R1's inference
substitutes a random integer there; Q-Insight's demo prints the answer unparsed). Every mode gives a score on the
prompt's 1-5 scale, onto which :func:`to_prompt_scale` maps the training data's MOS scale (``reasoning.mos_range``
in the folder's ``sa_iqa.json``, :mod:`reward.rewards.scorer_folder`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omegaconf import MISSING

from reward.core.config import BATCH, parse
from reward.core.errors import UserError
from reward.data.images import as_images
from reward.rewards.base import CallableReward, RewardOutput
from reward.rewards.reasoning_prompts import PROMPTS, parse_score
from reward.rewards.scorer_folder import METADATA, read_metadata
from reward.vlm.hub import resolve_model_dir
from reward.vlm.loading import ModelLoading, load_vlm

if TYPE_CHECKING:
    from reward.vlm.model import VLM

SCORE_WORDS = ("1", "2", "3", "4", "5")  # mode=expected: the score's first digit


def to_prompt_scale(mos: float, mos_range: Sequence[float]) -> float:
    """A MOS on ``mos_range`` mapped linearly onto the prompt's 1-5. ``to_prompt_scale(50, (0, 100))`` -> 3.0."""
    low, high = mos_range
    return 1.0 + 4.0 * (float(mos) - low) / (high - low)


def scorer_meta(prompt: str, mos_range: Sequence[float] = (1.0, 5.0), **record: Any) -> dict[str, Any]:
    """The ``sa_iqa.json`` of a GRPO-trained scorer asked ``PROMPTS[prompt]`` (``record``: more provenance).

    >>> scorer_meta("visualquality-r1-fast")["reasoning"]["answer_prefix"]
    '<answer>'
    """
    released = PROMPTS[prompt]
    return {
        "queries": {"quality": {"question": released.question, "response_prefix": "<answer>"}},
        "level_words": list(SCORE_WORDS),
        "level_values": [1.0, 2.0, 3.0, 4.0, 5.0],
        **record,
        "reasoning": {
            "prompt": prompt,
            "think": released.think,
            "system": released.system,
            "answer_prefix": released.answer_prefix,
            "mos_range": list(mos_range),
        },
    }


REASONING_MODES = ("expected", "sample", "release")


@dataclass
class ReasoningIqaConfig(ModelLoading):
    """Settings of ``reward=reasoning-iqa`` (loading knobs from :class:`reward.vlm.ModelLoading`)."""

    name: str = "reasoning-iqa"
    model: str = field(
        default=MISSING, metadata={"help": "scorer folder written by training/grpo_scorer.py (or its Hub repo id)"}
    )
    mode: str = field(
        default="expected",
        metadata={
            "help": "expected: one forward, E[first digit] at the answer; sample: K answers parsed and averaged; "
            "release: one answer sampled as the prompt's release does (docs/sft.md)",
            "choices": REASONING_MODES,
        },
    )
    samples: int = field(default=8, metadata={"help": "mode=sample: answers per image (K)", "range": (1, 1024)})
    temperature: float = field(
        default=1.0, metadata={"help": "mode=sample: sampling temperature", "range": (0, None, True)}
    )
    top_p: float = field(default=1.0, metadata={"help": "mode=sample: nucleus sampling", "range": (0, 1, True)})
    top_k: int | None = field(
        default=None,
        metadata={"help": "mode=sample: the k likeliest tokens (0: all; null: the checkpoint's)", "range": (0, None)},
    )
    max_new_tokens: int = field(
        default=256, metadata={"help": "mode=sample: tokens per answer at most", "range": (1, 100_000)}
    )
    seed: int = field(default=0, metadata={"help": "mode=sample: sampling seed (mode=release: the release's own)"})
    batch_size: int = field(default=16, metadata={"help": "prompts per forward or generate call", "range": BATCH})


class ReasoningIqaReward(CallableReward):
    """Scores in 1-5 of a GRPO-trained scorer: one forward (``mode=expected``), K sampled answers (``sample``) or one
    answer sampled as its release does (``release``)."""

    def __init__(self, vlm: VLM, meta: dict[str, Any], config: ReasoningIqaConfig) -> None:
        self.vlm, self.config, self.reasoning = vlm, config, meta["reasoning"]
        self.prompt, self.system = self.reasoning["prompt"], self.reasoning.get("system")
        query = meta["queries"]["quality"]
        from reward.vlm.model import OptionQuery

        self.query = OptionQuery(query["question"], SCORE_WORDS, self.reasoning["answer_prefix"], sep="")
        if config.mode == "expected":
            vlm.candidate_ids(self.query, self.system)  # a digit that is not one token after the prefix fails here

    def sampling(self) -> dict[str, Any]:
        """``generate``'s sampling settings of this mode: the config's, or the prompt's release's (one answer)."""
        if self.config.mode == "release":
            return {"samples": 1, **PROMPTS[self.prompt].reading}
        cfg = self.config
        keys = ("samples", "temperature", "top_p", "top_k", "max_new_tokens", "seed")
        return {key: getattr(cfg, key) for key in keys}

    def score(self, images: Sequence[Any] | Any, prompts: Sequence[str] | None = None) -> RewardOutput:
        """Scores in 1-5 (NaN: an image none of whose answers parsed)."""
        import torch  # here, not at import: the prompts and scales above are read by commands before torch loads

        from reward.rewards.scoring import expected_value
        from reward.vlm.inputs import as_groups

        images = as_images(images)
        if self.config.mode == "expected":
            out = self.vlm.option_logprobs(as_groups(images), [self.query], system=self.system)
            scores = expected_value(out.logprobs[:, 0].masked_fill(out.failed, 0.0), [1, 2, 3, 4, 5])
            return RewardOutput(scores=scores.masked_fill(out.failed[:, 0], math.nan))
        sampling = self.sampling()
        k = sampling.pop("samples")
        answers = self.vlm.generate(
            [[img] for img in images for _ in range(k)],
            [self.query.question] * (len(images) * k),
            system=self.system,
            do_sample=True,
            **sampling,
        )
        parsed = [math.nan if (s := parse_score(a, self.prompt)) is None else s for a in answers]
        return RewardOutput(scores=torch.tensor(parsed).view(-1, k).nanmean(dim=1).float())  # all NaN -> NaN


def build(cfg: dict[str, Any]) -> ReasoningIqaReward:
    config = parse(ReasoningIqaConfig, cfg, where="reward")
    config.model = str(resolve_model_dir(config.model, key="reward.model"))
    meta = read_metadata(config.model)
    if "reasoning" not in meta:
        raise UserError(
            f"reward.model={config.model} is a rating-word scorer (no 'reasoning' in its sa_iqa.json): score it with "
            "reward=sa-iqa, or point reward.model at a folder written by training/grpo_scorer.py"
        )
    prompt = meta["reasoning"]["prompt"]  # its entry's shape is checked by read_metadata
    if prompt not in PROMPTS:
        raise UserError(
            f"{config.model}/{METADATA}: reasoning.prompt {prompt!r} is none of {list(PROMPTS)}; rewrite it with "
            "training/grpo_scorer.py"
        )
    base = meta.get("base_model")
    vlm = load_vlm(base or config.model, config, batch_size=config.batch_size, adapter=config.model if base else None)
    return ReasoningIqaReward(vlm, meta, config)
