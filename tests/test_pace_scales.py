"""PACE benchmark calibration on a dataset's own scale: AGIQA-3K's 0-5 MOS (a folder in the official layout, read by
name) and a manifest on 0-100 with mos_range; anchors mapped onto 1-5, the mapping recorded, the test split's
SRCC / PLCC / HOR reported on the dataset's scale (checked against a hand computation)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from iqa_fixtures import agiqa3k
from pace_doubles import write_example_protocol
from PIL import Image
from scipy import stats

from conftest import run_cli
from pace_judge.commands.calibrate import CalibrateSettings
from pace_judge.commands.calibrate import run as run_calibrate
from pace_judge.protocol import load_protocol
from reward.core.config import parse


def test_agiqa3k_on_0_to_5_calibrates_and_reports_the_test_split_on_0_to_5(tmp_path, tiny_vlm):
    from pace_judge.tracks import DualTrackScorer
    from reward.data import load_ratings

    agiqa3k(tmp_path / "agiqa", per_prompt=3)
    protocol = write_example_protocol(tmp_path / "proto", anchors=False)
    src = f"agiqa3k:{tmp_path / 'agiqa'}"
    backend = tiny_vlm
    cfg = {"protocol": str(protocol), "benchmark": f"{src}:train", "test": f"{src}:test", "dimension": "quality"}
    run_calibrate(parse(CalibrateSettings, cfg), backend=backend)

    p = load_protocol(protocol)
    train = [r for r in load_ratings(f"{src}:train", check_images=False).rows if r.dimension == "quality"]
    hi, lo = max(r.mos for r in train), min(r.mos for r in train)  # 3.2 and 0.4 on 0-5
    assert (p.anchors["high"].score, p.anchors["low"].score) == pytest.approx((1 + 4 * hi / 5, 1 + 4 * lo / 5))
    record = p.provenance["calibration"]
    assert record["mos_range"] == [0.0, 5.0] and (record["high_mos"], record["low_mos"]) == (hi, lo)
    assert record["mapping"] == "1 + 4 * (mos - 0) / (5 - 0)"

    test = [r for r in load_ratings(f"{src}:test", check_images=False).rows if r.dimension == "quality"]
    scores = DualTrackScorer(p, backend).judge([Image.open(r.image).convert("RGB") for r in test]).scores
    pred = (np.asarray(scores.tolist()) - 1.0) / 4.0 * 5.0  # back on 0-5
    mos = [r.mos for r in test]
    got = record["test"]
    assert got["scale"] == [0.0, 5.0] and got["n"] == len(test) == 3
    assert got["srcc"] == pytest.approx(stats.spearmanr(pred, mos)[0], abs=1e-6)
    assert got["plcc"] == pytest.approx(stats.pearsonr(pred, mos)[0], abs=1e-6)
    low_mos = [i for i, m in enumerate(mos) if m <= 2.5]  # HOR thresholds 3 and 4 of 1-5 are 2.5 and 3.75 of 0-5
    assert got["hor_thresholds"] == [2.5, 3.75]
    assert got["hor"] == pytest.approx(sum(pred[i] >= 3.75 for i in low_mos) / len(low_mos))


def test_a_manifest_takes_its_scale_as_mos_range_and_is_refused_without_it(tmp_path, capsys):
    protocol = write_example_protocol(tmp_path / "proto", anchors=False)
    data = tmp_path / "data"
    (data / "img").mkdir(parents=True)
    rows = []
    for i, mos in enumerate([25.0, 90.0, 10.0, 60.0]):
        Image.fromarray(np.full((40, 40, 3), 50 * i, np.uint8)).save(data / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "sharpness", "mos": mos})
    (data / "calib.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = [f"protocol={protocol}", f"benchmark={data / 'calib.jsonl'}"]
    assert run_cli("calibrate", run_calibrate, argv, schema=CalibrateSettings) == 2
    err = capsys.readouterr().err
    assert "MOS 25 (line 1) is outside the scale 1-5; pass the dataset's scale as mos_range=[LOW,HIGH]" in err
    assert run_cli("calibrate", run_calibrate, [*argv, "mos_range=[0,100]"], schema=CalibrateSettings) == 0
    p = load_protocol(protocol)
    assert (p.anchors["high"].score, p.anchors["low"].score) == pytest.approx((4.6, 1.4))  # 90 and 10 of 0-100
    assert p.provenance["calibration"]["mos_range"] == [0.0, 100.0]
