"""The contract every reward meets: ``Reward.score(images, prompts=None) -> RewardOutput``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
from PIL import Image


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
    """Scores a batch of images (optionally with the prompts that generated them).

    Images come as users hold them: PIL images, uint8 or float [0, 1] tensors (C x H x W, or a B x C x H x W
    batch), numpy arrays, one image or a list; ``score`` passes them through
    :func:`reward.data.images.as_images` first.

    Optional: a VLM reward may offer ``image_preparer()``, a picklable callable that runs its image processor on
    one image group; ``reward.eval.parallel`` calls it in DataLoader workers and passes what it returns to
    ``score`` in place of the images (``reward.vlm.inputs.PreparedImages``).
    """

    def score(self, images: Sequence[Image.Image] | Any, prompts: Sequence[str] | None = None) -> RewardOutput: ...


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
        from reward.integrations.renderers import images_from_column
        from reward.integrations.trl_rewards import trl_reward_func

        column = next((c for c in IMAGE_COLUMNS if c in columns), None)
        if column is None:
            raise TypeError(
                f"{type(self).__name__} scores images, but trl called it with text completions and no 'image' or "
                "'images' column; wrap it with a render that makes each completion's image: "
                "reward_funcs=[reward.trl_reward_func(scorer, render)] (renderers: "
                "reward.render_from_pipeline(pipe), reward.images_from_column(NAME))"
            )
        return trl_reward_func(self, images_from_column(column))(prompts, completions, **columns)
