"""Q-Bench A1 perception: each question asked as a lettered multiple choice, answered by the letters' log-probs.

The candidates are shuffled with a seed (the same order on every run and machine), the prompt lists exactly the
letters present, and the answer is the most probable of those letters at the first position of the reply: one
forward pass per question, no sampling, no external judge. Accuracy is reported overall, for single images and
pairs separately, and by question type and concern.

Example:
    >>> prompt, letters, order = lettered_prompt("Is it blurry?", ("Yes", "No"), n_images=1, seed=0, index=0)
    >>> letters
    ('A', 'B')
"""

from __future__ import annotations

import logging
import string
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from reward.qbench.a1_questions import CONCERNS, TYPES, Question, image_name, load_question_image
from reward.vlm import VLM, OptionQuery

__all__ = ["INSTRUCTION", "Answer", "answer_questions", "format_metrics", "lettered_prompt", "perception_metrics"]

logger = logging.getLogger(__name__)

INSTRUCTION = "Answer with the option's letter from the given choices directly."
PAIR_INTRO = "The first image is shown first and the second image second."


def lettered_prompt(
    question: str, candidates: Sequence[str], *, n_images: int, seed: int, index: int, shuffle: bool = True
) -> tuple[str, tuple[str, ...], list[int]]:
    """The multiple-choice prompt, its letters (exactly as many as candidates) and the shown order.

    ``order[k]`` is the index in ``candidates`` of the option shown under letter ``k``; the shuffle depends only
    on ``(seed, index)``.
    """
    order = list(range(len(candidates)))
    if shuffle:
        order = [int(i) for i in np.random.default_rng([seed, index]).permutation(len(candidates))]
    letters = tuple(string.ascii_uppercase[: len(candidates)])
    lines = [question.strip()]
    if n_images == 2:
        lines.append(PAIR_INTRO)
    lines.append("Choose between one of the following options:")
    lines += [f"{letter}. {candidates[i]}" for letter, i in zip(letters, order, strict=True)]
    lines.append(INSTRUCTION)
    return "\n".join(lines), letters, order


@dataclass(frozen=True)
class Answer:
    """The model's answer to one question."""

    question: Question
    letters: tuple[str, ...]
    order: list[int]
    probs: list[float]  # over the letters shown, renormalised
    chosen: int  # index into letters
    letter_mass: float = 1.0  # probability the model puts on the shown letters at all (full vocabulary)

    @property
    def correct_letter(self) -> str:
        return self.letters[self.order.index(self.question.candidates.index(self.question.correct))]

    @property
    def is_correct(self) -> bool:
        return self.letters[self.chosen] == self.correct_letter

    def record(self) -> dict[str, Any]:
        q = self.question
        return {
            "line": q.line,
            "img_path": [image_name(p) for p in q.images],
            "question": q.question,
            "type": q.type,
            "concern": q.concern,
            "options": {letter: q.candidates[i] for letter, i in zip(self.letters, self.order, strict=True)},
            "correct": self.correct_letter,
            "chosen": self.letters[self.chosen],
            "answer": q.candidates[self.order[self.chosen]],
            "probability": self.probs[self.chosen],
            "is_correct": self.is_correct,
            "letter_mass": self.letter_mass,
            **({"id": q.extra["id"]} if "id" in q.extra else {}),
        }


def answer_questions(
    vlm: VLM,
    questions: Sequence[Question],
    *,
    seed: int = 0,
    batch_size: int = 16,
    system: str | None = None,
    shuffle: bool = True,
    max_decode_pixels: int | None = 36_000_000,
) -> list[Answer]:
    """Ask every question (singles and pairs alike) and read the answer from the letter log-probabilities.

    ``index`` in the shuffle seed is the question's position in ``questions``.
    """
    answers: list[Answer] = []
    bar = tqdm(total=len(questions), desc="A1", unit="q", disable=None)
    for start in range(0, len(questions), batch_size):
        chunk = list(enumerate(questions[start : start + batch_size], start=start))
        groups, queries, shown = [], [], []
        for index, q in chunk:
            prompt, letters, order = lettered_prompt(
                q.question, q.candidates, n_images=len(q.images), seed=seed, index=index, shuffle=shuffle
            )
            groups.append([load_question_image(p, max_decode_pixels) for p in q.images])
            queries.append([OptionQuery(prompt, letters)])
            shown.append((letters, order))
        logp = vlm.option_logprobs(groups, queries, system=system).logprobs[:, 0]
        for (_, q), (letters, order), row in zip(chunk, shown, logp, strict=True):
            logp_letters = row[: len(letters)].float()
            probs = torch.softmax(logp_letters, dim=-1)
            mass = float(logp_letters.exp().sum())
            answers.append(Answer(q, letters, order, probs.tolist(), int(probs.argmax()), mass))
        bar.update(len(chunk))
    bar.close()
    return answers


def _acc(items: Sequence[Answer]) -> dict[str, Any]:
    return {"accuracy": float(np.mean([a.is_correct for a in items])) if items else None, "n": len(items)}


def perception_metrics(answers: Sequence[Answer]) -> dict[str, Any]:
    """``{"accuracy": overall, "n": N, "single"|"pair": {"accuracy", "n", "by_type", "by_concern"}}``."""
    out: dict[str, Any] = _acc(answers)
    out["letter_mass"] = float(np.mean([a.letter_mass for a in answers])) if answers else None  # format following
    for part in ("single", "pair"):
        items = [a for a in answers if a.question.part == part]
        if not items:
            continue
        by_type, by_concern = defaultdict(list), defaultdict(list)
        for a in items:
            by_type[TYPES[a.question.type]].append(a)
            by_concern[CONCERNS[part][a.question.concern]].append(a)
        out[part] = {
            **_acc(items),
            "by_type": {name: _acc(by_type[name]) for name in TYPES.values() if name in by_type},
            "by_concern": {name: _acc(by_concern[name]) for name in CONCERNS[part].values() if name in by_concern},
        }
    return out


def format_metrics(metrics: dict[str, Any], title: str = "A1 perception") -> str:
    """A markdown table: one row per part (single / pair / all), columns by type and by concern."""
    cols = list(TYPES.values())
    concern_cols = {part: list(CONCERNS[part].values()) for part in ("single", "pair")}

    def cell(m: dict[str, Any] | None) -> str:
        return "-" if not m or m.get("accuracy") is None else f"{m['accuracy']:.3f} ({m['n']})"

    lines = [f"### {title}", ""]
    for part in ("single", "pair"):
        if part not in metrics:
            continue
        m = metrics[part]
        header = ["part", *cols, *concern_cols[part], "overall"]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        row = [part] + [cell(m["by_type"].get(c)) for c in cols]
        row += [cell(m["by_concern"].get(c)) for c in concern_cols[part]] + [cell(m)]
        lines += ["| " + " | ".join(row) + " |", ""]
    lines.append(f"**all questions: {cell(metrics)}**")
    return "\n".join(lines) + "\n"
