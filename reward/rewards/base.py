"""The contract every reward meets: ``Reward.score(images, prompts=None) -> RewardOutput``."""

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
