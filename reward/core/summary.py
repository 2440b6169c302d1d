"""The last lines every command prints (what it did in a few facts, and where its files are), and text tables.

Example:
    >>> print(log_summary("evaluate", {"rows": 8, "skipped": 0, "SRCC": 0.41234}, {"metrics": "out/m", "x": None}))
    done: evaluate -- rows 8, skipped 0, SRCC 0.412
      metrics: out/m
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger("reward.summary")


def log_summary(title: str, facts: Mapping[str, Any], files: Mapping[str, str | Path | None]) -> str:
    """Log ``done: TITLE -- key value, ...`` and one ``  name: path`` line per file given (``None`` ones left out)."""

    def fact(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) >= 1000 or v == int(v) else f"{v:.3f}"
        return str(v)

    shown = [f"{k} {fact(v)}" for k, v in facts.items() if v is not None]
    head = f"done: {title}" + (" -- " + ", ".join(shown) if shown else "")
    text = "\n".join([head, *(f"  {name}: {path}" for name, path in files.items() if path is not None)])
    logger.info("%s", text)
    return text


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """A fixed-width table: the header, a rule, one line per row; columns flagged in ``right`` right-aligned.

    >>> print(text_table(["pick", "mean"], [["chosen", "0.612"], ["random", "0.43"]], [False, True]))
    pick     mean
    ------  -----
    chosen  0.612
    random   0.43
    """
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = [header, ["-" * w for w in widths], *rows]
    return "\n".join(
        "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)).rstrip()
        for cells in lines
    )
