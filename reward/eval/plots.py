"""Plots people would rather look at than read: prediction vs MOS with the holistic-bias zone (PACE Fig. 4)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from reward.data.files import atomic_write_with


def new_figure(figsize: tuple[float, float], dpi: int = 110) -> tuple[Figure, Any]:
    """A figure on its own Agg canvas and its axes: no pyplot state, no global backend switch."""
    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def scatter_vs_mos(
    pred_on_mos_scale: Sequence[float],
    mos: Sequence[float],
    path: str | Path,
    title: str,
    taus: tuple[float, float] = (3.0, 4.0),
    mos_range: tuple[float, float] = (1.0, 5.0),
    hor: float | None = None,
) -> Path:
    """Predictions (mapped to the MOS scale) against MOS; the zone MOS <= tau_low and prediction >= tau_high
    (low-quality images scored high) shaded red, the ideal diagonal dashed."""
    (lo, hi), (tau_low, tau_high) = mos_range, taus
    fig, ax = new_figure((4.2, 4.2))
    zone = Rectangle((lo, tau_high), tau_low - lo, hi - tau_high, color="tab:red", alpha=0.15, lw=0)
    ax.add_patch(zone).set_label("holistic bias zone")
    ax.plot([lo, hi], [lo, hi], "--", color="gray", lw=1, label="ideal")
    ax.scatter(np.asarray(mos), np.asarray(pred_on_mos_scale), s=14, alpha=0.75, color="tab:blue")
    ax.set(xlim=(lo, hi), ylim=(lo, hi), xlabel="human MOS", ylabel="prediction (mapped to the MOS scale)")
    ax.set_title(title if hor is None or np.isnan(hor) else f"{title}  (HOR = {100 * hor:.1f}%)", fontsize=9)
    ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def save_figure(fig: Figure, path: str | Path, **savefig: Any) -> Path:
    """Write ``fig`` as a PNG atomically (a crash never leaves half a file)."""
    return atomic_write_with(path, lambda tmp: fig.savefig(tmp, **savefig))
