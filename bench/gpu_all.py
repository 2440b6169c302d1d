"""The one GPU run in one go: scoring speed, the RL GPU check and real distortions learned, one table.

    bash bench/gpu_all.sh --out DIR            # one H200, at most --budget-s (540 s = 9 min) in all
    bash bench/gpu_all.sh --dry-run --out DIR  # the same stages on tiny configs on the CPU (a test runs it)
    bash bench/gpu_all.sh --skip rl,photos     # default stages: scoring, rl, photos
    bash bench/gpu_all.sh --stages families    # the real-size backbones only (~5 min: a second run's stage)

Stages, one after the other, each a subprocess with its log, given a share of the time left and stopped at its
limit (the run ends within the budget whatever happens): ``scoring`` (``bench/gpu_check.py --skip lora,zero3``),
``rl`` (``bench/rl_gpu_check.sh``, or the script ``RL_CHECK`` names; missing or failing, it is a row of the table)
and ``photos`` (``bench/real_photos_gpu.py`` trained within what is left); named with ``--stages`` only,
``families`` (``bench/families_gpu_check.py``: Qwen3.5 and Ovis2 at a real size, a GRPO step on the scorer), which
with the default three does not fit one 9-minute run.

``--out`` receives at most 8 files (the device machine returns 8): ``table.md`` (the one table), ``table.json``,
``scoring.log``, ``rl.log``, ``families.log``, ``photos.log``, ``real_photos_curve.png`` and, when the RL check draws
one, ``reward_curve.png``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, arguments, markdown

STAGES = ("scoring", "rl", "families", "photos")
DEFAULT_STAGES = "scoring,rl,photos"
# seconds each stage is planned to take on one H200, as measured there on 2026-12-04 (scoring 145 s, then ~40 s more
# for the scoring loop's batch per worker; the RL check's setup and first GRPO section alone took 102 s, so its old
# 100 s stopped it there); the photo stage takes what is left
PLANNED = {"scoring": 190.0, "rl": 240.0, "families": 300.0}  # families: estimated from the CPU run, not measured
PHOTO_OVERHEAD_S = 80.0  # held-out set, BRISQUE, imports, final evaluation and the CPU reload around the training


def rl_rows(log: Path, status: int | str) -> list[list[str]]:
    """The RL check's rows as logged (``bench: SECTION | METRIC | VALUE``: a check stopped at its limit keeps the rows
    it reached), or another script's ``RESULT``, held-out and Best-of-N lines; else its last lines if it failed."""
    rows = []
    for line in log.read_text(errors="replace").splitlines():
        text = line.strip()
        if text.startswith("RESULT"):
            words = text.split()
            rows.append(["rl check", " ".join(words[1:3]), " ".join(words[3:])])
        elif text.startswith(("best-of", "held-out")):
            rows.append(["rl check", "line", text[:200]])
        elif " bench: " in text and text.count(" | ") >= 2:
            rows.append(text.split(" bench: ", 1)[1].split(" | ", 2))
    if not rows and status != 0:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-3:]
        rows.append(["rl check", "last lines", " / ".join(tail)[:300]])
    return rows


