"""Datasets by name end to end on the tiny VLM: SFT trained on KonIQ-10k and tested on SPAQ (the scale flows into the
rating words and metrics.json), evaluate on a 0-100 dataset (HOR on that scale), and the cross-dataset A3
leaderboard in one command (SPAQ, KADID-10k, LIVE Challenge, AGIQA-3K and an A3 JSON as released)."""

from __future__ import annotations

import json
from pathlib import Path

import iqa_fixtures as fx
import numpy as np
import pytest
from hydra import initialize_config_dir

from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.commands.qbench_eval import QbenchEvalSettings
from reward.commands.qbench_eval import run as run_qbench
from reward.core.cli import compose
from reward.core.config import parse
from reward.eval.metrics import hor
from training.commands.sft import SftSettings
from training.commands.sft import run as run_sft

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SCHEMAS = {"sft": SftSettings, "evaluate": EvaluateSettings, "qbench_eval": QbenchEvalSettings}
pytestmark = pytest.mark.slow


def _cfg(name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(name, overrides=overrides, schema=SCHEMAS[name])


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("datasets")
    writers = {"koniq10k": fx.koniq_sets, "spaq": fx.spaq, "kadid10k": fx.kadid, "livec": fx.livec}
    writers["agiqa3k"] = fx.agiqa3k
    out = {}
    for name, write in writers.items():
        out[name] = root / name
        out[name].mkdir()
        write(out[name])
    return out


def test_sft_on_koniq_tested_on_spaq_takes_each_scale_from_its_dataset(tiny_vlm_path, folders, tmp_path):
    out = tmp_path / "run"
    overrides = [
        f"model.path={tiny_vlm_path}",
        f"data.train=koniq10k:{folders['koniq10k']}",  # train split: the set column's 7 training images
        f"data.test=spaq:{folders['spaq']}",  # test split: SPAQ's seeded test images, MOS 0-100
        "data.soft_targets=true",  # from KonIQ's c1..c5
        f"out={out}",
        "trainer.max_steps=2",
        "trainer.per_device_train_batch_size=4",
        "trainer.gradient_accumulation_steps=1",
        "prompt.type=1",
        "prompt.dimensions=[quality]",
        "eval_batch_size=8",
    ]
    result = run_sft(parse(SftSettings, _cfg("sft", overrides)))
    train = result["data_train"]
    assert (train["dataset"], train["split"], train["images"]) == ("koniq10k", "train", 7)
    assert train["split_rule"].startswith("official") and train["scale"] == [1.0, 5.0]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["meta"]["data"]["dataset"] == "spaq" and metrics["meta"]["data"]["split"] == "test"
    quality = metrics["quality"]
    assert quality["n"] == 2 and quality["mos_range"] == [0.0, 100.0] and quality["hor_thresholds"] == [50.0, 75.0]
    assert metrics["skipped"] == 10  # SPAQ's five attributes of the 2 test images: the scorer rates quality only


def test_evaluate_a_0_to_100_dataset_maps_hor_onto_its_scale(tiny_vlm_path, folders, tmp_path):
    out = tmp_path / "eval"
    metrics = run_evaluate(
        parse(
            EvaluateSettings,
            _cfg("evaluate", [f"reward.model={tiny_vlm_path}", f"data=spaq:{folders['spaq']}", f"out={out}"]),
        )
    )
    written = json.loads((out / "metrics.json").read_text())
    assert written["meta"]["data"]["split"] == "all" and written["meta"]["data"]["seed"] == 0
    scores = {r["image"]: r["score"] for r in map(json.loads, (out / "scores.jsonl").read_text().splitlines())}
    assert sorted(scores) == [f"TestImage/{i:05d}.jpg" for i in range(1, 11)]  # relative to the dataset folder
    mos = [5.0 + 9 * i for i in range(1, 11)]
    pred = [scores[f"TestImage/{i:05d}.jpg"] for i in range(1, 11)]
    expected = hor(pred, mos, tau_low=50.0, tau_high=75.0, pred_range=(0.0, 1.0), mos_range=(0.0, 100.0))
    assert metrics["quality"]["hor"] == pytest.approx(expected) and metrics["quality"]["n"] == 10
    assert written["brightness"]["mos_range"] == [0.0, 100.0]  # every SPAQ dimension on its 0-100 scale
    mine = run_evaluate(
        parse(
            EvaluateSettings,
            _cfg(
                "evaluate",
                [
                    f"reward.model={tiny_vlm_path}",
                    f"data=spaq:{folders['spaq']}",
                    f"out={tmp_path / 'e2'}",
                    "mos_range=[0,200]",
                ],
            ),
        )
    )
    assert mine["quality"]["mos_range"] == [0.0, 200.0] and mine["quality"]["hor_thresholds"] == [100.0, 150.0]


def test_cross_dataset_a3_leaderboard_in_one_command(tiny_vlm_path, folders, tmp_path):
    koniq = folders["koniq10k"]  # Q-Bench's koniq.json as released: bare names, gt_score strings on 1-5
    rows = [{"img_path": f"{1000 + i}.jpg", "gt_score": f"{1.5 + 0.3 * i:.2f} "} for i in range(10)]
    (koniq / "koniq.json").write_text(json.dumps(rows, indent=1))
    data = [
        f"spaq:{folders['spaq']}",
        f"kadid10k:{folders['kadid10k']}",
        f"livec:{folders['livec']}",
        f"agiqa3k:{folders['agiqa3k']}",
        str(koniq / "koniq.json"),
    ]
    overrides = ["task=a3", f"model.path={tiny_vlm_path}", f"data=[{','.join(data)}]", f"out={tmp_path / 'a3'}"]
    result = run_qbench(parse(QbenchEvalSettings, _cfg("qbench_eval", overrides)))
    table = result["datasets"]
    assert list(table) == ["spaq", "kadid10k", "livec", "agiqa3k", "koniq"]
    counts = {name: table[name]["score"]["n"] for name in table}
    assert counts == {"spaq": 10, "kadid10k": 12, "livec": 8, "agiqa3k": 12, "koniq": 10}  # the MOS only
    assert all(-1 <= table[n]["score"]["srcc"] <= 1 for n in table)
    assert np.isfinite(result["mean"]["score"]["srcc"])
