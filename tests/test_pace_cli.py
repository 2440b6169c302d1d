"""PACE's entry points end to end on the tiny VLM: pace_judge/judge.py and reward/evaluate.py reward=pace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import initialize_config_dir
from PIL import Image
from run_state import mark_incomplete

from pace_judge.commands.calibrate import CalibrateSettings
from pace_judge.commands.judge import JudgeSettings
from pace_judge.commands.judge import run as run_judge
from pace_judge.commands.memory import MemorySettings
from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.core.cli import compose
from reward.core.config import parse
from reward.core.errors import UserError
from reward.core.outputs import RunComplete

ROOT = Path(__file__).resolve().parents[1]


def _images(folder: Path, n: int = 5) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    paths = []
    for i in range(n):
        arr = (rng.random((48 + 8 * i, 64, 3)) * 40 * (i + 1)).clip(0, 255).astype(np.uint8)
        paths.append(folder / f"img{i}.png")
        Image.fromarray(arr).save(paths[-1])
    return paths


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
def test_judge_script_writes_the_scores_the_reward_gives(tmp_path, tiny_vlm_path, pace_protocol_path):
    from reward import get_reward

    paths = _images(tmp_path / "imgs")
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "pace_judge/judge.py",
        f"protocol={pace_protocol_path}",
        f"images={tmp_path / 'imgs'}",
        f"out={out}",
        f"model={tiny_vlm_path}",
        "images_per_call=2",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert [r["image"] for r in rows] == [p.name for p in paths]
    assert {"score", "alpha1", "alpha2", "probes", "sub_dimensions", "ranks"} <= set(rows[0])
    assert "img0.png" in proc.stdout and "alpha1" in proc.stdout  # the table
    reward = get_reward("pace", {"model": str(tiny_vlm_path), "protocol": str(pace_protocol_path)})
    direct = reward.score([Image.open(p).convert("RGB") for p in paths]).scores
    assert [r["score"] for r in rows] == pytest.approx(direct.tolist(), abs=1e-4)  # batched 2 by 2 vs all 5


@pytest.mark.slow
def test_evaluate_with_reward_pace_gives_metrics_and_the_bias_zone_plot(tmp_path, tiny_vlm_path, pace_protocol_path):
    paths = _images(tmp_path / "data" / "img", n=6)
    rows = [{"image": f"img/{p.name}", "dimension": "sharpness", "mos": 1.0 + 0.8 * i} for i, p in enumerate(paths)]
    manifest = tmp_path / "data" / "ratings.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = [
        "reward=pace",
        f"reward.model={tiny_vlm_path}",
        f"reward.protocol={pace_protocol_path}",
        f"data={manifest}",
        f"out={tmp_path / 'out'}",
    ]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        metrics = run_evaluate(
            parse(EvaluateSettings, compose("evaluate", overrides=overrides, schema=EvaluateSettings))
        )
    assert metrics["sharpness"]["n"] == 6 and "hor" in metrics["sharpness"]
    assert (tmp_path / "out" / "scatter_sharpness.png").stat().st_size > 1000
    scores = [json.loads(line)["score"] for line in (tmp_path / "out" / "scores.jsonl").read_text().splitlines()]
    assert all(1.4 <= s <= 4.6 for s in scores)  # clamped to the anchors' range


def test_judge_reports_user_errors_without_a_traceback(tmp_path, tiny_vlm_path, pace_protocol_path):
    (tmp_path / "empty").mkdir()
    base = {"out": str(tmp_path / "o"), "model": str(tiny_vlm_path), "protocol": str(pace_protocol_path)}
    with pytest.raises(UserError, match="holds no image files"):
        run_judge(parse(JudgeSettings, {**base, "images": str(tmp_path / "empty")}))
    _images(tmp_path / "imgs", n=1)
    (tmp_path / "imgs" / "broken.png").write_bytes(b"not a png")
    with pytest.raises(UserError, match=r"broken.png: .*skip_bad=true"):
        run_judge(parse(JudgeSettings, {**base, "images": str(tmp_path / "imgs")}))
    assert not (tmp_path / "o").exists()  # failed before its first score: no folder left to refuse the rerun
    rows = run_judge(parse(JudgeSettings, {**base, "images": str(tmp_path / "imgs"), "skip_bad": True}))
    assert [r["image"] for r in rows] == ["img0.png"]
    with pytest.raises(UserError, match="protocol file .* does not exist"):
        run_judge(
            parse(JudgeSettings, {**base, "images": str(tmp_path / "imgs"), "protocol": str(tmp_path / "nope.json")})
        )


def test_hidden_files_are_neither_judged_nor_inputs_and_an_out_inside_the_folder_is_none(
    tmp_path, tiny_vlm_path, pace_protocol_path
):
    folder = tmp_path / "imgs"
    _images(folder, n=2)
    (folder / ".hidden.png").write_bytes((folder / "img0.png").read_bytes())
    out = folder / "judged"  # the run's own output folder, inside the folder it judges
    settings = {
        "protocol": str(pace_protocol_path),
        "images": str(folder),
        "out": str(out),
        "model": str(tiny_vlm_path),
    }
    assert [r["image"] for r in run_judge(parse(JudgeSettings, settings))] == ["img0.png", "img1.png"]
    (folder / ".hidden.png").write_bytes((folder / "img1.png").read_bytes())  # neither read nor fingerprinted
    with pytest.raises(RunComplete, match="already complete"):
        run_judge(parse(JudgeSettings, settings))
    mark_incomplete(out)  # as a crashed run leaves it: its own scores are no new input
    assert [r["image"] for r in run_judge(parse(JudgeSettings, {**settings, "resume": "auto"}))] == [
        "img0.png",
        "img1.png",
    ]


@pytest.mark.slow
def test_judge_resume_continues_a_run_but_never_mixes_scales(tmp_path, tiny_vlm_path, pace_protocol_path):
    from pace_judge.commands import memory as memory_command
    from pace_judge.commands.calibrate import run as run_calibrate

    bank = tmp_path / "mem"
    memory_command.run(
        parse(MemorySettings, {"cmd": "import", "memory": str(bank), "protocol": str(pace_protocol_path)})
    )
    _images(tmp_path / "imgs", n=4)
    settings = {
        "dimension": "sharpness",
        "memory": str(bank),
        "images": str(tmp_path / "imgs"),
        "out": str(tmp_path / "out"),
        "model": str(tiny_vlm_path),
        "images_per_call": 2,
    }
    full = run_judge(parse(JudgeSettings, settings))
    scores = tmp_path / "out" / "scores.jsonl"
    lines = scores.read_text().splitlines()
    with pytest.raises(RunComplete, match="already complete"):
        run_judge(parse(JudgeSettings, settings))
    mark_incomplete(tmp_path / "out")  # as a crashed run leaves it
    with pytest.raises(ValueError, match="holds this same run already; pass resume=auto"):
        run_judge(parse(JudgeSettings, settings))
    scores.write_text("\n".join(lines[:2]) + "\n" + lines[2][:30])  # a crash after two images, a torn line
    with pytest.raises(ValueError, match=r"holds another run \(1 difference\(s\)\):\n  - lettering: 'best-first'"):
        run_judge(
            parse(JudgeSettings, {**settings, "resume": True, "lettering": "reversed"})
        )  # a key that changes the scores
    resumed = run_judge(
        parse(JudgeSettings, {**settings, "resume": True, "images_per_call": 3, "batch_size": 5})
    )  # keys that may change
    assert [r["image"] for r in resumed] == [r["image"] for r in full]
    assert [r["score"] for r in resumed] == pytest.approx([r["score"] for r in full], abs=1e-6)
    assert len(scores.read_text().splitlines()) == 4

    scores.write_text("\n".join(lines[:2]) + "\n")
    mark_incomplete(tmp_path / "out")  # a crash after two images
    calib = tmp_path / "calib"
    (calib / "img").mkdir(parents=True)
    rows = []
    for i, mos in enumerate([2.0, 3.9]):
        Image.fromarray(np.full((40, 40, 3), 90 * i, np.uint8)).save(calib / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "sharpness", "mos": mos})
    (calib / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    stored = bank / "sharpness" / "protocol.json"
    run_calibrate(
        parse(CalibrateSettings, {"protocol": str(stored), "benchmark": str(calib / "m.jsonl"), "memory": str(bank)})
    )
    # the bank's protocol was recalibrated: the run's input changed by content, so the folder is another run's
    with pytest.raises(ValueError, match=r"holds another run \(\d difference\(s\)\):\n  - inputs\.memory\."):
        run_judge(parse(JudgeSettings, {**settings, "resume": True}))
    assert len(scores.read_text().splitlines()) == 2  # nothing on the new scale was appended
