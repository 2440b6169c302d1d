"""Q-Bench A1 perception: each question asked as a lettered multiple choice (:func:`lettered_prompt`), answered
``logprob`` (the most probable shown letter at the reply's first position, one forward pass: this toolkit's own
protocol, not how published A1 tables were made) or ``generate`` (lmms-eval's protocol: a greedy reply parsed by
:func:`parse_choice`; a reply that cannot be parsed counts as wrong, where lmms-eval guesses at random). Accuracy is
reported overall, for single images and pairs, by question type and concern, and on Table III's axes.

Example:
    >>> prompt, letters, order = lettered_prompt("Is it blurry?", ("Yes", "No"), n_images=1, seed=0, index=0)
    >>> letters, prompt.splitlines()[:2]
    (('A', 'B'), ['Is it blurry?', '<image>'])
"""

from __future__ import annotations

import logging
import string
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from reward.data.images import load_image
from reward.qbench.a1_questions import CONCERNS, TYPES, Question, image_name, markdown_table
from reward.vlm import IMAGE

if TYPE_CHECKING:
    from reward.vlm import VLM

logger = logging.getLogger(__name__)

INSTRUCTION = "Answer with the option's letter from the given choices directly."
PAIR_IMAGES = (f"The first image: {IMAGE}", f"The second image: {IMAGE}")  # Q-Bench+ §II-B, image pairs
MODES = ("logprob", "generate")
# Table III's per-axis columns of pair questions, as concern codes: low-level (Distortion / Other) and pairwise
# (Compare / Joint); each code is one of the four cells (comparison / joint x distortion / other)
PAIR_AXES: dict[str, tuple[int, ...]] = {"distortion": (0, 2), "other": (1, 3), "compare": (0, 1), "joint": (2, 3)}
LAYOUTS = ("paper", "paper-exact", "lmms")  # paper-exact: the paper's layout without lmms-eval's instruction


def lettered_prompt(
    question: str,
    candidates: Sequence[str],
    *,
    n_images: int,
    seed: int,
    index: int,
    shuffle: bool = True,
    layout: str = "paper",
) -> tuple[str, tuple[str, ...], list[int]]:
    """The multiple-choice prompt, its letters and the shown order (``order[k]``: the index in ``candidates`` under
    letter ``k``, shuffled by ``(seed, index)`` alone). ``layout``: ``paper`` is Q-Bench+ §II-B plus lmms-eval's
    :data:`INSTRUCTION` (``paper-exact``: without it); ``lmms`` is lmms-eval's text, the images before it."""
    order = list(range(len(candidates)))
    if shuffle:
        order = [int(i) for i in np.random.default_rng([seed, index]).permutation(len(candidates))]
    letters = tuple(string.ascii_uppercase[: len(candidates)])
    lines = [question.strip()]
    if layout != "lmms":
        lines += list(PAIR_IMAGES) if n_images == 2 else [IMAGE] * n_images
        lines.append("Choose between one of the following options:")
    lines += [f"{letter}. {candidates[i]}" for letter, i in zip(letters, order, strict=True)]
    lines += [] if layout == "paper-exact" else [INSTRUCTION]
    text = "\n".join(lines)
    return (text + "\n" if layout == "lmms" else text), letters, order  # lmms-eval's post_prompt ends with "\n"


def parse_choice(reply: str, letters: Sequence[str], options: Sequence[str]) -> tuple[str | None, str | None]:
    """The letter a free-form reply chooses and the rule that found it, as lmms-eval's Q-Bench parser (MMMU's
    ``parse_multi_choice_response``) reads it: ``(X)``, then ``X`` followed by a space, then ``X.``, then -- only in
    a reply of more than five words -- an option's text; of several matches the last one in the reply wins.
    ``(None, None)`` where lmms-eval would guess at random: the reply counts as wrong."""
    response = reply
    for char in (",", ".", "!", "?", ";", ":", "'"):
        response = response.strip(char)
    response = f" {response} "
    found = [c for c in letters if f"({c})" in response]
    if found:
        rule, where = "bracket", {c: response.rfind(f"({c})") for c in found}
    else:
        found = [c for c in letters if f"{c} " in response] or [c for c in letters if f"{c}." in response]
        rule, where = "letter", {c: response.rfind(f" {c} ") for c in found}
    if not found and len(response.split()) > 5:
        index2ans = dict(zip(letters, options, strict=True))
        found = [c for c in letters if index2ans[c].lower() in response.lower()]
        rule, where = "option text", {c: response.lower().rfind(index2ans[c].lower()) for c in found}
    if not found:
        return None, None
    return found[int(np.argmax([where[c] for c in found]))], rule


