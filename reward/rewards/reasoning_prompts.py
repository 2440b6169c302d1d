"""The released prompts of the scorers trained by GRPO, and how each release reads an answer.

Sources, read from the authors' code (not run): VisualQuality-R1 (arXiv:2505.14460) at github.com/TianheWu/
VisualQuality-R1 a16dcdb, and Q-Insight (arXiv:2503.22679) at github.com/bytedance/Q-Insight 08308fd; ``file:line``
below is a line of that commit.

- **VisualQuality-R1**: the rating question (``datasets/make_data.py:22-24``, behind "You are doing the image quality
  assessment task. Here is the question: " at ``:63``) followed by the thinking instruction
  (``src/open-r1-multimodal/src/open_r1/vlm_modules/qwen_module.py:69``) or, for the "Fast" prompt, the no-thinking one
  (``README.md:78``); no system turn (the chat template's own). Its answer is read as the first number inside the
  *last* ``<answer>...</answer>`` (``src/open_r1/grpo_jsonl.py:165-167``); its format reward is 1 for
  ``<think>...</think>`` then ``<answer>...</answer>`` and nothing else (``src/open_r1/grpo_jsonl.py:230-232``).
- **Q-Insight**: an R1-style system turn (``src/open_r1/qinsight_multi_task.py:116-121``), the image, then the rating
  question ending ``Return the final answer in JSON format with the following keys: "rating": The score.``
  (``:122``, ``:269-272``). Its answer is the ``"rating"`` value inside the first ``<answer>...</answer>``
  (``:296-297``, ``:312-319``); its format reward asks for newlines around the thinking and a JSON object alone on
  its lines inside the answer tags (``:378-389``).

Where a release reads a failed answer as a random score (VisualQuality-R1's ``random.randint(1, 5)``,
``src/open_r1/grpo_jsonl.py:120-125``), here it is a failure (``None``), never a number made up for it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PROMPTS", "ReleasedPrompt", "parse_score"]

_RATING = (
    "What is your overall rating on the quality of this picture? The rating should be a float between 1 and 5, "
    "rounded to two decimal places, with 1 representing very poor quality and 5 representing excellent quality."
)
_VQ_TASK = "You are doing the image quality assessment task. Here is the question: "
_R1_SYSTEM = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant "
    "first thinks about the reasoning process in the mind and then provides the user with the answer. The reasoning "
    "process and answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e., "
    "<think> reasoning process here </think><answer> answer here </answer>"
)
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


@dataclass(frozen=True)
class ReleasedPrompt:
    """One released prompt: what the model is asked, how its answer is judged and read.

    ``answer_format``: the format reward's pattern (matched against the whole answer); ``rating_key``: the score is
    the JSON ``"rating"`` value in the first answer (else the first number in the last answer); ``answer_prefix``: the
    text a model trained in this format writes before the score's first digit (``mode=expected`` reads the digit
    right after it, an empty thinking skipped); ``reading``: how the release samples its score at test time
    (``mode=release``: one answer)."""

    question: str
    system: str | None
    think: bool
    answer_format: str
    rating_key: bool
    answer_prefix: str
    reading: dict[str, Any] = field(default_factory=dict)


# README.md:584-588 (its vLLM script's SamplingParams) and :618 (the engine's seed)
_VQ_READING = {"temperature": 0.1, "top_k": 50, "top_p": 1.0, "max_new_tokens": 512, "seed": 1}
PROMPTS = {
    "visualquality-r1": ReleasedPrompt(
        _VQ_TASK + _RATING + " First output the thinking process in <think> </think> tags and then output the final "
        "answer with only one score in <answer> </answer> tags.",
        system=None,
        think=True,
        answer_format=r"<think>.*?</think>\s*<answer>.*?</answer>",
        rating_key=False,
        answer_prefix="<think>\n</think>\n<answer>",
        reading=_VQ_READING,
    ),
    "visualquality-r1-fast": ReleasedPrompt(
        _VQ_TASK + _RATING + " Please only output the final answer with only one score in <answer> </answer> tags.",
        system=None,
        think=False,
        answer_format=r"\s*<answer>.*?</answer>\s*",  # ours: the release trains no "Fast" format
        rating_key=False,
        answer_prefix="<answer>",
        reading=_VQ_READING,
    ),
    "q-insight": ReleasedPrompt(
        _RATING + ' Return the final answer in JSON format with the following keys: "rating": The score.',
        system=_R1_SYSTEM,
        think=True,
        answer_format=r"<think>\s*\n.*?\n\s*</think>\s*\n<answer>\s*\n\{[^{}]*\}\s*\n\s*</answer>\s*",
        rating_key=True,
        answer_prefix='<think>\n\n</think>\n<answer>\n{"rating": ',
        # src/eval/demo_score.py:21-22 (set_seed(42)) and :71-77
        reading={"temperature": 1.0, "top_k": 50, "top_p": 0.95, "max_new_tokens": 1024, "seed": 42},
    ),
}
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_RATING_VALUE = re.compile(r'"rating"\s*:\s*(' + _NUMBER + ")")


def parse_score(text: str, prompt: str = "visualquality-r1") -> float | None:
    """The score of an answer as ``prompt``'s release reads it, or ``None`` (no answer tags, no number, NaN or inf):
    VisualQuality-R1's the first number inside the last ``<answer>...</answer>``; Q-Insight's the ``"rating"`` value
    inside the first one.

    >>> parse_score("<think>sharp</think><answer>2</answer> so <answer>3.45</answer>")
    3.45
    >>> parse_score('<answer>{"rating": 2.5}</answer>', "q-insight"), parse_score("<answer>2.5</answer>", "q-insight")
    (2.5, None)
    >>> parse_score("3.45"), parse_score("<answer>good</answer>"), parse_score("<answer>1e999</answer>")
    (None, None, None)
    """
    answers = _ANSWER.findall(text)
    if not answers:
        return None
    if PROMPTS[prompt].rating_key:
        found = _RATING_VALUE.search(answers[0])
        number = found.group(1) if found else None
    else:
        found = re.search(_NUMBER, answers[-1])
        number = found.group() if found else None
    value = float(number) if number else math.nan
    return value if math.isfinite(value) else None
