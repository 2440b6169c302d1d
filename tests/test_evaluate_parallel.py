"""Data-parallel evaluation (accelerate launch), scores written as they come and resumed, datasets input streamed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import initialize_config_dir
from PIL import Image

from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.core.cli import compose
from reward.core.config import parse
from reward.data import DatasetImage, load_ratings
from reward.eval.evaluation import EvalSettings, evaluate_rows
from reward.rewards.base import RewardOutput

ROOT = Path(__file__).resolve().parents[1]


def _manifest(tmp: Path, n: int = 10) -> Path:
    """``n`` distinct images (different sizes and contents), each rated on two dimensions."""
    rng = np.random.default_rng(0)
    (tmp / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (56, 56 + 8 * (i % 2), 3), dtype=np.uint8)).save(tmp / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "lighting", "mos": 1 + 4 * i / (n - 1)})
        rows.append({"image": f"img/{i}.png", "dimension": "quality", "mos": 5 - 4 * ((i * 7) % n) / (n - 1)})
    path = tmp / "ratings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class CountingReward:
    """Mean brightness as the score; counts the images it is asked to score, can fail after some calls."""

    def __init__(self, fail_after_calls: int | None = None) -> None:
        self.images = 0
        self.calls = 0
        self.fail_after_calls = fail_after_calls

    def score(self, images, prompts=None) -> RewardOutput:
        if self.fail_after_calls is not None and self.calls >= self.fail_after_calls:
            raise RuntimeError("simulated crash")
        self.calls += 1
        self.images += len(images)
        return RewardOutput(scores=torch.tensor([float(np.asarray(im).mean()) for im in images]))


@pytest.mark.slow
def test_two_processes_give_the_metrics_of_one(tmp_path, tiny_vlm_path):
    data = _manifest(tmp_path / "data")
    args = ["reward=qbench", f"reward.model={tiny_vlm_path}", f"data={data}", "batch_size=3", "num_workers=1"]
    outs = {n: tmp_path / f"out{n}" for n in (1, 2)}
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        run_evaluate(
            parse(EvaluateSettings, compose("evaluate", overrides=[*args, f"out={outs[1]}"], schema=EvaluateSettings))
        )  # one process: this one
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        str(ROOT / "reward/evaluate.py"),
        *args,
        f"out={outs[2]}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    one, two = (json.loads((outs[n] / "metrics.json").read_text()) for n in (1, 2))
    assert two["meta"]["processes"] == 2 and one["meta"]["processes"] == 1
    assert two["meta"]["images_per_process"] == [5, 5]  # 10 images (20 rows): each scored once, split in two
    assert one["meta"]["images_per_process"] == [10]
    for dim in ("lighting", "quality", "overall"):
        for key in ("plcc", "srcc", "krcc"):
            assert abs(one[dim][key] - two[dim][key]) < 1e-5, (dim, key)
        assert one[dim]["n"] == two[dim]["n"]
    s1, s2 = ([json.loads(x) for x in (outs[n] / "scores.jsonl").read_text().splitlines()] for n in (1, 2))
    assert [r["image"] for r in s1] == [r["image"] for r in s2] == [f"img/{i}.png" for i in range(10)]
    diff = max(abs(a["score"] - b["score"]) for a, b in zip(s1, s2, strict=True))
    print(f"1 vs 2 processes: max |score diff| {diff:.3g}")
    assert diff < 1e-5
    assert not list(outs[2].glob("scores.rank*.jsonl"))  # the per-process files were merged into scores.jsonl


def test_scores_are_written_as_they_come_and_resume_scores_only_the_missing(tmp_path):
    data = _manifest(tmp_path / "data")
    rows = load_ratings(data, check_images=False).rows
    out = tmp_path / "out"
    settings = EvalSettings(batch_size=4, num_workers=0)
    crashing = CountingReward(fail_after_calls=2)
    with pytest.raises(RuntimeError, match="simulated crash"):
        evaluate_rows(crashing, rows, settings, score_range=(0, 255), out_dir=out)
    written = [json.loads(x)["image"] for x in (out / "scores.jsonl").read_text().splitlines()]
    assert written == [f"img/{i}.png" for i in range(8)]  # two batches of 4 reached the disk before the crash
    resumed = CountingReward()
    result = evaluate_rows(resumed, rows, settings, score_range=(0, 255), out_dir=out, resume=True)
    assert resumed.images == 2  # only the two missing images
    assert result.meta == {"processes": 1, "images_per_process": [2], "resumed": 8}
    full = evaluate_rows(CountingReward(), rows, settings, score_range=(0, 255))
    assert result.metrics == full.metrics
    fresh = CountingReward()
    evaluate_rows(fresh, rows, settings, score_range=(0, 255), out_dir=out, resume=False)
    assert fresh.images == 10  # resume=false starts over


def test_decoding_in_dataloader_workers_gives_the_same_scores_and_names_bad_rows(tmp_path):
    data = _manifest(tmp_path / "data", n=6)
    (data.parent / "img/3.png").write_bytes(b"not a png")
    rows = load_ratings(data, check_images=False).rows
    skip = EvalSettings(batch_size=2, num_workers=2, skip_bad=True)
    workers = evaluate_rows(CountingReward(), rows, skip, score_range=(0, 255))
    inline = evaluate_rows(
        CountingReward(),
        rows,
        EvalSettings(batch_size=2, num_workers=0, skip_bad=True),
        score_range=(0, 255),
    )
    assert workers.scores == inline.scores and len(workers.scores) == 5
    assert [s.line for s in workers.skipped][:1] == [7]  # image 3's first row (lines 7 and 8)
    with pytest.raises(Exception, match=r"ratings\.jsonl:7: .*skip_bad=true"):
        evaluate_rows(
            CountingReward(),
            rows,
            EvalSettings(batch_size=2, num_workers=2),
            score_range=(0, 255),
            source=str(data),
        )


def test_a_datasets_input_is_streamed_and_each_image_scored_once(tmp_path):
    import datasets

    rng = np.random.default_rng(1)
    images = [Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)) for _ in range(4)]
    table = {"image": [], "dimension": [], "mos": []}
    for i, im in enumerate(images):
        for dim in ("lighting", "quality"):
            table["image"].append(im)
            table["dimension"].append(dim)
            table["mos"].append(1.0 + i)
    ds = datasets.Dataset.from_dict(table).cast_column("image", datasets.Image())
    ds.save_to_disk(str(tmp_path / "ds"))
    rows = load_ratings(tmp_path / "ds", check_images=False).rows
    assert all(isinstance(r.image, DatasetImage) for r in rows)  # nothing decoded while reading the manifest
    reward = CountingReward()
    result = evaluate_rows(reward, rows, EvalSettings(batch_size=3, num_workers=1), score_range=(0, 255))
    assert reward.images == 4  # 8 rows, 4 distinct images
    assert result.metrics["lighting"]["n"] == result.metrics["quality"]["n"] == 4
    expected = sorted(float(np.asarray(im).mean()) for im in images)
    assert sorted(e["score"] for e in result.scores) == pytest.approx(expected, abs=1e-3)