class Run:
    """The stages of one run within one budget: each given a share of the time left, its rows returned."""

    def __init__(self, args: Any, out: Path, work: Path, start: float, skip: set[str]) -> None:
        self.args, self.out, self.work, self.start, self.skip = args, out, work, start, skip
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
        if args.dry_run:
            self.env["CUDA_VISIBLE_DEVICES"] = ""
        self.dry = ["--dry-run"] if args.dry_run else []
        self.stages: dict[str, dict[str, Any]] = {}

    def left(self) -> float:
        return self.args.budget_s - (time.time() - self.start)

    def reserved(self, after: str) -> float:
        """Seconds kept for the stages after ``after`` that run, as planned (a skipped stage keeps none)."""
        later = [s for s in STAGES[STAGES.index(after) + 1 :] if s not in self.skip]
        return sum(PLANNED.get(s, PHOTO_OVERHEAD_S) for s in later)

    def floor(self, seconds: float) -> float:
        """The least a stage gets when the budget is short: ``seconds``, or a quarter of what is left."""
        return min(seconds, max(self.left() / 4, 1.0))

    def stage(self, name: str, cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> int | str:
        """Run ``cmd`` with its output in ``out/NAME.log``, stopped (with every process it started) at ``timeout``;
        its exit status or "timed out"."""
        start = time.perf_counter()
        with (self.out / f"{name}.log").open("w") as handle:
            handle.write("$ " + " ".join(cmd) + "\n")
            handle.flush()
            proc = subprocess.Popen(
                cmd, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT, env=env or self.env, start_new_session=True
            )
            try:
                status: int | str = proc.wait(timeout=max(timeout, 1.0))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
                status = "timed out"
        self.stages[name] = {"status": status, "seconds": round(time.perf_counter() - start, 1)}
        return status

    def scoring(self) -> list[list[str]]:
        work = self.work
        limit = min(PLANNED["scoring"] + 40.0, max(self.left() - self.reserved("scoring"), self.floor(60)))
        cmd = [sys.executable, "-u", str(ROOT / "bench/gpu_check.py"), *self.dry, "--skip", "lora,zero3"]
        cmd += ["--out", str(work / "scoring"), "--work", str(work / "scoring_work"), "--budget-s", str(limit - 30)]
        status = self.stage("scoring", cmd, limit)
        shutil.rmtree(work / "scoring_work", ignore_errors=True)  # the 7B checkpoint: disk for the next stages
        result = work / "scoring" / "gpu_check.json"
        return json.loads(result.read_text()) if result.is_file() else [["scoring", "no table", str(status)]]

    def rl(self) -> list[list[str]]:
        script = Path(os.environ.get("RL_CHECK", ROOT / "bench/rl_gpu_check.sh"))
        if not script.is_file():
            self.stages["rl"] = {"status": "missing", "seconds": 0.0}
            return [["rl check", "missing", f"{script} not found (another helper's; run it when it lands)"]]
        limit = min(PLANNED["rl"] + 30.0, max(self.left() - self.reserved("rl"), self.floor(30)))
        env = {**self.env, "OUT": str(self.work / "rl")}
        if self.args.dry_run:
            env["DRY"] = "1"  # the script's own switch: no wheel installation, CPU
        # the check starts no section past its own budget, so a short stage ends with the rows it reached
        cmd = ["bash", str(script), *self.dry, "--budget-s", f"{max(limit - 60.0, 10.0):.0f}"]
        status = self.stage("rl", cmd, limit, env)
        rows = [["rl check", "exit status (seconds)", f"{status} ({self.stages['rl']['seconds']:.0f})"]]
        if (self.work / "rl" / "reward_curve.png").is_file():
            shutil.copy(self.work / "rl" / "reward_curve.png", self.out / "reward_curve.png")
        return rows + rl_rows(self.out / "rl.log", status)

    def families(self) -> list[list[str]]:
        limit = min(PLANNED["families"] + 40.0, max(self.left() - self.reserved("families"), self.floor(60)))
        work = self.work
        cmd = [sys.executable, "-u", str(ROOT / "bench/families_gpu_check.py"), *self.dry]
        cmd += ["--budget-s", str(limit - 60), "--out", str(work / "families"), "--work", str(work / "families_work")]
        status = self.stage("families", cmd, limit)
        shutil.rmtree(work / "families_work", ignore_errors=True)  # the real-size checkpoints
        result = work / "families" / "families_gpu_check.json"
        return json.loads(result.read_text()) if result.is_file() else [["families", "no table", str(status)]]

    def photos(self) -> list[list[str]]:
        work = self.work
        limit = max(self.left() - 15.0, self.floor(60))
        train_s = max(limit - PHOTO_OVERHEAD_S, 20.0)
        cmd = [sys.executable, "-u", str(ROOT / "bench/real_photos_gpu.py"), *self.dry, "--out", str(work / "photos")]
        cmd += ["--budget-s", f"{train_s:.0f}", "--work", str(work / "photos_work")]
        status = self.stage("photos", cmd, limit)
        result = work / "photos" / "real_photos.json"
        if not result.is_file():
            return [["real photos", "no table", str(status)]]
        shutil.copy(work / "photos" / "real_photos_curve.png", self.out / "real_photos_curve.png")
        return [list(r) for r in json.loads(result.read_text())["rows"]]


def main(argv: list[str] | None = None) -> int:
    args = arguments(
        __doc__,
        argv,
        gpu=True,
        stages={"default": DEFAULT_STAGES, "help": f"comma-separated stages to run, of {','.join(STAGES)}"},
        skip={"default": "", "help": "comma-separated stages not to run"},
        budget_s={"type": float, "default": 540.0, "help": "the whole run, wheel installation included"},
        started={"type": float, "help": "epoch seconds the run started (gpu_all.sh)"},
    )
    start = args.started or time.time()
    named = {s.strip() for s in f"{args.stages},{args.skip}".split(",") if s.strip()}
    if named - set(STAGES):
        sys.exit(f"--stages/--skip {sorted(named - set(STAGES))}: the stages are {', '.join(STAGES)}")
    skip = set(STAGES) - {s.strip() for s in args.stages.split(",")} | {s.strip() for s in args.skip.split(",")}
    out = Path(args.out or "gpu_all_out")
    out.mkdir(parents=True, exist_ok=True)
    rows: list[list[str]] = [["run", "mode", "dry run (CPU, tiny configs)" if args.dry_run else "GPU"]]
    with tempfile.TemporaryDirectory(prefix="gpu_all_") as tmp:
        run = Run(args, out, Path(tmp), start, skip)
        for name in STAGES:
            if name not in skip:
                rows += getattr(run, name)()
    total = time.time() - start
    for name, info in run.stages.items():
        rows.append(["run", f"stage {name}: exit status (seconds)", f"{info['status']} ({info['seconds']:.0f})"])
    rows.append(["run", f"total seconds (budget {args.budget_s:.0f})", f"{total:.0f}"])
    table = markdown(("section", "metric", "value"), rows)
    (out / "table.md").write_text(table + "\n")
    (out / "table.json").write_text(json.dumps({"rows": rows, "stages": run.stages, "seconds": total}, indent=1))
    print(table, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
