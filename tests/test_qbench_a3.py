"""Q-Bench A3: SRCC/PLCC per dataset and their mean; the Table VIII synonym table from one read of six words."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy import stats

from conftest import random_images
from reward.commands.qbench_eval import QbenchEvalSettings
from reward.commands.qbench_eval import run as run_qbench
from reward.core.config import parse
from reward.qbench.a3_leaderboard import dataset_names
from reward.vlm import OptionQuery

MOS = {"koniq": [1.5, 4.0, 2.2, 3.1, 4.8], "agiqa": [3.0, 1.2, 4.4, 2.5, 3.9]}


def _manifests(root: Path) -> dict[str, list]:
    images = {}
    for k, (name, mos) in enumerate(MOS.items()):
        d = root / name
        d.mkdir()
        ims = random_images(5, seed=20 + k, sizes=(56, 64))
        rows = []
        for i, (im, m) in enumerate(zip(ims, mos, strict=True)):
            im.save(d / f"{i}.png")
            rows.append({"image": f"{i}.png", "dimension": "overall", "mos": m})
        (d / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        images[name] = ims
    return images


def _sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_ensemble_table_matches_hand_computed_correlations_from_one_pass_per_batch(tmp_path, tiny_vlm_path, tiny_vlm):
    images = _manifests(tmp_path)
    words = ("good", "high", "fine", "poor", "low", "bad")
    q = OptionQuery("Rate the quality of the image.", words, "The quality of the image is")
    expected = {}
    for name, ims in images.items():
        lp = tiny_vlm.option_logprobs([[im] for im in ims], [q]).logprobs[:, 0].tolist()
        g, h, f, p, lo, b = zip(*lp, strict=True)
        variants = {
            "good-poor": [_sig(g[i] - p[i]) for i in range(5)],
            "fine-bad": [_sig(f[i] - b[i]) for i in range(5)],
            "high-low": [_sig(h[i] - lo[i]) for i in range(5)],
            "good+high-poor+low": [_sig(g[i] + h[i] - p[i] - lo[i]) for i in range(5)],
            "good+fine-poor+bad": [_sig(g[i] + f[i] - p[i] - b[i]) for i in range(5)],
            "good+high+fine-poor+low+bad": [_sig(g[i] + h[i] + f[i] - p[i] - lo[i] - b[i]) for i in range(5)],
        }
        expected[name] = {
            v: (stats.spearmanr(s, MOS[name])[0], stats.pearsonr(s, MOS[name])[0]) for v, s in variants.items()
        }
    data = [str(tmp_path / n / f"{n}.jsonl") for n in MOS]
    import reward.vlm as vlm_module

    calls = []
    original = vlm_module.VLM.option_logprobs

    def counting(self, *args, **kwargs):
        calls.append(len(args[0]))
        return original(self, *args, **kwargs)

    vlm_module.VLM.option_logprobs = counting
    try:
        result = run_qbench(
            parse(
                QbenchEvalSettings,
                {
                    "task": "a3",
                    "model": {"path": str(tiny_vlm_path)},
                    "data": data,
                    "out": str(tmp_path / "out"),
                    "a3": {"ensemble": True, "temperature": 1.0},  # eq. 1-2 literally (the hand computation's T)
                },
            )
        )
    finally:
        vlm_module.VLM.option_logprobs = original
    assert calls == [5, 5]  # one read per dataset batch serves all six variants
    for name in MOS:
        for v, (s, p) in expected[name].items():
            assert result["datasets"][name][v]["srcc"] == pytest.approx(s, abs=1e-6), (name, v)
            assert result["datasets"][name][v]["plcc"] == pytest.approx(p, abs=1e-5), (name, v)
    for v in expected["koniq"]:
        assert result["mean"][v]["srcc"] == pytest.approx((expected["koniq"][v][0] + expected["agiqa"][v][0]) / 2)
    saved = json.loads((tmp_path / "out" / "leaderboard.json").read_text())
    assert saved["datasets"]["agiqa"]["fine-bad"]["n"] == 5
    table = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "| variant | koniq | agiqa | mean |" in table and "| good+high+fine-poor+low+bad |" in table

    plain = run_qbench(
        parse(
            QbenchEvalSettings,
            {"task": "a3", "model": {"path": str(tiny_vlm_path)}, "data": data, "out": str(tmp_path / "p")},
        )
    )
    for name in MOS:  # the default qbench reward is the good-poor row
        assert plain["datasets"][name]["score"]["srcc"] == pytest.approx(expected[name]["good-poor"][0], abs=1e-6)


def test_any_registered_reward_ranks_with_its_dimensions_and_only_qbench_has_the_ensemble(tmp_path, tiny_scorer_path):
    assert dataset_names(["a/koniq.jsonl", "b/spaq.jsonl"]) == {"koniq": "a/koniq.jsonl", "spaq": "b/spaq.jsonl"}
    assert list(dataset_names(["a/r.jsonl", "b/r.jsonl"])) == ["a/r", "b/r"]
    _manifests(tmp_path)
    data = [str(tmp_path / n / f"{n}.jsonl") for n in MOS]
    cfg = {"task": "a3", "reward": {"name": "sa-iqa", "model": str(tiny_scorer_path)}, "data": data}
    r = run_qbench(parse(QbenchEvalSettings, {**cfg, "out": str(tmp_path / "s")}))
    assert list(r["datasets"]["koniq"]) == ["score", "lighting", "harmony"]
    assert r["protocol"]["reward"]["fusion"] == "mean"  # sa-iqa without fusion weights: recorded with the table
    assert -1.0 <= r["mean"]["lighting"]["srcc"] <= 1.0
    with (tmp_path / "agiqa" / "agiqa.jsonl").open("a") as f:
        f.write(json.dumps({"image": "gone.png", "dimension": "overall", "mos": 2}) + "\n")
    with pytest.raises(FileNotFoundError, match=r"agiqa.jsonl:6: image .*gone.png not found"):
        run_qbench(parse(QbenchEvalSettings, {**cfg, "out": str(tmp_path / "s2")}))
    with pytest.raises(ValueError, match="a3.ensemble=true reads the good/poor synonyms of reward=qbench"):
        run_qbench(
            parse(
                QbenchEvalSettings,
                {
                    "task": "a3",
                    "reward": {"name": "sa-iqa", "model": str(tiny_scorer_path)},
                    "data": [str(tmp_path / "koniq" / "koniq.jsonl")],
                    "out": str(tmp_path / "o"),
                    "a3": {"ensemble": True, "temperature": 1.0},  # eq. 1-2 literally (the hand computation's T)
                },
            )
        )
