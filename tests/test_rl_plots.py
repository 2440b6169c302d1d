"""rl.plots: the GRPO reward curve draws what was logged, and says so when nothing was."""

from __future__ import annotations

import warnings

import numpy as np
from PIL import Image

from rl.plots import reward_curves


def test_a_curve_with_points_differs_from_an_empty_one_and_neither_warns(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an empty legend warned before; the empty plot now says "no rewards logged"
        empty = reward_curves({"scene-proxy": []}, {}, tmp_path / "empty.png")
        full = reward_curves(
            {"scene-proxy": [(1, 0.4, 0.1), (2, 0.5, 0.1), (3, 0.6, 0.05)]},
            {"scene-proxy": [(0, 0.35), (3, 0.6)]},
            tmp_path / "full.png",
        )
    a, b = (np.asarray(Image.open(p).convert("L"), dtype=float) for p in (empty, full))
    assert a.shape == b.shape and np.abs(a - b).mean() > 1.0  # the curve is drawn, not only the axes
