"""Human-readable output of a fusion fit: text tables (for the log) and a bar chart of the weights.

>>> from fusion.uncertainty import ComparisonRow
>>> print(format_comparison_table([ComparisonRow("bradley-terry", 0.75, -0.5123, 40)]))
fusion         held-out acc  held-out LL/pair
-------------  ------------  ----------------
bradley-terry         0.750           -0.5123
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fusion.uncertainty import ComparisonRow
from reward.core.summary import text_table
from reward.rewards.fusion_weights import FusionWeights


def format_weights_table(weights: FusionWeights) -> str:
    """One line per dimension: weight, share (``w / sum(w)``, what ``reward=sa-iqa`` fuses with), bootstrap interval.

    >>> print(format_weights_table(FusionWeights(("layout", "lighting"), (0.6, 0.2), (0.4, 0.0), (1.1, 0.5))))
    dimension  weight  share  ci_low  ci_high
    ---------  ------  -----  ------  -------
    layout     0.6000  0.750  0.4000   1.1000
    lighting   0.2000  0.250  0.0000   0.5000
    """
    total, ci = sum(weights.weights), weights.ci_low is not None and weights.ci_high is not None
    header = ["dimension", "weight", "share"] + (["ci_low", "ci_high"] if ci else [])
    rows = [
        [name, f"{w:.4f}", f"{w / total:.3f}" if total > 0 else "n/a"]
        + ([f"{weights.ci_low[j]:.4f}", f"{weights.ci_high[j]:.4f}"] if ci else [])
        for j, (name, w) in enumerate(zip(weights.dimensions, weights.weights, strict=True))
    ]
    return text_table(header, rows, [False] + [True] * (len(header) - 1))


def format_comparison_table(rows: Sequence[ComparisonRow]) -> str:
    cells = [[r.name, f"{r.accuracy:.3f}", f"{r.log_likelihood:.4f}"] for r in rows]
    return text_table(["fusion", "held-out acc", "held-out LL/pair"], cells, [False, True, True])


def plot_weights(weights: FusionWeights, path: str | Path, title: str = "Bradley–Terry fusion weights") -> Path:
    """Bar chart of the weights, their intervals as error bars, saved as PNG (atomically)."""
    from reward.eval.plots import new_figure, save_figure

    d = len(weights.dimensions)
    fig, ax = new_figure((max(4.0, 1.0 + 1.1 * d), 3.6), dpi=100)
    yerr = None
    if weights.ci_low is not None and weights.ci_high is not None:
        yerr = [
            [max(w - lo, 0.0) for w, lo in zip(weights.weights, weights.ci_low, strict=True)],
            [max(hi - w, 0.0) for w, hi in zip(weights.weights, weights.ci_high, strict=True)],
        ]
        level = weights.meta.get("ci_level")
        title += f" ({level:.0%} bootstrap CI)" if isinstance(level, float) else " (bootstrap CI)"
    ax.bar(range(d), weights.weights, yerr=yerr, capsize=5, color="#4c72b0", ecolor="#222222")
    ax.axhline(0.0, color="#555555", linewidth=0.8)
    ax.set_xticks(range(d), weights.dimensions, rotation=20 if d > 5 else 0)
    ax.set_ylabel("weight w")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)
