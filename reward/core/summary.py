"""The last lines every command prints: what it did, in a few facts, and where its files are.

Example:
    >>> print(summary_text("evaluate", {"rows": 8, "skipped": 0, "SRCC": 0.41234}, {"metrics": "out/metrics.json",
    ...                    "plots": None}))
    done: evaluate -- rows 8, skipped 0, SRCC 0.412
      metrics: out/metrics.json
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["log_summary", "summary_text", "text_table"]

logger = logging.getLogger("reward.summary")


def _fact(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) >= 1000 or value == int(value) else f"{value:.3f}"
    return str(value)


def summary_text(title: str, facts: Mapping[str, Any], files: Mapping[str, str | Path | None]) -> str:
    """The summary as text: ``done: TITLE -- key value, ...`` then one ``  name: path`` line per file given
    (``None`` entries are left out, so callers can pass optional files as they are)."""
    head = f"done: {title}"
    shown = [f"{k} {_fact(v)}" for k, v in facts.items() if v is not None]
    if shown:
        head += " -- " + ", ".join(shown)
    lines = [head, *(f"  {name}: {path}" for name, path in files.items() if path is not None)]
    return "\n".join(lines)


def log_summary(title: str, facts: Mapping[str, Any], files: Mapping[str, str | Path | None]) -> str:
    """Log the command's closing summary (:func:`summary_text`) and return it."""
    text = summary_text(title, facts, files)
    logger.info("%s", text)
    return text


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None) -> str:
    """A fixed-width text table: the header, a rule, one line per row; columns flagged in ``right`` are
    right-aligned (numbers), the others left-aligned.

    >>> print(text_table(["pick", "mean"], [["chosen", "0.612"], ["random", "0.43"]], [False, True]))
    pick     mean
    ------  -----
    chosen  0.612
    random   0.43
    """
    right = list(right) if right is not None else [False] * len(header)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True))

    return "\n".join([line(header).rstrip(), line(["-" * w for w in widths]), *(line(r).rstrip() for r in rows)])
