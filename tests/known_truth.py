"""A reward whose truth is known for Flow-GRPO's learning proof on the tiny random FLUX Fill (tests only; by import
path, ``known_truth:smoothness``): how free of fine-grain noise an image is, one minus the mean absolute Laplacian of
its grey levels. It is the held-out judge beside the registered ``scene-proxy`` reward's ``distortion`` statistic (the
median residual of the log-luminance against its blur): two measures of one truth, computed differently.

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


class Smoothness:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg

    def score(self, images, prompts=None) -> RewardOutput:
        grey = [np.asarray(im.convert("L"), dtype=np.float64) / 255.0 for im in as_images(images)]
        values = [1.0 - min(1.0, float(np.abs(ndimage.laplace(g)).mean())) for g in grey]
        return RewardOutput(scores=torch.tensor(values, dtype=torch.float32))


@declare_reward(higher_is_better=True, score_range=(0.0, 1.0), description="1 - mean |Laplacian| of grey (tests)")
def smoothness(cfg: dict) -> Smoothness:
    return Smoothness(cfg)
