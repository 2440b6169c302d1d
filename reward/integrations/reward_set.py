"""Several rewards scored on the same images (the trl adapter's, GRPO's held-out evaluation and Best-of-N's).

Direction and range are the registry's (a reward's own ``score_range`` wins), never read from its name; ``normalize``
maps each onto [0, 1] with 1 = best. A batch a reward raises an item's error on (:data:`ITEM_ERRORS`) is scored item
by item, and an item that raises or scores NaN or ±inf is ``None``; a ``UserError`` or any other exception propagates.

Example:
    >>> from PIL import Image
    >>> rewards = RewardSet([{"name": "scene-proxy", "calibration_scenes": 1}], normalize=False)
    >>> dark = Image.new("RGB", (64, 64), (20, 20, 20))
    >>> rewards.score([dark, None])["scene-proxy"].raw  # no image, no score
    [4.199999809265137, None]
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reward.core.config import to_plain
from reward.core.errors import UserError
from reward.rewards.registry import checked_range, get_reward, reward_config, reward_info, spec_of
from reward.vlm.hub import missing_model

logger = logging.getLogger(__name__)

__all__ = ["ITEM_ERRORS", "NamedReward", "RewardSet", "ScoreResult", "named_reward", "reward_configs"]

ITEM_ERRORS = (ValueError, RuntimeError, OSError)  # what a reward raises on a bad image (a UserError excepted)
RANGE_TOLERANCE = 1e-4  # a score this fraction of its range's width outside it is rounding, clipped onto the range


@dataclass(frozen=True)
class NamedReward:
    label: str  # unique name in logs: the reward name, suffixed when the same reward appears twice
    name: str
    reward: Any
    higher_is_better: bool
    score_range: tuple[float, float]


@dataclass
class ScoreResult:
    """Scores of one reward for a batch: ``value`` (normalised if asked) and ``raw`` per item, ``None`` = no score;
    ``failed`` counts the items that had an image but no score, ``out_of_range`` those of them whose score fell
    outside the reward's ``score_range`` (see :meth:`RewardSet.in_range`)."""

    value: list[float | None]
    raw: list[float | None]
    dimensions: dict[str, list[float | None]] = field(default_factory=dict)
    failed: int = 0
    out_of_range: int = 0


def named_reward(
    reward: Any,
    *,
    name: str | None = None,
    higher_is_better: bool | None = None,
    score_range: tuple[float, float] | None = None,
    normalize: bool = False,
) -> NamedReward:
    """``reward`` with its name, direction and range: the registry's for a reward built by ``reward.get_reward``;
    for one constructed otherwise give ``name`` and ``higher_is_better`` (``score_range`` only with ``normalize``)."""
    spec = spec_of(reward)
    name = name or (spec.name if spec else None)
    higher = higher_is_better if higher_is_better is not None else (spec.higher_is_better if spec else None)
    span = score_range or getattr(reward, "score_range", None) or (spec.score_range if spec else None)
    if name is None or higher is None:
        raise ValueError(
            f"{type(reward).__name__} was not built by reward.get_reward, so its name and direction are unknown: "
            "pass trl_reward_func(..., name='my-reward', higher_is_better=True) (several rewards: "
            "reward.integrations.reward_set.named_reward(reward, name='my-reward', higher_is_better=True)) or build "
            "it with reward.get_reward"
        )
    if normalize and span is None:
        raise ValueError(f"{name}: normalize=True needs the reward's score_range=(low, high)")
    return NamedReward(name, name, reward, higher, checked_range(name, span, normalize) if span else UNBOUNDED)


UNBOUNDED = (-math.inf, math.inf)


