"""Rewards as trl reward functions: ``reward.trl_reward_func(reward, render)`` and, for several rewards sharing one
render, ``reward.trl_reward_funcs([r1, r2], render, normalize=True)`` (docs/rewards-in-your-code.md).

:class:`TrlRewards` is the adapter behind both (GRPO's too): ``render(prompts, completions, **columns)`` makes one
image per completion (``None``: a failed render) once per batch, shared by every reward; an item any reward failed on
is ``None`` from all (trl's ``nansum`` would count it as 0). Each batch is logged through trl's ``log_metric``.

Example:
    >>> from reward import get_reward, trl_reward_func
    >>> from reward.integrations.renderers import images_from_column
    >>> from PIL import Image
    >>> scorer = get_reward("scene-proxy", calibration_scenes=1)
    >>> f = trl_reward_func(scorer, images_from_column("image"))
    >>> f.__name__
    'scene-proxy'
    >>> dark, grey = (Image.new("RGB", (64, 64), (v, v, v)) for v in (20, 128))
    >>> f(prompts=["a room", "a room"], completions=["a dark room", "a grey room"], image=[dark, grey])
    [4.199999809265137, 5.0]
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reward.integrations.reward_set import NamedReward, RewardSet, ScoreResult, named_reward
from reward.rewards.base import served_stats

__all__ = [
    "Rendered",
    "RewardTally",
    "TrlRewardFunc",
    "TrlRewards",
    "message_text",
    "trl_reward_func",
    "trl_reward_funcs",
]

# render(prompts, completions, **columns) -> one image (or None) per completion, or a Rendered
Render = Callable[..., Any]


def message_text(value: Any) -> str:
    """The text of a prompt or completion as trl passes it: a string as is; conversational messages: the text of the
    last message (a content list's text parts joined, image parts skipped).

    >>> message_text([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a sunny room"}])
    'a sunny room'
    >>> message_text([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Rate it."}]}])
    'Rate it.'
    """
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        content = value.get("content")
    elif isinstance(value, Sequence) and value and isinstance(value[-1], Mapping):
        content = value[-1].get("content")
    else:
        raise TypeError(f"cannot read text from {type(value).__name__}: expected a string or a list of messages")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))


@dataclass
class Rendered:
    """What a render may return instead of the images alone: ``texts``, the prompt each image was drawn from (what
    ``Reward.score`` gets; default: the completions), and ``when_scored(scores)``, called once the batch is scored
    with every reward's :class:`~reward.integrations.reward_set.ScoreResult` (e.g. to save sample images)."""

    images: Sequence[Any]
    texts: Sequence[str] | None = None
    when_scored: Callable[[dict[str, ScoreResult]], None] | None = None


@dataclass
class RewardTally:
    """Completions scored since the last look, how many got no usable reward, and why (per reward label)."""

    completions: int = 0
    unusable: int = 0  # an item any reward failed on (or whose render failed): no reward at all
    render_failed: int = 0
    failed: Counter = field(default_factory=Counter)  # label -> items that reward gave no score

    def add(self, scores: Mapping[str, ScoreResult], render_failed: int = 0) -> None:
        n = len(next(iter(scores.values())).value) if scores else 0
        self.completions += n
        self.render_failed += render_failed
        self.unusable += sum(1 for i in range(n) if any(r.value[i] is None for r in scores.values()))
        for label, res in scores.items():
            self.failed[label] += sum(1 for v in res.value if v is None)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"failed": dict(self.failed)}


class TrlRewards:
    """The rewards of a :class:`RewardSet` over one render, as trl reward functions (:meth:`functions`); ``last``
    holds the last batch's scores (before the cross-reward ``None``), ``tally`` what a guard reads (and resets)."""

    def __init__(self, rewards: RewardSet, render: Render) -> None:
        if not callable(render):
            raise TypeError(
                f"render must be a function (prompts, completions, **columns) -> images, got {type(render).__name__}; "
                "e.g. reward.integrations.renderers.images_from_column('image')"
            )
        self.rewards, self.render = rewards, render
        self.tally = RewardTally()
        self.reward_s = 0.0
        self.batches = 0
        self.last: dict[str, ScoreResult] = {}
        self._batch: Any = None  # the completions list ``last`` was scored for, with its step and texts
        self._key: tuple[Any, list[str]] | None = None

    def functions(self) -> list[TrlRewardFunc]:
        """One trl reward function per reward (named after it), sharing each batch's render and scores."""
        return [TrlRewardFunc(self, r) for r in self.rewards.rewards]

    def values(self, label: str) -> list[float | None]:
        """What reward ``label`` gives trl for the last batch: ``None`` for an item any reward failed on."""
        value = self.last[label].value
        return [None if any(r.value[i] is None for r in self.last.values()) else v for i, v in enumerate(value)]

    def evaluate(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> dict[str, ScoreResult]:
        """Render the batch and score it with every reward, once per batch (the same list, step and texts)."""
        n = len(completions)
        texts = [message_text(c) for c in completions]
        key = (getattr(columns.get("trainer_state"), "global_step", None), texts)
        if completions is self._batch and key == self._key:
            return self.last
        rendered = self.render([message_text(p) for p in prompts], texts, **columns)
        rendered = rendered if isinstance(rendered, Rendered) else Rendered(rendered)
        images = list(rendered.images)
        if len(images) != n:
            raise ValueError(
                f"{', '.join(self.rewards.labels)}: render returned {len(images)} images for {n} completions; it "
                "must return one per completion (None for a failed one)"
            )
        served = {r.label: served_stats(r.reward) for r in self.rewards.rewards}
        before = {k: {n: dict(v) if isinstance(v, dict) else v for n, v in s.items()} for k, s in served.items() if s}
        start = time.perf_counter()
        scores = self.rewards.score(images, texts if rendered.texts is None else list(rendered.texts))
        self.reward_s += time.perf_counter() - start
        self.batches += 1
        self.tally.add(scores, sum(im is None for im in images))
        if callable(log_metric := columns.get("log_metric")):
            self._log(log_metric, scores, before)
        if rendered.when_scored is not None:
            rendered.when_scored(scores)
        self._batch, self._key, self.last = completions, key, scores
        return scores

    def _log(self, log_metric: Callable[[str, float], None], scores: dict[str, ScoreResult], before: dict) -> None:
        for label, res in scores.items():
            log_metric(f"{label}/failed", float(sum(v is None for v in res.value)))
            if res.out_of_range:
                log_metric(f"{label}/out_of_range", float(res.out_of_range))
            for name, values in {"raw": res.raw, **res.dimensions}.items():
                if ok := [v for v in values if v is not None]:
                    log_metric(f"{label}/{name}", sum(ok) / len(ok))
        log_metric("time/reward_s", self.reward_s)
        for r in self.rewards.rewards:  # per served reward: requests, failures, missing top-k mass
            now, old = served_stats(r.reward), before.get(r.label)
            if now is None or old is None:
                continue
            for key in ("requests", "failed"):
                log_metric(f"{r.label}/server_{key}", float(now[key] - old[key]))
            old_reasons = old.get("failed_reasons") or {}
            for reason, count in (now.get("failed_reasons") or {}).items():
                if count - old_reasons.get(reason, 0):
                    log_metric(f"{r.label}/server_failed/{reason}", float(count - old_reasons.get(reason, 0)))
            if answers := now["answers"] - old["answers"]:
                log_metric(f"{r.label}/missing_mass", (now["missing_mass_sum"] - old["missing_mass_sum"]) / answers)


class TrlRewardFunc:
    """One reward of a :class:`TrlRewards` as a trl reward function, named after it (trl logs
    ``rewards/<name>/mean``); ``calls``, ``last_values`` and ``last_failed`` tell what the last batch gave."""

    def __init__(self, scoring: TrlRewards, named: NamedReward) -> None:
        self.scoring, self.named = scoring, named
        self.__name__ = named.label  # trl logs rewards/<name>/mean
        self.reward, self.render = named.reward, scoring.render
        self.higher_is_better, self.score_range = named.higher_is_better, named.score_range
        self.normalize = scoring.rewards.normalize

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None, **columns: Any
    ) -> list[float | None]:
        self.scoring.evaluate(prompts, completions, **columns)
        return self.scoring.values(self.named.label)

    @property
    def calls(self) -> int:
        return self.scoring.batches

    @property
    def last_values(self) -> list[float | None]:
        return self.scoring.values(self.named.label) if self.scoring.last else []

    @property
    def last_failed(self) -> int:
        return sum(v is None for v in self.scoring.last[self.named.label].value) if self.scoring.last else 0


def trl_reward_func(
    reward: Any,
    render: Render,
    *,
    name: str | None = None,
    higher_is_better: bool | None = None,
    score_range: tuple[float, float] | None = None,
    normalize: bool = False,
) -> TrlRewardFunc:
    """``reward`` as a trl reward function whose images come from ``render(prompts, completions, **columns)``.

    The name, direction and score range are the registry's for a reward built by ``reward.get_reward``; for a
    reward constructed otherwise give ``name`` and ``higher_is_better`` (``score_range`` only with ``normalize``).
    trl maximises the returned value: the score (negated when lower is better), or with ``normalize=True`` the score
    on [0, 1] with 1 = best (to mix several rewards with trl's ``reward_weights``).
    """
    named = named_reward(
        reward, name=name, higher_is_better=higher_is_better, score_range=score_range, normalize=normalize
    )
    return TrlRewards(RewardSet([named], normalize=normalize), render).functions()[0]


def trl_reward_funcs(rewards: Sequence[Any], render: Render, *, normalize: bool = False) -> list[TrlRewardFunc]:
    """Several rewards as trl reward functions that share one render per batch: an item any of them failed on gets
    ``None`` from all. ``rewards``: built by ``reward.get_reward`` (or given their name and direction with
    :func:`reward.integrations.reward_set.named_reward`), or names and config nodes for the registry; a reward that
    appears twice is named ``NAME-i``. ``normalize=True`` puts each on [0, 1] (1 = best) for trl's
    ``reward_weights``. Their shared :class:`TrlRewards` (tally, timings) is each function's ``scoring``."""
    return TrlRewards(RewardSet(rewards, normalize=normalize), render).functions()
