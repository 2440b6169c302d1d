"""Small cases that used to pass in silence or end in a traceback: Ctrl-C, string or huge fusion scores, dataset
scales and duplicated rows, a command run without arguments, the resume warning of transformers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
BLOCKING_EVALUATE = """
import sys
import torch
import reward.commands.evaluate as command
from reward.core.cli import main
from reward.rewards.base import RewardOutput

class Blocking:  # scores the first batch, then waits for the test (which sends Ctrl-C) on the second
    calls = 0
    def score(self, images, prompts=None):
        Blocking.calls += 1
        if Blocking.calls == 2:
            print("second batch", flush=True)
            sys.stdin.read()
        return RewardOutput(torch.full((len(images),), 0.5))

command.get_reward = lambda name, cfg: Blocking()
main("evaluate", command.run, argv=sys.argv[1:])
"""


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(key, None)
    return env


def _manifest(folder: Path, n: int = 4) -> Path:
    (folder / "img").mkdir(parents=True)
    rows = []
    for i in range(n):
        Image.fromarray(np.full((56, 56, 3), 50 * i, np.uint8)).save(folder / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "lighting", "mos": 1 + i})
    path = folder / "ratings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_ctrl_c_prints_one_line_saying_how_to_resume_and_exits_130(tmp_path):
    data, out = _manifest(tmp_path / "data"), tmp_path / "out"
    argv = ["reward=qbench", "reward.model=unused", f"data={data}", f"out={out}", "batch_size=2", "num_workers=0"]
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKING_EVALUATE, *argv],
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "second batch"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("interrupted:")]
    assert lines == [f"interrupted: {out} holds the run so far; run the same command with resume=true to continue it"]
    assert len((out / "scores.jsonl").read_text().splitlines()) == 2  # the first batch is kept for the resume