def reward_configs(entries: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(name, config)`` pairs from config nodes with a ``name`` key, or bare names (empty config)."""
    out = []
    for entry in entries:
        if isinstance(entry, str):
            out.append((entry, {}))
            continue
        cfg = to_plain(entry)
        if not cfg.get("name"):
            raise ValueError(f"reward config {cfg} has no 'name'; use e.g. {{name: qbench, model: PATH}}")
        out.append((str(cfg.pop("name")), cfg))
    return out


def missing_reward_models(entries: Sequence[Any], key: str) -> list[str]:
    """The problem with each reward entry's ``model`` (a folder that is not there, a name that is no Hub id), named
    ``KEY.model`` (``KEY[i].model`` in a list): checked with the settings, before any reward or model loads."""
    found = []
    for i, entry in enumerate(entries):
        cfg = {} if isinstance(entry, str) or entry is None else to_plain(entry)
        where = f"{key}.model" if len(entries) == 1 else f"{key}[{i}].model"
        if cfg.get("model") is not None and (problem := missing_model(str(cfg["model"]), where)):
            found.append(problem)
    return found


def reward_has_device(name: str) -> bool:
    """Whether the registered reward ``name``'s settings have a ``device`` field (custom import paths: no)."""
    config = reward_config(name)
    return config is not None and any(f.name == "device" for f in dataclasses.fields(config))


class RewardSet:
    """Several rewards scored on the same images. ``entries``: bare names, config nodes with a ``name`` (built by
    the registry), rewards built by ``reward.get_reward``, or :class:`NamedReward` (kept as they are, so that a set
    can reuse another's built rewards)."""

    def __init__(self, entries: Sequence[Any], *, normalize: bool = True) -> None:
        self.normalize = normalize
        self.rewards: list[NamedReward] = []
        problems = []
        errors: list[Exception] = []
        for entry in entries:
            if isinstance(entry, NamedReward):
                self.rewards.append(entry)
            elif not isinstance(entry, str | Mapping) and callable(getattr(entry, "score", None)):
                named = named_reward(entry, normalize=normalize)
                self.rewards.append(dataclasses.replace(named, label=self._label(named.name)))
            else:
                ((name, cfg),) = reward_configs([entry])
                try:
                    spec = reward_info(name)
                    reward = get_reward(name, cfg)
                except (ValueError, FileNotFoundError) as err:
                    problems.append(f"reward {name!r}: {err}")
                    errors.append(err)
                    continue
                span = getattr(reward, "score_range", None) or spec.score_range  # a reward's own, where it says
                self.rewards.append(NamedReward(self._label(name), name, reward, spec.higher_is_better, span))
        if problems:  # one message for every reward that could not be built: the user's to fix when each one is
            raise (UserError if all(isinstance(e, UserError) for e in errors) else ValueError)("\n".join(problems))
        if not self.rewards:
            raise ValueError("no reward configured: give at least one reward name")

    def _label(self, name: str) -> str:
        return name if all(r.label != name for r in self.rewards) else f"{name}-{len(self.rewards)}"

    @property
    def labels(self) -> list[str]:
        return [r.label for r in self.rewards]

    def to_unit(self, r: NamedReward, value: float) -> float:
        """``value`` on [0, 1] with 1 = best when normalising and the range is finite; else best = highest."""
        low, high = r.score_range
        if self.normalize and math.isfinite(low) and math.isfinite(high):
            value = (value - low) / (high - low)
            return value if r.higher_is_better else 1.0 - value
        return value if r.higher_is_better else -value

    @staticmethod
    def in_range(r: NamedReward, value: float | None) -> float | None:
        """``value`` if it lies in the reward's ``score_range`` (within a rounding tolerance of
        :data:`RANGE_TOLERANCE` of its width, clipped onto it), else ``None``: a score outside the range the reward
        declares is no score (a broken model or reward), never a made-up number; the caller counts it.

        >>> r = NamedReward("r", "r", None, True, (1.0, 5.0))
        >>> RewardSet.in_range(r, 5.0000001), RewardSet.in_range(r, 7.0), RewardSet.in_range(r, None)
        (5.0, None, None)
        """
        low, high = r.score_range
        if value is None or not (math.isfinite(low) and math.isfinite(high)):
            return value
        slack = RANGE_TOLERANCE * (high - low)
        return min(max(value, low), high) if low - slack <= value <= high + slack else None

    def score(self, images: Sequence[Any], prompts: Sequence[str] | None = None) -> dict[str, ScoreResult]:
        """Every reward on the images that exist (``None`` images give ``None`` scores); a score outside the reward's
        range is ``None`` and counted (:meth:`in_range`, one warning per batch)."""
        idx = [i for i, im in enumerate(images) if im is not None]
        present = [images[i] for i in idx]
        texts = [prompts[i] for i in idx] if prompts is not None else None
        out = {}
        for r in self.rewards:
            raw: list[float | None] = [None] * len(images)
            dims: dict[str, list[float | None]] = {}
            outside = []
            for k, (score, dim_scores) in enumerate(score_each(r, present, texts)):
                raw[idx[k]] = self.in_range(r, score)
                if score is not None and raw[idx[k]] is None:
                    outside.append(score)
                for d, v in dim_scores.items():
                    dims.setdefault(d, [None] * len(images))[idx[k]] = v
            if outside:
                note = "reward %s scored %d item(s) outside its score_range %s (e.g. %s): counted as not scored"
                logger.warning(note, r.label, len(outside), r.score_range, outside[0])
            value = [None if v is None else self.to_unit(r, v) for v in raw]
            failed = sum(1 for i in idx if raw[i] is None)
            out[r.label] = ScoreResult(value, raw, dims, failed, len(outside))
        return out


def score_each(
    r: NamedReward, images: Sequence[Any], prompts: Sequence[str] | None
) -> list[tuple[float | None, dict[str, float | None]]]:
    """One batched call; on an item's error, item by item. NaN or infinite scores become ``None``."""
    if not images:
        return []
    try:
        outs = [r.reward.score(images, prompts)]
        spans = [range(len(images))]
    except UserError:
        raise
    except ITEM_ERRORS as err:  # a bad image: isolate it
        logger.warning("reward %s failed on a batch of %d (%s); scoring item by item", r.label, len(images), err)
        outs, spans = [], []
        for i in range(len(images)):
            try:
                outs.append(r.reward.score([images[i]], None if prompts is None else [prompts[i]]))
                spans.append(range(i, i + 1))
            except UserError:
                raise
            except ITEM_ERRORS as item_err:
                logger.warning("reward %s failed on item %d: %s", r.label, i, item_err)
    result: list[tuple[float | None, dict[str, float | None]]] = [(None, {}) for _ in images]
    for out, span in zip(outs, spans, strict=True):
        got = len(out.scores) if getattr(out.scores, "ndim", 1) == 1 else f"shape {tuple(out.scores.shape)} of"
        if got != len(span):
            raise UserError(
                f"reward {r.label}: score returned {got} scores for {len(span)} images; a reward returns one score "
                "per image (NaN for one it cannot score)"
            )
        for k, i in enumerate(span):  # NaN or infinite: None
            values = (float(v[k]) for v in (out.scores, *out.dimensions.values()))
            finite = [x if math.isfinite(x) else None for x in values]
            result[i] = (finite[0], dict(zip(out.dimensions, finite[1:], strict=True)))
    return result
