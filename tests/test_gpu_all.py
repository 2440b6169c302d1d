"""bench/gpu_all.sh, the one GPU run: its CPU dry run writes one table with every stage's rows, and an RL
check that is missing, fails or hangs becomes a row of that table instead of ending the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # the scripts import each other as python bench/NAME.py does

FAKE_RL = """#!/usr/bin/env bash
# stands in for bench/rl_gpu_check.sh (another helper's): prints what the real one prints
echo "RESULT sd15-inpaint auto cpu torch.float32 alone-vs-batched max diff 0.0 s 0.5"
echo "best-of-4: 3 wins"
echo "12:00:01 INFO bench: rl grpo served reward | steps done | 2 of 2"
echo "args: $*"
"""


def _rows(out: Path) -> dict[tuple[str, str], str]:
    return {(s, m): v for s, m, v in json.loads((out / "table.json").read_text())["rows"]}


@pytest.mark.slow
def test_gpu_all_dry_run_writes_one_table_with_every_stage(tmp_path):
    fake = tmp_path / "rl_check.sh"
    fake.write_text(FAKE_RL)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "RL_CHECK": str(fake)}
    env.pop("OUT", None)
    cmd = ["bash", str(ROOT / "bench/gpu_all.sh"), "--dry-run", "--out", str(out), "--budget-s", "1500"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["photos.log", "real_photos_curve.png", "rl.log", "scoring.log", "table.json", "table.md"]
    rows = _rows(out)
    assert not [k for k in rows if k[1] in ("FAILED", "no table")], rows
    # stage 1: the profile before and after, the unoptimised and fast paths, their agreement
    for part in ("image processor", "vision tower", "language model", "answer head"):
        assert ("profile before (unoptimised, batch 16)", f"{part} (s, share)") in rows
    assert ("images/s", "unoptimised path, batch 16 (H200 before: 29.9)") in rows
    assert ("images/s", "achieved TFLOP/s at the best batch") in rows
    assert ("prefix reuse, fast path", "4 dims x 4 images: plain / reuse time (H200 before: 2.34x)") in rows
    fp32 = rows[("agreement fp32", "max |score diff| fast vs unoptimised, same image processor (1-5)")]
    assert float(fp32) < 1e-4
    assert float(rows[("agreement fp32", "max |score diff| prefix reuse vs plain (1-5)")]) < 1e-4
    # stage 2: the RL check's lines, called with --dry-run
    assert rows[("rl check", "exit status (seconds)")].startswith("0 ")
    assert rows[("rl check", "sd15-inpaint auto")].startswith("cpu torch.float32")
    assert rows[("rl grpo served reward", "steps done")] == "2 of 2"  # a row the check logged, kept
    assert "--dry-run" in (out / "rl.log").read_text()
    # stage 3: held-out SRCC per type beside BRISQUE, the curve, the scorer reloaded on the CPU
    types = ("overall", "blur", "noise", "jpeg", "pixelate", "brighten", "darken")
    for kind in types:
        assert ("real photos", f"SRCC {kind}: VLM / BRISQUE") in rows
    reloaded, in_run = rows[("real photos", "reloaded on CPU (reward=sa-iqa): SRCC / in the run")].split(" / ")
    assert abs(float(reloaded) - float(in_run)) < 1e-3
    assert rows[("real photos", "curve: step -> overall SRCC")].count(":") >= 2
    for stage in ("scoring", "rl", "photos"):
        assert rows[("run", f"stage {stage}: exit status (seconds)")].startswith("0 ")
    assert "| real photos | SRCC blur: VLM / BRISQUE |" in (out / "table.md").read_text()
    assert "| images/s | best batch size |" in proc.stdout  # the table printed too


def test_a_missing_failing_or_hanging_rl_check_is_a_row(tmp_path, monkeypatch):
    from gpu_all import main

    monkeypatch.setenv("RL_CHECK", str(tmp_path / "nowhere.sh"))
    main(["--out", str(tmp_path / "a"), "--skip", "scoring,photos"])
    assert _rows(tmp_path / "a")[("rl check", "missing")].endswith(
        "not found (another helper's; run it when it lands)"
    )

    failing = tmp_path / "failing.sh"
    failing.write_text("echo starting\necho 'Traceback: ImportError: no diffusers'\nexit 3\n")
    monkeypatch.setenv("RL_CHECK", str(failing))
    main(["--out", str(tmp_path / "b"), "--skip", "scoring,photos"])
    rows = _rows(tmp_path / "b")
    assert rows[("rl check", "exit status (seconds)")].startswith("3 ")
    assert "no diffusers" in rows[("rl check", "last lines")]
    assert rows[("run", "stage rl: exit status (seconds)")].startswith("3 ")

    hanging = tmp_path / "hanging.sh"
    hanging.write_text("echo working\nsleep 600\n")
    monkeypatch.setenv("RL_CHECK", str(hanging))
    main(["--out", str(tmp_path / "c"), "--skip", "scoring,photos", "--budget-s", "2"])  # the stage's 2 s, then killed
    assert _rows(tmp_path / "c")[("rl check", "exit status (seconds)")].startswith("timed out")


def test_the_stages_after_one_keep_their_planned_time_and_a_skipped_stage_keeps_none():
    """On the H200 the RL check's first two sections alone took 102 s while scoring had reserved it 100 s and a
    skipped photo stage 80 s: each later stage that runs keeps its planned time, a skipped one nothing."""
    from types import SimpleNamespace

    from gpu_all import Run

    def reserved(skip: set[str], after: str) -> float:
        return Run(SimpleNamespace(dry_run=True), Path("."), Path("."), 0.0, skip).reserved(after)

    default = {"families"}  # named with --stages only
    assert reserved(default, "scoring") == 240 + 80
    assert reserved(default | {"photos"}, "scoring") == 240
    assert reserved(default | {"rl", "photos"}, "scoring") == 0
    assert reserved(default | {"rl"}, "scoring") == 80
    assert reserved(default, "rl") == 80
    assert reserved(set(), "rl") == 300 + 80  # every stage
    assert reserved(set(), "photos") == 0


@pytest.mark.slow
def test_the_families_stage_scores_each_backbone_and_trains_the_scorer_two_grpo_steps(tmp_path):
    """``--stages families``, dry: Qwen3.5 and Ovis2 loaded as ``reward=`` loads them, finite scores that differ
    between images, prefix reuse agreeing with plain scoring, two GRPO steps on the scorer writing its adapter."""
    from gpu_all import main

    main(["--dry-run", "--stages", "families", "--out", str(tmp_path / "out")])
    rows = _rows(tmp_path / "out")
    assert not [k for k in rows if k[1] in ("FAILED", "no table")], rows
    for family in ("qwen3_5", "ovis2"):
        finite, spread = rows[(family, "scores finite / spread over 8 images (1-5)")].split(" / ")
        assert finite == "True" and float(spread) > 0
        assert float(rows[(family, "prefix reuse: max |score diff| vs plain (1-5, bf16)")]) < 0.05
    grpo = "qwen3_5 GRPO scorer (LoRA)"
    assert rows[(grpo, "steps done / train seconds")].startswith("2 / ") and rows[(grpo, "adapter written")] == "True"
    assert rows[("run", "stage families: exit status (seconds)")].startswith("0 ")
    assert [s for s, _ in rows if s.startswith("run")] and ("run", "stage scoring: exit status (seconds)") not in rows