@dataclass(frozen=True)
class Answer:
    """The model's answer to one question (``logprob`` mode: ``probs`` and ``letter_mass``; ``generate`` mode: the
    ``reply`` and the parse ``rule``; ``chosen`` is ``None`` for a reply that could not be parsed)."""

    question: Question
    letters: tuple[str, ...]
    order: list[int]
    probs: list[float] | None  # over the letters shown, renormalised (logprob mode)
    chosen: int | None  # index into letters; None: an unparseable reply (generate mode), counted wrong
    letter_mass: float | None = 1.0  # probability the model puts on the shown letters at all (full vocabulary)
    reply: str | None = None  # generate mode: the model's reply
    rule: str | None = None  # generate mode: the parse rule that found the letter (bracket, letter, option text)

    @property
    def correct_letter(self) -> str:
        return self.letters[self.order.index(self.question.candidates.index(self.question.correct))]

    @property
    def is_correct(self) -> bool:
        return self.chosen is not None and self.letters[self.chosen] == self.correct_letter

    def record(self) -> dict[str, Any]:
        q = self.question
        chosen = self.chosen
        return {
            "line": q.line,
            "img_path": [image_name(p) for p in q.images],
            "question": q.question,
            "type": q.type,
            "concern": q.concern,
            "options": {letter: q.candidates[i] for letter, i in zip(self.letters, self.order, strict=True)},
            "correct": self.correct_letter,
            "chosen": None if chosen is None else self.letters[chosen],
            "answer": None if chosen is None else q.candidates[self.order[chosen]],
            "probability": None if chosen is None or self.probs is None else self.probs[chosen],
            "is_correct": self.is_correct,
            "letter_mass": self.letter_mass,
            **({"reply": self.reply, "rule": self.rule} if self.reply is not None else {}),
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
    mode: str = "logprob",
    layout: str = "paper",
    max_new_tokens: int = 32,
) -> list[Answer]:
    """Ask every question (singles and pairs alike); ``mode``: ``logprob`` reads the answer from the letter
    log-probabilities, ``generate`` parses a greedy reply of up to ``max_new_tokens`` tokens (:func:`parse_choice`).
    The shuffle's ``index`` is the question's position in ``questions``."""
    import torch  # here: the command's settings (MODES, LAYOUTS) are read before torch loads

    from reward.vlm import OptionQuery

    answers: list[Answer] = []
    asked = {"seed": seed, "shuffle": shuffle, "layout": layout}
    bar = tqdm(total=len(questions), desc=f"A1 ({mode})", unit="q", disable=None)
    for start in range(0, len(questions), batch_size):
        chunk = list(enumerate(questions[start : start + batch_size], start=start))
        shown = [lettered_prompt(q.question, q.candidates, n_images=len(q.images), index=i, **asked) for i, q in chunk]
        groups = [[load_image(p, max_pixels=max_decode_pixels) for p in q.images] for _, q in chunk]
        if mode == "generate":
            prompts = [prompt for prompt, _, _ in shown]
            replies = vlm.generate(groups, prompts, system=system, max_new_tokens=max_new_tokens, do_sample=False)
            for (_, q), (_, letters, order), reply in zip(chunk, shown, replies, strict=True):
                letter, rule = parse_choice(reply, letters, [q.candidates[i] for i in order])
                chosen = None if letter is None else letters.index(letter)
                answers.append(Answer(q, letters, order, None, chosen, None, reply, rule))
        else:
            queries = [[OptionQuery(prompt, letters)] for prompt, letters, _ in shown]
            logp = vlm.option_logprobs(groups, queries, system=system).logprobs[:, 0]
            for (_, q), (_, letters, order), row in zip(chunk, shown, logp, strict=True):
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
    masses = [a.letter_mass for a in answers if a.letter_mass is not None]
    out["letter_mass"] = float(np.mean(masses)) if masses else None  # format following (logprob mode)
    unparsed = sum(a.chosen is None for a in answers)
    out["unparsed"] = unparsed  # generate mode: replies no letter could be read from (counted wrong)
    out["unparsed_fraction"] = unparsed / len(answers) if answers else None
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
        if part == "pair":  # Table III: the low-level axis and the pairwise axis, each over both halves of the other
            out[part]["by_axis"] = {
                axis: _acc([a for a in items if a.question.concern in codes]) for axis, codes in PAIR_AXES.items()
            }
    return out


def format_metrics(metrics: dict[str, Any], title: str = "A1 perception") -> str:
    """A markdown table: one row per part (single / pair / all), columns by type and by concern."""

    def cell(m: dict[str, Any] | None) -> str:
        return "-" if not m or m.get("accuracy") is None else f"{m['accuracy']:.3f} ({m['n']})"

    lines = [f"### {title}", ""]
    for part, m in ((part, metrics[part]) for part in ("single", "pair") if part in metrics):
        axes = list(m.get("by_axis", {}))
        header = ["part", *TYPES.values(), *CONCERNS[part].values(), "overall", *axes]
        row = [part, *(cell(m["by_type"].get(c)) for c in TYPES.values())]
        row += [*(cell(m["by_concern"].get(c)) for c in CONCERNS[part].values()), cell(m)]
        row += [cell(m["by_axis"][a]) for a in axes]
        lines += [*markdown_table(header, [row]), ""]
    lines.append(f"**all questions: {cell(metrics)}**")
    if metrics.get("unparsed"):
        lines.append(f"\n{metrics['unparsed']} repl(ies) gave no letter (counted wrong; lmms-eval would guess)")
    return "\n".join(lines) + "\n"
