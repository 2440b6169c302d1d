"""`make demo`'s entry point runs end to end (shortened) and writes its report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_demo_writes_a_report_with_every_section(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "demo.py"),
            f"out={out}",
            "sft.steps=4",
            "sft.test_scenes=10",
            "bon.tasks=4",
            "grpo.steps=3",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=900,
    )
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
    assert (out / "fusion" / "fusion_weights.json").exists() and (out / "fusion" / "fusion_weights.png").exists()
    assert "dimension" in proc.stdout  # the score table is printed
    assert (out / "best_of_n" / "summary.json").exists() and (out / "best_of_n" / "sheets" / "0000.png").exists()
    assert (out / "grpo" / "reward_curve.png").exists() and (out / "grpo" / "samples_first_last.png").exists()
