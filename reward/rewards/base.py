"""The contract every reward meets: ``Reward.score(images, prompts=None) -> RewardOutput``; rewards callable as
people call pyiqa's and Q-Align's scorers (:class:`CallableReward`); the request counters of a reward scored through
servers (:func:`served_stats`), read without importing the servers' client."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from PIL import Image

if TYPE_CHECKING:  # a command's settings are checked before torch loads
    import torch


@dataclass
class RewardOutput:
    """``scores``: float tensor [B]; ``dimensions``: name -> float tensor [B] (empty when the reward has none)."""

    scores: torch.Tensor
    dimensions: dict[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = self.scores.shape[0]
        for name, values in self.dimensions.items():
            if values.shape != (n,):
                raise ValueError(f"dimension {name!r} has shape {tuple(values.shape)}, expected ({n},)")


@runtime_checkable
class Reward(Protocol):
    """Scores a batch of images as users hold them (:func:`reward.data.images.as_images`), optionally with the
    prompts that generated them. A VLM reward may offer ``image_preparer()`` (its image processor, picklable), which
    ``reward.eval.parallel`` runs in DataLoader workers, passing ``score`` the ``PreparedImages`` instead."""

    def score(self, images: Sequence[Image.Image] | Any, prompts: Sequence[str] | None = None) -> RewardOutput: ...


class CallableReward:
    """Makes a reward callable as people call pyiqa's and Q-Align's scorers: ``scorer(images)`` (anything
    :func:`reward.data.images.as_images` takes: PIL images, tensors, arrays, image paths) returns the images' scores,
    a float tensor [B] (``scorer.score(images)`` gives each dimension's too); ``__name__`` is the registered name.

    trl calls a reward function with ``prompts=`` and ``completions=``; such a call raises a ``TypeError`` that says
    how to wrap the reward with a render: ``reward.trl_reward_func(scorer, render)`` (:mod:`reward.integrations`)."""

    @property
    def __name__(self) -> str:
        spec = getattr(self, "reward_spec", None)
        return str(getattr(spec, "name", type(self).__name__))

    def __call__(self, *args: Any, **columns: Any) -> Any:
        if "completions" in columns or len(args) >= 2:  # trl's call: (prompts, completions, **columns)
            raise TypeError(
                f"{type(self).__name__} scores images, and trl calls a reward with text completions; wrap it with a "
                "render that gives each completion's image: reward_funcs=[reward.trl_reward_func(scorer, render)] "
                "(renderers: reward.images_from_column(NAME) for a dataset's image column, "
                "reward.render_from_pipeline(pipe) to draw each completion)"
            )
        if len(args) + len(columns) != 1 or (columns and "images" not in columns):
            raise TypeError(
                f"{type(self).__name__} is called with images, scorer(images); got {len(args)} positional "
                f"argument(s) and {sorted(columns)}"
            )
        scorer: Any = self
        return scorer.score(args[0] if args else columns["images"]).scores


def served_stats(reward: Any) -> dict[str, Any] | None:
    """The request counters of a reward that scores through servers (``backend=openai``: its ``vlm`` or ``backend``
    is a :class:`reward.vlm.server.OpenAIBackend`), else ``None``."""
    for attr in ("vlm", "backend"):
        stats = getattr(getattr(reward, attr, None), "stats", None)
        if isinstance(stats, dict) and "requests" in stats:
            return stats
    return None


def failure_summary(stats: dict[str, Any]) -> str:
    """A short line of a backend's failures.

    >>> failure_summary({"failed": 3, "answers": 5, "failed_reasons": {"http_500": 2, "not_json": 1}})
    '3 of 8 items failed (http_500 2, not_json 1)'
    """
    reasons = sorted(stats["failed_reasons"].items(), key=lambda kv: (-kv[1], kv[0]))
    detail = f" ({', '.join(f'{r} {n}' for r, n in reasons)})" if reasons else ""
    return f"{stats['failed']} of {stats['failed'] + stats['answers']} items failed{detail}"


def server_report(stats: dict[str, Any]) -> dict[str, Any]:
    """The counters of a backend as plain JSON (for metrics.json and summaries).

    >>> from collections import Counter
    >>> server_report({"requests": 2, "failed": 1, "failed_reasons": Counter(not_json=1), "missing_mass_sum": 0.0})
    {'requests': 2, 'failed': 1, 'failed_reasons': {'not_json': 1}}
    """
    out = {k: v for k, v in stats.items() if k != "missing_mass_sum"}
    return out | {"failed_reasons": dict(sorted(stats["failed_reasons"].items()))}
