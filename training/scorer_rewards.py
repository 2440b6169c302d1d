"""The rewards of a scorer trained by GRPO, each a trl reward function ``(completions, **columns) -> list``.

Columns of the training rows (:mod:`training.commands.grpo_scorer`): ``mos`` (on the prompt's 1-5 scale),
``image_id`` (the K completions of one image share it) and, where the data names one, ``distortion``.
An answer is read as its prompt's release reads it (:func:`reward.rewards.reasoning_prompts.parse_score`); one whose
score does not parse (no answer tags, no number, NaN or inf) is a failed item: it earns 0, never a number made up for
it (VisualQuality-R1's release draws a random score for it).

- :func:`score_reward` -- Q-Insight (arXiv:2503.22679) §3.2's score reward: 1 when ``|score - MOS| < threshold``
  (0.35 on the 1-5 scale), else 0.
- :func:`format_reward` -- the released format reward of the prompt (:data:`~reward.rewards.reasoning_prompts.PROMPTS`
  ``answer_format``): 1 for an answer in that format, else 0.
- :func:`degradation_reward` -- Q-Insight's degradation-type reward, as a word: 1 when the answer names the row's
  distortion.
- :func:`ranking_reward` -- VisualQuality-R1 (arXiv:2505.14460) §3.2's fidelity reward, below. It compares the images
  of the batch it is given; :func:`reward.integrations.trl_step.whole_step` gives it the whole step's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from reward.rewards.reasoning_prompts import PROMPTS, parse_score

Completion = str | list[dict[str, Any]]
GAMMA = 1e-6  # VisualQuality-R1 §3.2: keeps the Thurstone probability defined when both variances are 0
# VisualQuality-R1's release adds it inside each square root of the fidelity (src/open_r1/grpo_jsonl.py:129, :138)
EPS = 1e-6


def _text(completion: Completion) -> str:
    """The answer text of a plain or a conversational completion."""
    return completion if isinstance(completion, str) else str(completion[-1]["content"])


def score_reward(threshold: float = 0.35, prompt: str = "q-insight") -> Callable[..., list[float]]:
    """Q-Insight's score reward, ``|score - mos| < threshold``, the score read as ``prompt``'s release reads it.

    >>> answers = ['<answer>{"rating": 3.3}</answer>', '<answer>{"rating": 3.4}</answer>', "<answer>3.0</answer>"]
    >>> score_reward()(answers, mos=[3.0, 3.0, 3.0])
    [1.0, 0.0, 0.0]
    """

    def q_insight_score(completions: Sequence[Completion], mos: Sequence[float], **_: Any) -> list[float]:
        scores = [parse_score(_text(c), prompt) for c in completions]
        return [float(s is not None and abs(s - m) < threshold) for s, m in zip(scores, mos, strict=True)]

    return q_insight_score


def format_reward(prompt: str = "visualquality-r1") -> Callable[..., list[float]]:
    """1 for an answer in ``prompt``'s released format, else 0.

    >>> format_reward()(["<think>ok</think> <answer>3</answer>", "<answer>3</answer>"])
    [1.0, 0.0]
    """
    pattern = re.compile(PROMPTS[prompt].answer_format, re.DOTALL)

    def answer_format(completions: Sequence[Completion], **_: Any) -> list[float]:
        return [float(pattern.fullmatch(_text(c)) is not None) for c in completions]

    return answer_format


def degradation_reward(
    completions: Sequence[Completion], distortion: Sequence[str | None] | None = None, **_: Any
) -> list[float | None]:
    """Q-Insight's degradation-type reward: 1 when the answer names the row's ``distortion`` as a word, else 0;
    ``None`` (no reward) for a row whose data names none.

    >>> degradation_reward(["<answer>gaussian blur</answer>", "<answer>noise</answer>", "x"], ["blur", "blur", None])
    [1.0, 0.0, None]
    """
    rows = distortion or [None] * len(completions)
    out: list[float | None] = []
    for c, name in zip(completions, rows, strict=True):
        answer = re.search(r"<answer>(.*?)</answer>", _text(c), re.DOTALL)
        found = bool(answer and name and re.search(rf"\b{re.escape(name.lower())}\b", answer.group(1).lower()))
        out.append(None if not name else float(found))
    return out


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _mean_var(values: list[float]) -> tuple[float, float]:
    """The mean and the unbiased variance (``torch.var``'s, as the release computes it; 0 for one value)."""
    mean = sum(values) / len(values)
    return mean, sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0


def ranking_reward(prompt: str = "visualquality-r1") -> Callable[..., list[float | None]]:
    """VisualQuality-R1's ranking reward for each completion k of image i in the batch:

    ``p = Phi((q_ik - mu_j) / sqrt(var_i + var_j + GAMMA))`` (Thurstone: the probability that this answer ranks i
    above j, from the parsed scores' mean ``mu`` and unbiased variance ``var`` of each image's answers),
    ``p* = 1, 0.5, 0`` as ``MOS_i >, =, < MOS_j``, and the fidelity ``sqrt(p* p + EPS) + sqrt((1 - p*)(1 - p) + EPS)``
    averaged over the other images j of the batch (the release's formula, ``src/open_r1/grpo_jsonl.py:128-139``).
    Defined cases: an answer that does not parse earns 0 and is left out of its image's mean and variance (one parsed
    answer: variance 0); an image none of whose answers parses is no j for the others; a parsed answer with no j (a
    batch of one image, or every other image failed) gets ``None`` (nothing to rank against).

    >>> f = ranking_reward()
    >>> [round(r, 3) for r in f(["<answer>4</answer>", "<answer>2</answer>"], [4.0, 2.0], ["a", "b"])]
    [1.001, 1.001]
    """

    def ranking_reward(
        completions: Sequence[Completion], mos: Sequence[float], image_id: Sequence[Any], **_: Any
    ) -> list[float | None]:
        scores = [parse_score(_text(c), prompt) for c in completions]
        groups: dict[Any, list[float]] = {}
        truth: dict[Any, float] = {}
        for s, m, i in zip(scores, mos, image_id, strict=True):
            groups.setdefault(i, [])
            truth[i] = float(m)
            if s is not None:
                groups[i].append(s)
        stats = {i: _mean_var(values) for i, values in groups.items() if values}
        out: list[float | None] = []
        for s, i in zip(scores, image_id, strict=True):
            others = [j for j in stats if j != i]
            if s is None or not others:
                out.append(0.0 if s is None else None)
                continue
            total = 0.0
            for j in others:
                p = _phi((s - stats[j][0]) / math.sqrt(stats[i][1] + stats[j][1] + GAMMA))
                target = 1.0 if truth[i] > truth[j] else 0.5 if truth[i] == truth[j] else 0.0
                total += math.sqrt(target * p + EPS) + math.sqrt((1.0 - target) * (1.0 - p) + EPS)
            out.append(total / len(others))
        return out

    return ranking_reward
