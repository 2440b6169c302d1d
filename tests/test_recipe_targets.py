"""``training/sft.py +recipe=... targets_out=FILE``: what qalign-koniq and deqa-koniq train on, row by row, against
the sources' rules written out here and their released labels (tests/fixtures/koniq_labels), on a KonIQ-10k folder
in the official layout; no model is loaded."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import iqa_fixtures as fx
import pytest
from test_targets import QALIGN_RANGE, deqa_by_hand, koniq_excerpt, vote_mean

from conftest import run_cli
from reward.core.config import parse
from training.commands.sft import SftSettings, run

WORDS = ["excellent", "good", "fair", "poor", "bad"]
OFFICIAL = ["image_name", "c1", "c2", "c3", "c4", "c5", "c_total", "MOS", "SD", "set"]
QALIGN_QUESTIONS = {
    "What's your opinion on the quality of this picture?",
    "How do you assess the quality of this image?",
    "Could you evaluate the quality of this image?",
    "How would you judge the quality of this image?",
    "Rate the quality of this image.",
    "Can you rate the quality of this picture?",
    "How would you rate the quality of this image?",
    "What is your quality rating for this image?",
    "What do you think about the quality of this image?",
}


@pytest.fixture(scope="module")
def koniq_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working folder holding datasets/KonIQ-10k (the recipes' path): the excerpt's 40 rows of
    koniq10k_distributions_sets.csv, as the official file writes them, and a small image for each."""
    root = tmp_path_factory.mktemp("koniq-recipes")
    folder = root / "datasets" / "KonIQ-10k"
    folder.mkdir(parents=True)
    with (folder / "koniq10k_distributions_sets.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(OFFICIAL)
        for i, row in enumerate(koniq_excerpt()):
            writer.writerow([row[c] for c in OFFICIAL])
            fx.image(folder / "1024x768" / row["image_name"], (vote_mean(row) - 1) / 4, seed=i, fmt="JPEG")
    return root


@pytest.fixture(scope="module")
def targets(koniq_folder: Path) -> dict[str, dict[str, dict]]:
    """Each recipe's targets_out file, run as the entry script runs it, by image name."""
    import os

    here, found = Path.cwd(), {}
    os.chdir(koniq_folder)
    try:
        for recipe in ("qalign-koniq", "deqa-koniq"):
            argv = [f"+recipe={recipe}", f"targets_out={recipe}.jsonl"]
            assert run_cli("sft", run, argv, schema=SftSettings) == 0
            lines = [json.loads(line) for line in Path(f"{recipe}.jsonl").read_text().splitlines()]
            found[recipe] = {Path(line["image"]).name: line for line in lines}
    finally:
        os.chdir(here)
    assert not (koniq_folder / "runs").exists()  # no output folder, no model (the recipe's 7B is not here)
    return found


def test_qalign_recipe_trains_on_qaligns_images_words_questions_and_response(targets):
    rows = koniq_excerpt()
    got = targets["qalign-koniq"]
    low, high = QALIGN_RANGE
    kept = [r for r in rows if r["set"] == "training" and low <= float(r["MOS"]) < high]
    assert set(got) == {r["image_name"] for r in kept}  # the official training rows in [low, high): Q-Align's file
    assert {r["image_name"] for r in kept} == {
        r["image_name"] for r in rows if r["qalign_word"] and r["set"] == "training"
    }
    edges = [low + i * (high - low) / 5 for i in range(1, 5)]  # the paper's bins of the 0-100 MOS, closed on the right
    for r in kept:
        line, mos = got[r["image_name"]], float(r["MOS"])
        word = WORDS[::-1][sum(mos > e for e in edges)]
        assert word == r["qalign_word"]  # the released label
        assert line["response"] == f"The quality of the image is {word}."
        assert line["target"] == {w: float(w == word) for w in WORDS}  # one-hot
        assert line["mos"] == pytest.approx(mos, abs=1e-12) and line["prompt"] in QALIGN_QUESTIONS
        assert "std" not in line  # the SD column is on the 1-5 votes' scale, not the 0-100 MOS's
    assert {line["response"].split()[-1] for line in got.values()} == {f"{w}." for w in WORDS}  # all five words


def test_deqa_recipe_trains_on_deqas_soft_labels_and_words(targets):
    rows = {r["image_name"]: r for r in koniq_excerpt()}
    got, qalign = targets["deqa-koniq"], targets["qalign-koniq"]
    assert set(got) == set(qalign)  # the same images
    low, high = 1.09615384615385, 4.31  # KonIQ-10k's lowest and highest vote mean (both images are in the excerpt)
    worst = 0.0
    for name, line in got.items():
        row = rows[name]
        mean, sd = vote_mean(row), float(row["SD"])
        by_hand = deqa_by_hand(mean, sd, low, high)
        assert [line["target"][w] for w in WORDS] == pytest.approx(by_hand.tolist(), abs=1e-7), name
        recomputed = [float(row[f"p_{w}"]) for w in WORDS]
        worst = max(worst, max(abs(line["target"][w] - p) for w, p in zip(WORDS, recomputed, strict=True)))
        assert line["response"] == f"The quality of the image is {row['deqa_word']}."
        assert (line["mos"], line["std"]) == pytest.approx((mean, sd), rel=1e-9) and "drawn" not in line
    assert worst < 1e-9
    assert any(sum(line["target"].values()) > 1.01 for line in got.values())  # DeQA's clipped, unnormalised label
    differ = [n for n in got if got[n]["response"] != qalign[n]["response"]]
    assert differ  # DeQA bins the 1-5 vote mean between its extremes, Q-Align the 0-100 MOS


def test_the_plan_counts_the_rows_data_keep_keeps(koniq_folder, monkeypatch, caplog):
    import logging

    monkeypatch.chdir(koniq_folder)
    low, high = QALIGN_RANGE
    kept = sum(r["set"] == "training" and low <= float(r["MOS"]) < high for r in koniq_excerpt())
    training = sum(r["set"] == "training" for r in koniq_excerpt())
    assert kept < training
    with caplog.at_level(logging.INFO):
        assert run_cli("sft", run, ["+recipe=qalign-koniq", "plan=true"], schema=SftSettings) == 0
    assert f"3 epochs of {kept} rows)" in caplog.text


def test_targets_out_refuses_a_stream_naming_the_key(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["model.path=m", "data.train=synthetic", "out=o", "trainer.max_steps=1", "targets_out=t.jsonl"]
    assert run_cli("sft", run, argv, schema=SftSettings) == 2
    assert "targets_out writes the rating rows of a ratings manifest or dataset" in capsys.readouterr().err
    assert not (tmp_path / "t.jsonl").exists()


def test_label_and_loss_settings_problems_are_named_together():
    from reward.core.cli import compose
    from reward.core.errors import UserError

    bad = [
        "model.path=m",
        "data.train=synthetic",
        "out=o",
        "trainer.max_steps=1",
        "data.soft_targets=deqa",
        "data.level_range=[5,1]",
        "+data.keep.mos_zscore=[3]",
        "loss.kind=deqa",
        "trainer.per_device_train_batch_size=1",
        "prompt.questions=[Rate it.]",
        "prompt.dimensions=[layout,harmony]",  # (null: checked once data.train's own are read)
    ]
    with pytest.raises(UserError) as err:
        parse(SftSettings, compose("sft", bad, schema=SftSettings))
    text = str(err.value)
    with pytest.raises(UserError, match="use data.score=mos with soft targets"):
        parse(SftSettings, compose("sft", ["+recipe=qalign-koniq", "data.soft_targets=gaussian"], schema=SftSettings))
    for said in (
        "data.soft_targets=deqa needs each row's std; data.train=synthetic has none",
        "data.level_range=[5.0, 1.0]: give [low, high] with low < high",
        "data.keep.mos_zscore=[3.0]: give [low, high]",
        "loss.kind=deqa pairs the examples of a batch: set trainer.per_device_train_batch_size>=2",
        "prompt.questions replace the queries of one dimension",
    ):
        assert said in text, (said, text)


def test_a_score_the_rows_lack_is_named_with_its_fix(tmp_path):
    from reward.core.errors import UserError
    from training.sft_labels import LabelRule, rating_examples

    fx.image(tmp_path / "a.png", 0.5)
    (tmp_path / "m.jsonl").write_text('{"image": "a.png", "dimension": "quality", "mos": 3.0}\n')
    queries = {"quality": {"question": "q", "response_prefix": "The quality of the image is"}}
    with pytest.raises(UserError, match=r"data.score=mos_zscore: 1 of 1 rows .* have no 'mos_zscore' value"):
        rating_examples(tmp_path / "m.jsonl", queries, LabelRule(tuple(WORDS)), score="mos_zscore")
    with pytest.raises(UserError, match=r"data.keep.mos_zscore: line 1 of .* has no 'mos_zscore' value"):
        rating_examples(tmp_path / "m.jsonl", queries, LabelRule(tuple(WORDS)), keep={"mos_zscore": (0, 100)})


def test_deqas_density_follows_its_config_per_dataset_and_its_range_defaults_to_the_rows():
    from types import SimpleNamespace

    from training.sft_labels import LabelRule, _resolved

    rule = LabelRule(tuple(WORDS), soft="deqa")
    rows = [SimpleNamespace(mos=m) for m in (2.5, 1.5, 4.25)]
    picked = {
        name: _resolved(rule, rows, {"dataset": name}, None).density for name in ("spaq", "koniq10k", "kadid10k")
    }
    assert picked == {"spaq": "cdf", "koniq10k": "pdf", "kadid10k": "pdf"}  # build_soft_labels/config.json
    assert _resolved(rule, rows, {"dataset": "spaq"}, "pdf").density == "pdf"  # data.deqa_density wins
    assert _resolved(rule, rows, {}, None).level_range == (1.5, 4.25)  # no data.level_range: the rows' own extremes
