"""A training run's loss and learning rate against the step, from the trainer's ``log_history``
(``trainer_state.json``): ``train_curve.png`` and the plotted series as ``train_curve.json``.

Example:
    >>> history = [{"step": 1, "loss": 2.0, "learning_rate": 1e-3}, {"step": 2, "loss": 1.5, "learning_rate": 5e-4},
    ...            {"step": 2, "train_loss": 1.75}]
    >>> curve_series(history)
    {'loss': [[1, 2.0], [2, 1.5]], 'learning_rate': [[1, 0.001], [2, 0.0005]]}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from reward.data.files import atomic_write_json
from reward.eval.plots import new_figure, save_figure

CURVE = "train_curve"
SERIES = ("loss", "learning_rate")


def curve_series(log_history: Iterable[Mapping[str, Any]]) -> dict[str, list[list[float]]]:
    """``[step, value]`` of each logged training loss and learning rate (the run's closing summary left out)."""
    series: dict[str, list[list[float]]] = {name: [] for name in SERIES}
    for entry in log_history:
        if "step" not in entry:
            continue
        for name in SERIES:
            value = entry.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                series[name].append([int(entry["step"]), float(value)])
    return series


def write_train_curve(log_history: Iterable[Mapping[str, Any]], out: str | Path) -> dict[str, str]:
    """Write ``OUT/train_curve.png`` (loss on the left axis, learning rate on the right) and its series as
    ``OUT/train_curve.json``; returns both paths."""
    out = Path(out)
    series = curve_series(log_history)
    fig, ax = new_figure((5.5, 3.4))
    loss, lr = series["loss"], series["learning_rate"]
    ax.plot([s for s, _ in loss], [v for _, v in loss], "o-", ms=2.5, lw=1.2, color="tab:blue", label="loss")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss", color="tab:blue")
    right = ax.twinx()
    right.plot([s for s, _ in lr], [v for _, v in lr], "-", lw=1, color="tab:orange", label="learning rate")
    right.set_ylabel("learning rate", color="tab:orange")
    right.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    ax.set_title(f"training loss and learning rate ({len(loss)} logged steps)", fontsize=9)
    fig.tight_layout()
    png = save_figure(fig, out / f"{CURVE}.png")
    data = atomic_write_json(out / f"{CURVE}.json", series)
    return {"png": str(png), "json": str(data)}
