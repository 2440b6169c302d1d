"""Rewards whose truth is known, for Flow-GRPO's learning proof on the tiny random FLUX Fill (tests only; by import
path): the truth is how free of fine-grain texture an image is. ``known_truth:smoothness`` (the training reward) is
one minus the mean absolute Laplacian of its grey levels; ``known_truth:flatness`` (the held-out judge) one minus its
total variation (mean absolute difference of neighbouring pixels): two measures of one truth, a second and a first
derivative.

Why this truth: the tiny FLUX Fill's random VAE normalises its features (GroupNorm), so a latent's mean and scale never
reach the image (its brightness is not the generator's to change), while the spatial texture of the latents does: a
smooth latent decodes to a smooth image. A generator can learn to make its latents smooth.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import ndimage

from reward import RewardOutput, declare_reward
from reward.data.images import as_images


def _grey(images) -> list[np.ndarray]:
    return [np.asarray(im.convert("L"), dtype=np.float64) / 255.0 for im in as_images(images)]


class Smoothness:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg

    def score(self, images, prompts=None) -> RewardOutput:
        values = [1.0 - min(1.0, float(np.abs(ndimage.laplace(g)).mean())) for g in _grey(images)]
        return RewardOutput(scores=torch.tensor(values, dtype=torch.float32))


class Flatness(Smoothness):
    def score(self, images, prompts=None) -> RewardOutput:
        tv = [float(np.abs(np.diff(g, axis=0)).mean() + np.abs(np.diff(g, axis=1)).mean()) for g in _grey(images)]
        return RewardOutput(scores=torch.tensor([1.0 - min(1.0, v) for v in tv], dtype=torch.float32))


@declare_reward(higher_is_better=True, score_range=(0.0, 1.0), description="1 - mean |Laplacian| of grey (tests)")
def smoothness(cfg: dict) -> Smoothness:
    return Smoothness(cfg)


@declare_reward(higher_is_better=True, score_range=(0.0, 1.0), description="1 - total variation of grey (tests)")
def flatness(cfg: dict) -> Flatness:
    return Flatness(cfg)
