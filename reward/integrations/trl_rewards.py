"""Any reward as a trl reward function: ``reward.trl_reward_func(reward, render)``.

trl's ``GRPOTrainer`` calls each reward function as ``f(prompts=..., completions=..., completion_ids=...,
**columns)``: ``columns`` are the dataset's other columns (one value per completion) and trl's ``trainer_state``,
``log_extra`` and ``log_metric``; prompts and completions are strings, or conversational messages
(``[{"role": ..., "content": ...}]``, content a string or a list of parts). It wants one number per completion,
``None`` where there is none (trl turns it into NaN and sums rewards with ``nansum``), and logs the mean under
``rewards/<__name__>/mean``.

:class:`TrlRewardFunc` is such a function: ``render(prompts, completions, **columns)`` makes one image per
completion (``None`` for a failed render; see :mod:`reward.integrations.renderers`), the reward scores all images
of the batch in one ``Reward.score`` call, and a failed or NaN item gives ``None``. Prompts and completions reach
``render`` as text (a conversational one: the text of its last message).

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

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reward.integrations.renderers import images_from_column
from reward.rewards.registry import spec_of

logger = logging.getLogger(__name__)

__all__ = ["TrlCallable", "TrlRewardFunc", "message_text", "trl_reward_func"]

Render = Callable[..., Sequence[Any]]  # render(prompts, completions, **columns) -> one image (or None) per completion


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


class TrlRewardFunc:
    """A reward as a trl reward function (see the module docstring); built by :func:`trl_reward_func`.

    ``calls`` counts the batches scored, ``last_values`` holds what the last call returned and ``last_failed`` its
    ``None`` items (also logged to trl as ``<name>/failed`` through ``log_metric``).
    """

    def __init__(
        self,
        reward: Any,
        render: Render,
        *,
        name: str,
        higher_is_better: bool,
        score_range: tuple[float, float],
        normalize: bool = False,
    ) -> None:
        if not callable(render):
            raise TypeError(
                f"render must be a function (prompts, completions, **columns) -> images, got {type(render).__name__}; "
                "e.g. reward.integrations.renderers.images_from_column('image')"
            )
        self.reward = reward
        self.render = render
        self.__name__ = name  # trl logs rewards/<name>/mean
        self.higher_is_better = higher_is_better
        self.score_range = score_range
        self.normalize = normalize
        self.calls = 0
        self.last_values: list[float | None] = []
        self.last_failed = 0

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None, **columns: Any
    ) -> list[float | None]:
        n = len(completions)
        prompt_texts = [message_text(p) for p in prompts]
        texts = [message_text(c) for c in completions]
        images = list(self.render(prompt_texts, texts, **columns))
        if len(images) != n:
            raise ValueError(
                f"{self.__name__}: render returned {len(images)} images for {n} completions; it must return one per "
                "completion (None for a failed one)"
            )
        present = [i for i, im in enumerate(images) if im is not None]
        raw: list[float | None] = [None] * n
        scored = self._score([images[i] for i in present], [texts[i] for i in present])
        for i, value in zip(present, scored, strict=True):
            raw[i] = value
        self.calls += 1
        self.last_values = [None if v is None else self.value(v) for v in raw]
        self.last_failed = sum(v is None for v in raw)
        log_metric = columns.get("log_metric")
        if callable(log_metric):
            log_metric(f"{self.__name__}/failed", float(self.last_failed))
        return list(self.last_values)

    def value(self, raw: float) -> float:
        """What trl maximises: the score itself (negated when lower is better); with ``normalize``, the score
        mapped onto [0, 1] by the reward's ``score_range`` with 1 = best."""
        if self.normalize:
            low, high = self.score_range
            unit = (raw - low) / (high - low)
            return unit if self.higher_is_better else 1.0 - unit
        return raw if self.higher_is_better else -raw

    def _score(self, images: list[Any], texts: list[str]) -> list[float | None]:
        """One ``Reward.score`` call for the batch; if it raises, item by item (an item that raises is ``None``;
        if all do, the first error is raised)."""
        if not images:
            return []
        try:
            return _floats(self.reward.score(images, texts).scores)
        except Exception as err:  # noqa: BLE001 - retried item by item below; re-raised if nothing scores
            if len(images) == 1:
                raise
            logger.warning(
                "%s: scoring the batch of %d failed (%s); scoring item by item", self.__name__, len(images), err
            )
            first = err
        out: list[float | None] = []
        for image, text in zip(images, texts, strict=True):
            try:
                out.extend(_floats(self.reward.score([image], [text]).scores))
            except Exception as err:  # noqa: BLE001 - a failed item is None, counted in last_failed
                logger.warning("%s: an item failed: %s", self.__name__, err)
                out.append(None)
        if all(v is None for v in out):
            raise first
        return out


def _floats(scores: Any) -> list[float | None]:
    values = [float(v) for v in scores.detach().cpu().flatten().tolist()]
    return [None if math.isnan(v) else v for v in values]


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
    spec = spec_of(reward)
    name = name or (spec.name if spec else None)
    higher = higher_is_better if higher_is_better is not None else (spec.higher_is_better if spec else None)
    span = score_range or (spec.score_range if spec else None)
    if name is None or higher is None:
        raise ValueError(
            f"{type(reward).__name__} was not built by reward.get_reward, so its name and direction are unknown: "
            "pass trl_reward_func(..., name='my-reward', higher_is_better=True) or build it with reward.get_reward"
        )
    if normalize and span is None:
        raise ValueError(f"{name}: normalize=True needs the reward's score_range=(low, high)")
    return TrlRewardFunc(
        reward,
        render,
        name=name,
        higher_is_better=higher,
        score_range=span or (-math.inf, math.inf),
        normalize=normalize,
    )


IMAGE_COLUMNS = ("image", "images")  # dataset columns a reward called by trl reads its images from


class TrlCallable:
    """Makes a reward usable as it is in ``GRPOTrainer(reward_funcs=[reward])`` when the dataset has an ``image`` or
    ``images`` column (a VLM policy's own images): the call is that of ``reward.trl_reward_func(self,
    images_from_column(...))``, and ``__name__`` is the registered name, which trl logs. Without such a column the
    call raises a ``TypeError`` that says how to wrap the reward with a render."""

    @property
    def __name__(self) -> str:
        spec = getattr(self, "reward_spec", None)
        return str(getattr(spec, "name", type(self).__name__))

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        column = next((c for c in IMAGE_COLUMNS if c in columns), None)
        if column is None:
            raise TypeError(
                f"{type(self).__name__} scores images, but trl called it with text completions and no 'image' or "
                "'images' column; wrap it with a render that makes each completion's image: "
                "reward_funcs=[reward.trl_reward_func(scorer, render)] (renderers: "
                "reward.render_from_pipeline(pipe), reward.images_from_column(NAME))"
            )
        return trl_reward_func(self, images_from_column(column))(prompts, completions, **columns)
