"""bench/gpu_check.sh's CPU dry run: the GPU check runs end to end on a tiny config and prints its whole table (the
scoring sections run in bench/gpu_all.sh's dry run, tests/test_gpu_all.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_dry_run_prints_every_row_and_no_failure(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("OUT", None)
    cmd = ["bash", str(ROOT / "bench/gpu_check.sh"), "--dry-run", "--skip", "scoring,zero3", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {(s, m): v for s, m, v in json.loads((tmp_path / "gpu_check.json").read_text())}
    assert not [k for k in rows if k[1] == "FAILED"], rows
    assert rows[("SFT LoRA (7B config)", "steps done")] == "2"
    assert rows[("SFT LoRA (7B config)", "adapter written")] == "True"
    assert "section" in proc.stdout and "adapter written" in proc.stdout  # the table on stdout


def test_a_failing_section_is_reported_and_the_others_still_run():
    sys.path.insert(0, str(ROOT / "bench"))
    from common import Table, guarded

    table = Table()
    guarded(table, "broken", lambda: 1 / 0)
    guarded(table, "fine", lambda: table.add("fine", "value", 1.5))
    rows = {(s, m): v for s, m, v in table.rows}
    assert rows[("broken", "FAILED")] == "ZeroDivisionError: division by zero"
    assert rows[("fine", "value")] == "1.5"
