"""Pictures of RL runs: reward curves (training and held-out in one plot), sample grids, Best-of-N contact sheets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from reward.data.files import atomic_write_with, read_records
from reward.eval.plots import new_figure, save_figure


def reward_curves(
    train: Mapping[str, Sequence[tuple[int, float, float]]],
    heldout: Mapping[str, Sequence[tuple[int, float]]],
    path: str | Path,
    *,
    title: str = "GRPO rewards",
) -> Path:
    """Training rewards per step (mean with a +-std band) and held-out rewards every K steps, one plot."""
    fig, ax = new_figure((6.4, 3.8))
    for name, points in train.items():
        if points:
            steps, mean, std = (np.asarray(v, dtype=float) for v in zip(*points, strict=True))
            (line,) = ax.plot(steps, mean, lw=1.4, label=f"train {name}")
            ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.15, lw=0)
    for name, points in heldout.items():
        if points:
            steps, value = (np.asarray(v, dtype=float) for v in zip(*points, strict=True))
            ax.plot(steps, value, "o--", ms=3.5, lw=1.1, label=f"held-out {name}")
    ax.set(xlabel="step", ylabel="reward (normalised: 1 = best)")
    ax.set_title(title, fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    else:  # a run that ended before its first logged step: say so rather than draw empty axes
        ax.text(0.5, 0.5, "no rewards logged", transform=ax.transAxes, ha="center", va="center", color="0.4")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path)


def image_grid(
    rows: Sequence[Sequence[tuple[Image.Image, Sequence[str]]]],
    path: str | Path,
    *,
    tile: int = 128,
    row_titles: Sequence[str] | None = None,
) -> Path:
    """A grid of images with text lines printed under each (e.g. scores), one row per sequence."""
    width, line_h = max(tile, 96), 11
    tiles = []
    for row in rows:
        tiles.append([])
        for image, lines in row:
            image = image.convert("RGB").resize((tile, round(tile * image.height / image.width)))
            cell = Image.new("RGB", (width, image.height + line_h * len(lines) + 4), "white")
            cell.paste(image, ((width - image.width) // 2, 0))
            for k, text in enumerate(lines):
                ImageDraw.Draw(cell).text(
                    (2, image.height + 2 + k * line_h), text[: max(4, width // 6)], fill=(0, 0, 0)
                )
            tiles[-1].append(cell)
    title_h = 14 if row_titles else 0
    row_h = [max(t.height for t in r) + title_h if r else title_h for r in tiles]
    sheet = Image.new("RGB", (max(1, max(len(r) for r in tiles)) * (width + 4), sum(row_h) + 4), "white")
    draw = ImageDraw.Draw(sheet)
    y = 2
    for i, r in enumerate(tiles):
        if row_titles:
            draw.text((4, y), row_titles[i], fill=(0, 0, 120))
        for j, t in enumerate(r):
            sheet.paste(t, (2 + j * (width + 4), y + title_h))
        y += row_h[i]
    return atomic_write_with(path, lambda tmp: sheet.save(tmp, format="PNG"))


def draw_run_plots(out: Path, curve: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, str]:
    """A GRPO run's pictures: ``reward_curve.png`` (training and held-out) and ``samples_first_last.png``."""
    labels = sorted({k for row in history for k in row if k not in ("step", "counts", "example")})
    heldout = {k: [(r["step"], r[k]) for r in history if r.get(k) is not None] for k in labels}
    plots = {"reward_curve": str(reward_curves(curve, heldout, out / "reward_curve.png"))}
    if rows := read_records(out / "samples" / "samples.jsonl"):
        steps = [min(r["step"] for r in rows), max(r["step"] for r in rows)]
        grid = [
            [
                (
                    Image.open(r["path"]),
                    [f"reward {r['reward']:.3f}" if r["reward"] is not None else "failed", r["prompt"][:40]],
                )
                for r in rows
                if r["step"] == step and Path(r["path"]).is_file()
            ]
            for step in steps
        ]
        path = image_grid(grid, out / "samples_first_last.png", row_titles=[f"step {s}" for s in steps])
        plots["samples"] = str(path)
    return plots
