"""`make demo`'s entry point runs end to end (shortened) and writes its report."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _demo(out: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "demo.py"), f"out={out}", *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=out.parent, timeout=900)


@pytest.mark.slow
def test_demo_writes_a_report_with_every_section(tmp_path):
    out = tmp_path / "demo"
    proc = _demo(out, "sft.steps=4", "sft.test_scenes=10", "bon.tasks=4", "grpo.steps=3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (out / "report.md").read_text()
    for heading in (
        "Zero-shot Q-Bench+",
        "SA-IQA fine-tuning",
        "Bradley-Terry fusion",
        "Best-of-4 reranking",
        "GRPO prompt expansion",
    ):
        assert heading in report
    assert (out / "qbench" / "metrics.json").exists() and (out / "sft" / "scorer" / "sa_iqa.json").exists()
    fusion = json.loads((out / "sections" / "fusion.json").read_text())["data"]
    written = (out / "fusion" / "fusion_weights.json").exists() and (out / "fusion" / "fusion_weights.png").exists()
    assert written or "do not separate the pairs" in fusion["refused"]  # the tiny scorer's fit: weights, or why not
    # a quiet console: one line per section and the report's path; each section's own output is in its log
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 6 and lines[-1].endswith(f"report: {out / 'report.md'}"), proc.stdout
    assert "'loss'" not in proc.stdout + proc.stderr and "Warning" not in proc.stdout + proc.stderr
    assert "dimension" in (out / "logs" / "qbench.log").read_text()  # the score table, logged
    assert "'loss'" in (out / "logs" / "sft.log").read_text()  # trl's log dicts
    # known truth: the fusion fit on the true levels recovers the weights that generated the pairs
    assert fusion["cosine"]["true_levels"] > 0.98 and (fusion["refused"] or -1 <= fusion["cosine"]["scorer"] <= 1)
    assert "fitted on true levels" in report and "generating weight" in report
    # Best-of-N judged by each candidate's true levels, for both pickers, every task counted once
    bon = json.loads((out / "sections" / "best_of_n.json").read_text())["data"]
    for picker in ("best_of_n", "best_of_n_scene_proxy"):
        assert bon[picker]["wins"] + bon[picker]["ties"] + bon[picker]["losses"] == 4
    assert report.count("What it shows") == 5 and "no claim" in report
    sheet = re.search(r"!\[contact sheet\]\((best_of_n\w*/sheets/tasks\.jsonl-\d+-\w+\.png)\)", report)
    assert (out / "best_of_n" / "summary.json").exists() and sheet and (out / sheet[1]).exists()  # named by task
    assert (out / "grpo" / "reward_curve.png").exists() and (out / "grpo" / "samples_first_last.png").exists()

    # `make demo` again: the same run, resumed; every section was finished, so each is read back and nothing moves
    first = {p.relative_to(out): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != "report.md"}
    again = _demo(out, "sft.steps=4", "sft.test_scenes=10", "bon.tasks=4", "grpo.steps=3")
    assert again.returncode == 0, again.stderr[-3000:]
    assert (again.stdout + again.stderr).count("not redone") == 5 and (out / "report.md").read_text() == report
    assert {
        p.relative_to(out): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != "report.md"
    } == first
    assert not list(tmp_path.glob("demo.old-*")) and not list(out.rglob("*.old-*"))
    # other settings in the same folder: refused before any work, naming the setting and the ways out
    other = _demo(out, "sft.steps=5", "sft.test_scenes=10", "bon.tasks=4", "grpo.steps=3")
    assert other.returncode == 2 and "Traceback" not in other.stderr
    assert "sft.steps" in other.stderr and "overwrite=true" in other.stderr, other.stdout + other.stderr
