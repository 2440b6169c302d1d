"""Q-Bench's released A3 outputs (IQA_outputs/MODEL/DATASET.json, objects back to back) as rows of our leaderboard,
scored as the released notebook scores them (softmax at temperature 100), beside a model scored in the same command.

The fixture holds the first six objects of four released files (qwen-vl and shikra on SPAQ and KonIQ-10k; shikra's
SPAQ file is a JSON list, as released); the expected cells are computed here with scipy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from reward.commands.qbench_eval import QbenchEvalSettings
from reward.commands.qbench_eval import run as run_qbench
from reward.core.config import parse
from reward.core.errors import UserError
from reward.qbench.a3_released import read_released, read_released_text, released_cell

FIXTURE = Path(__file__).parent / "fixtures" / "qbench_released"


def _objects(path: Path) -> list[dict]:
    text, dec, out, i = path.read_text(), json.JSONDecoder(), [], 0
    while i < len(text):
        obj, i = dec.raw_decode(text, i)
        out += obj if isinstance(obj, list) else [obj]
    return out


def _expected(objs: list[dict], t: float) -> tuple[float, float]:
    g = np.array([o["logit_good"] for o in objs]) / t
    p = np.array([o["logit_poor"] for o in objs]) / t
    score = np.exp(g) / (np.exp(g) + np.exp(p))
    mos = [float(o["gt_score"]) for o in objs]
    return stats.spearmanr(score, mos)[0], stats.pearsonr(score, mos)[0]


def test_released_cells_are_the_notebooks_softmax_at_temperature_100():
    models = read_released(FIXTURE)
    assert sorted(models) == ["qwen-vl", "shikra"] and sorted(models["shikra"]) == ["koniq", "spaq"]
    for model in models:
        for dataset in ("spaq", "koniq"):
            objs = _objects(FIXTURE / model / f"{dataset}.json")
            cell = released_cell(models[model][dataset], dataset)
            assert (cell["srcc"], cell["plcc"]) == pytest.approx(_expected(objs, 100.0), abs=1e-12)
            literal = released_cell(models[model][dataset], dataset, temperature=1.0)  # eq. 1 without a temperature
            assert (literal["srcc"], literal["plcc"]) == pytest.approx(_expected(objs, 1.0), abs=1e-12)
    qwen = models["qwen-vl"]["spaq"]
    assert abs(released_cell(qwen, "spaq")["plcc"] - released_cell(qwen, "spaq", temperature=1.0)["plcc"]) > 0.05


def test_cgiqa_is_the_mean_of_its_blocks_as_in_the_notebook(monkeypatch):
    import reward.qbench.a3_released as released

    objs = read_released(FIXTURE)["qwen-vl"]["koniq"] + read_released(FIXTURE)["qwen-vl"]["spaq"][:1]  # 7 objects
    monkeypatch.setitem(released.RELEASED_SUBSETS, "cgi", 3)
    cell = released_cell(objs, "cgi")
    halves = [_expected(objs[:3], 100.0), _expected(objs[3:6], 100.0)]  # the 7th is left out, as the notebook does
    assert cell["srcc"] == pytest.approx((halves[0][0] + halves[1][0]) / 2, abs=1e-12)
    assert cell["plcc"] == pytest.approx((halves[0][1] + halves[1][1]) / 2, abs=1e-12)


def test_the_released_folder_is_a_leaderboard_without_a_model(tmp_path):
    result = run_qbench(
        parse(QbenchEvalSettings, {"task": "a3", "a3": {"released": str(FIXTURE)}, "out": str(tmp_path / "out")})
    )
    saved = json.loads((tmp_path / "out" / "leaderboard.json").read_text())
    assert saved["protocol"]["temperature"] == 100.0
    for model in ("qwen-vl", "shikra"):
        srcc, plcc = _expected(_objects(FIXTURE / model / "spaq.json"), 100.0)
        assert saved["datasets"]["spaq"][model]["srcc"] == pytest.approx(srcc, abs=1e-9)
        assert saved["datasets"]["spaq"][model]["plcc"] == pytest.approx(plcc, abs=1e-9)
        mean = (result["datasets"]["spaq"][model]["srcc"] + result["datasets"]["koniq"][model]["srcc"]) / 2
        assert saved["mean"][model]["srcc"] == pytest.approx(mean, abs=1e-12)
    table = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "| qwen-vl |" in table and "| shikra |" in table


def test_a_scored_model_sits_beside_the_released_rows_and_writes_the_released_layout(
    tmp_path, tiny_vlm_path, tiny_vlm
):
    from conftest import random_images
    from reward.vlm import OptionQuery

    data, images = [], {}
    for k, (name, mos) in enumerate(
        {"spaq": [20.0, 80.5, 41.0, 63.2, 55.0], "koniq": [1.5, 4.0, 2.2, 3.1, 4.8]}.items()
    ):
        d = tmp_path / name
        d.mkdir()
        images[name] = random_images(5, seed=40 + k, sizes=(56, 64))
        for i, im in enumerate(images[name]):
            im.save(d / f"{i}.png")
        rows = [{"img_path": f"{i}.png", "gt_score": str(m)} for i, m in enumerate(mos)]
        (d / f"{name}.json").write_text(json.dumps(rows))
        data.append(str(d / f"{name}.json"))
    cfg = {"task": "a3", "model": {"path": str(tiny_vlm_path)}, "data": data, "a3": {"released": str(FIXTURE)}}
    result = run_qbench(
        parse(QbenchEvalSettings, {**cfg, "a3": {**cfg["a3"], "name": "tiny"}, "out": str(tmp_path / "out")})
    )
    assert set(result["datasets"]["spaq"]) == {"tiny", "qwen-vl", "shikra"}

    q = OptionQuery("Rate the quality of the image.", ("good", "poor"), "The quality of the image is")
    for name in ("spaq", "koniq"):
        written = _objects(tmp_path / "out" / "IQA_outputs" / "tiny" / f"{name}.json")
        lp = tiny_vlm.option_logprobs([[im] for im in images[name]], [q]).logprobs[:, 0]
        assert [o["img_path"] for o in written] == [f"{i}.png" for i in range(5)]
        assert [o["logit_good"] for o in written] == pytest.approx(lp[:, 0].tolist(), abs=1e-5)
        assert [o["logit_poor"] for o in written] == pytest.approx(lp[:, 1].tolist(), abs=1e-5)
        srcc, plcc = _expected(written, 100.0)
        assert result["datasets"][name]["tiny"]["srcc"] == pytest.approx(srcc, abs=1e-9)
        assert result["datasets"][name]["tiny"]["plcc"] == pytest.approx(plcc, abs=1e-9)
    assert sorted(read_released(tmp_path / "out" / "IQA_outputs")["tiny"]) == ["koniq", "spaq"]  # shareable as is


def test_a_bad_released_file_names_the_file_and_the_object(tmp_path):
    with pytest.raises(UserError, match=r"x.json: object 2 has no logit_poor"):
        read_released_text(
            '{"img_path": "a", "gt_score": 1, "logit_good": 1, "logit_poor": 0}{"img_path": "b", '
            '"gt_score": 2, "logit_good": 1}',
            "x.json",
        )
    with pytest.raises(UserError, match="a3.released='/nowhere' is not a folder"):
        read_released("/nowhere")
