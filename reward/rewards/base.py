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
