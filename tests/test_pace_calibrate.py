"""PACE calibration: a tiny random diffusers text-to-image pipeline, a scripted Generator agent, scripted scores;
and benchmark mode with disjoint splits."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from pace_doubles import ScriptedBackend, example_protocol, write_example_protocol
from PIL import Image

from conftest import run_cli
from pace_judge.calibration import set_anchors
from pace_judge.commands.calibrate import CalibrateSettings
from pace_judge.commands.calibrate import run as run_calibrate
from pace_judge.protocol import load_protocol
from reward.core.config import parse
from reward.core.errors import UserError


def _generator(prompt: str, n_images: int) -> str:
    assert prompt.startswith("[Generator Agent]") and "Are object edges crisp?" in prompt
    return (
        "```json\n{'positive': ['a crisp photo of a leaf', 'a sharp watch'], 'negative': ['a smeared leaf', "
        "'a blurred watch'],}\n```"
    )


@pytest.mark.slow
def test_generated_candidates_rated_by_script_become_the_anchors(tmp_path, tiny_pipeline_path):
    pipeline = tiny_pipeline_path("text-to-image")
    protocol = write_example_protocol(tmp_path / "proto", anchors=False)
    argv = [
        f"protocol={protocol}",
        f"pipeline={pipeline}",
        "scores=1,3,5,4",
        "steps=2",
        "height=32",
        "width=32",
        f"memory={tmp_path / 'mem'}",
    ]
    from reward.core.cli import compose

    calibrated = run_calibrate(
        parse(CalibrateSettings, compose("calibrate", argv, schema=CalibrateSettings)),
        backend=ScriptedBackend(_generator),
    )
    out = tmp_path / "proto" / "calibration"
    candidates = [np.asarray(Image.open(out / f"candidate_{i}.png")) for i in range(1, 5)]
    assert Image.open(out / "contact_sheet.png").size == (4 * 256, 256 + 24)
    assert not np.array_equal(candidates[0], candidates[2])
    assert calibrated.anchors["high"].score == 5.0 and calibrated.anchors["low"].score == 1.0
    assert np.array_equal(np.asarray(Image.open(calibrated.anchor_path("high"))), candidates[2])  # scored 5
    assert np.array_equal(np.asarray(Image.open(calibrated.anchor_path("low"))), candidates[0])  # scored 1
    record = load_protocol(protocol).provenance["calibration"]
    assert record["prompts"] == ["a crisp photo of a leaf", "a sharp watch", "a smeared leaf", "a blurred watch"]
    assert record["scores"] == [1.0, 3.0, 5.0, 4.0]
    stored = json.loads((tmp_path / "mem" / "index.json").read_text())["entries"]["sharpness"]
    assert stored["calibrated"] is True


def test_scores_must_be_one_per_candidate_and_anchors_must_differ(tmp_path, capsys):
    assert main(["protocol=p", "pipeline=sd", "scores=1,3,4"]) == 2  # refused before anything renders
    assert "give exactly 4 scores, each from 1 to 5" in capsys.readouterr().err
    assert main(["protocol=p", "pipeline=sd", "candidates=2", "scores=2,5", "mos_range=[5,1]"]) == 2
    assert "mos_range=[5.0, 1.0]: give [LOW, HIGH], HIGH above LOW" in capsys.readouterr().err
    assert main(["protocol=p", "pipeline=sd", "scores=0,3,4,5"]) == 2
    assert "scores=[0.0, 3.0, 4.0, 5.0]: each value must be between 1 and 5" in capsys.readouterr().err
    assert main(["protocl=x"]) == 2
    assert "unknown key protocl (did you mean 'protocol'?)" in capsys.readouterr().err
    from reward.core.cli import compose

    assert list(
        compose("calibrate", ["protocol=p", "pipeline=sd", "scores=1,3,4,5"], schema=CalibrateSettings).scores
    ) == [
        1,
        3,
        4,
        5,
    ]  # no sweep
    img = Image.new("RGB", (8, 8))
    with pytest.raises(UserError, match="the anchors must differ on this dimension"):
        set_anchors(example_protocol(), tmp_path, img, 3.0, img, 3.0)


def main(argv: list[str]) -> int:
    return run_cli("calibrate", run_calibrate, argv, schema=CalibrateSettings)


def test_benchmark_mode_takes_extreme_mos_images_and_requires_disjoint_splits(tmp_path, capsys):
    protocol = write_example_protocol(tmp_path / "proto", anchors=False)
    data = tmp_path / "data"
    (data / "img").mkdir(parents=True)
    rows = []
    for i, mos in enumerate([2.5, 4.8, 1.2, 3.3]):
        Image.fromarray(np.full((40, 40, 3), 50 * i, np.uint8)).save(data / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "sharpness", "mos": mos})
    rows.append({"image": "img/3.png", "dimension": "noise", "mos": 5.0})  # another dimension: ignored
    (data / "calib.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (data / "test.jsonl").write_text(json.dumps({"image": "img/2.png", "dimension": "sharpness", "mos": 1}) + "\n")
    assert main([f"protocol={protocol}", f"benchmark={data / 'calib.jsonl'}", f"test={data / 'test.jsonl'}"]) == 2
    assert "shares 1 image(s) with the test split" in capsys.readouterr().err
    (data / "test.jsonl").write_text(json.dumps({"image": "img/9.png", "dimension": "sharpness", "mos": 1}) + "\n")
    assert main([f"protocol={protocol}", f"benchmark={data / 'calib.jsonl'}", f"test={data / 'test.jsonl'}"]) == 0
    p = load_protocol(protocol)
    assert (p.anchors["high"].score, p.anchors["low"].score) == (4.8, 1.2)
    assert np.asarray(Image.open(p.anchor_path("high")))[0, 0, 0] == 50  # img/1.png
    assert np.asarray(Image.open(p.anchor_path("low")))[0, 0, 0] == 100  # img/2.png


def test_interactive_scores_are_asked_until_valid(monkeypatch, tmp_path):
    from pace_judge import calibration as calibrate

    answers = iter(["great", "6", "2", "4.5", "1", "5"])
    monkeypatch.setattr(calibrate.sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    assert calibrate.ask_scores(4, tmp_path / "sheet.png") == [2.0, 4.5, 1.0, 5.0]  # "great" and 6 asked again
    monkeypatch.setattr(calibrate.sys.stdin, "isatty", lambda: False, raising=False)
    with pytest.raises(UserError, match="no terminal to ask on: look at .*sheet.png and pass scores="):
        calibrate.ask_scores(4, tmp_path / "sheet.png")


def test_ties_for_an_anchor_are_broken_by_row_order_and_said(tmp_path, caplog):
    protocol = write_example_protocol(tmp_path / "proto", anchors=False)
    (tmp_path / "img").mkdir()
    rows = []
    for i, mos in enumerate([3.0, 5.0, 1.0, 5.0, 5.0, 1.0]):
        Image.fromarray(np.full((40, 40, 3), 40 * i, np.uint8)).save(tmp_path / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "sharpness", "mos": mos})
    (tmp_path / "calib.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level(logging.INFO, logger="pace_judge.calibration"):
        run_calibrate(
            parse(CalibrateSettings, {"protocol": str(protocol), "benchmark": str(tmp_path / "calib.jsonl")})
        )
    assert "high anchor: img/1.png (line 2), the first in row order of 3 rows tied at MOS 5" in caplog.text
    assert "low anchor: img/2.png (line 3), the first in row order of 2 rows tied at MOS 1" in caplog.text
    record = load_protocol(protocol).provenance["calibration"]
    assert (record["high"], record["low"]) == ("img/1.png", "img/2.png")
    assert record["ties"] == {"high": 3, "low": 2, "rule": "the first in row order"}
