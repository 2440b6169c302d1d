"""Test helper: the state a run's ``run.json`` records."""

from __future__ import annotations

import json
from pathlib import Path


def mark_incomplete(out: str | Path) -> None:
    """Make ``out/run.json`` read as a run that stopped before its end (as a crash leaves it)."""
    run = Path(out) / "run.json"
    identity = json.loads(run.read_text())
    identity.pop("complete", None)
    run.write_text(json.dumps(identity))
