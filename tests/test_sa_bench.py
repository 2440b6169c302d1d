"""SA-BENCH read as published (``sa-bench:DIR[:SPLIT][:DIMENSION]``), App. D.1 applied to its annotator columns
(``sa-bench-cleaned``), and SA-IQA's recipe on it: its targets, row for row, what the authors' released converter
writes for the same CSV (its rules written out here: ``SA-IQA/tools/convert_csv_to_jsonl.py`` and the prompts of
``tools/prompt_configs.py``, github.com/AlibabaResearch/SA-IQA), its plan from the folder's rows, and the training
command of the recipe's docs run as a user runs it."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import iqa_fixtures as fx
import pytest

from conftest import run_cli
from reward.core.errors import MissingInputError, UserError
from reward.data import load_ratings
from training.commands.sft import SftSettings, run

ROOT = Path(__file__).resolve().parents[1]
MOS_TO_WORD = {1: "bad", 2: "poor", 3: "fair", 4: "good", 5: "excellent"}  # SA-IQA/tools/convert_csv_to_jsonl.py
RELEASED_PROMPT4 = {  # tools/prompt_configs.py, PROMPTS[4], as released
    "distortion": "<image><distortion>Please evaluate the spatial aesthetic distortion quality level of this image. "
    "The distortion dimension assesses whether soft furnishings (e.g., cabinets, carpets) or fixed structures (e.g., "
    "floors, walls) appear deformed or misaligned. Additionally, evaluate the realism and material accuracy of "
    "textures, and judge whether any distortion negatively impacts the overall aesthetic quality of the image.",
    "harmony": "<image><harmony>Please evaluate the spatial aesthetic harmony quality level of this image. The "
    "harmony dimension focuses on stylistic consistency, color coordination, and overall visual cohesion. Examine how "
    "well the combination of elements creates a balanced and visually pleasant composition, avoiding clashes or "
    "imbalances in style and color.",
    "layout": "<image><layout>Please evaluate the spatial aesthetic layout quality level of this image. The layout "
    "dimension describes the spatial distribution, positional relationships, and quantity of major elements within "
    "the space. Consider how the layout supports the overall visual order, maintains balance, and enhances the "
    "functional aesthetics of the image.",
    "lighting": "<image><lighting>Please evaluate the spatial aesthetic lighting quality level of this image. The "
    "lighting dimension examines the quality of light effects, shadow interactions, and the realism of light sources. "
    "Assess how well lighting contributes to the overall depth, mood, and authenticity of the image, emphasizing both "
    "natural and artificial lighting scenarios.",
}


def released_converter(path: Path, image_dir: str, dim: str) -> list[dict]:
    """The rows ``SA-IQA/tools/convert_csv_to_jsonl.py --prompt_version 4 --score_column {dim}_score_mos_int`` writes
    for one CSV: a row without an id or a score, or whose score's int() is not 1-5, is skipped; the response template
    is the one the script spells out for distortion (App. B.1 prints the same for every dimension)."""
    out = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            score = row[f"{dim}_score_mos_int"]
            if not row["id"] or not score or int(float(score)) not in MOS_TO_WORD:
                continue
            word = MOS_TO_WORD[int(float(score))]
            out.append(
                {
                    "query": RELEASED_PROMPT4[dim],
                    "response": f"The spatial aesthetic {dim} quality level of this image is {word}.",
                    "images": [os.path.join(image_dir, f"{row['id']}.jpg")],
                }
            )
    return out


@pytest.fixture
def bench(tmp_path: Path) -> tuple[Path, dict]:
    folder = tmp_path / "datasets" / "SA-BENCH"
    return folder, fx.sa_bench(folder)


def test_sa_bench_is_read_as_published_with_its_split_and_one_dimension(bench):
    folder, written = bench
    train = load_ratings(f"sa-bench:{folder}:train")
    assert len(train.rows) == sum(len(written[f"{d}_train"]) for d in fx.SA_BENCH) == 16
    first = next(r for r in train.rows if r.dimension == "harmony")
    row = written["harmony_train"][0]
    assert first.key == f"images/harmony/{row['id']}.jpg" and first.mos == row["harmony_score_mos"]
    assert first.extra["mos_int"] == row["harmony_score_mos_int"] and first.extra["model"] == "flux-inpaint"
    assert first.extra["raters"] == {a: float(row[f"harmony_score_{a}"]) for a in ("ann1", "ann2", "ann3", "ann4")}
    three = next(r for r in train.rows if r.dimension == "lighting" and len(r.extra["raters"]) == 3)
    assert "model" not in three.extra and "ann4" not in three.extra["raters"]  # an empty cell is no rating
    layout = load_ratings(f"sa-bench:{folder}:test:layout")
    assert [r.key for r in layout.rows] == [f"images/layout/{r['id']}.jpg" for r in written["layout_test"]]
    assert layout.info["dimensions"] == ["layout"] and layout.info["split_sizes"] == {"test": 8, "train": 16}
    assert len(load_ratings(f"sa-bench:{folder}:full").rows) == len(load_ratings(f"sa-bench:{folder}:all").rows) == 24
    with pytest.raises(UserError, match="has no dimension 'layuot'. Did you mean 'layout'"):
        load_ratings(f"sa-bench:{folder}:train:layuot")
    with pytest.raises(MissingInputError, match="expected annotations/layout_6k_train.csv"):
        load_ratings(f"sa-bench:{folder / 'images'}")


def test_a_missing_image_or_a_level_outside_1_to_5_is_a_bad_row_named_by_file_and_line(bench):
    folder, written = bench
    (folder / "images" / "layout" / f"{written['layout_train'][0]['id']}.jpg").unlink()
    path = folder / "annotations" / "harmony_7k_train.csv"
    lines = path.read_text().splitlines()
    lines[2] = lines[2].rsplit(",", 2)[0] + ",0,flux-inpaint"  # _score_mos_int 0
    path.write_text("\n".join(lines) + "\n")
    read = load_ratings(f"sa-bench:{folder}:train", skip_bad=True)
    assert len(read.rows) == 14 and len(read.skipped) == 2
    reasons = sorted(s.reason for s in read.skipped)
    assert "harmony_7k_train.csv:3: harmony_score_mos_int 0 is not 1-5" in reasons[0]
    assert "layout_6k_train.csv:2: image images/layout/" in reasons[1] and "not found" in reasons[1]


def test_sa_bench_cleaned_applies_app_d1_to_the_annotator_columns(bench, caplog):
    """Seven raters, six agreeing and one reversed: the reversed rating of an image has z = sqrt(6) > 2 and is
    replaced by the image's mean, the MOS recomputed (6 b + mean) / 7; the reversed rater's SRCC is -1: flagged."""
    folder, _ = bench
    path = folder / "annotations" / "lighting_3k_train.csv"
    raters = [f"r{k}" for k in range(1, 8)]
    levels = [1, 2, 3, 4, 5, 1]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["id", *(f"lighting_score_{a}" for a in raters), "lighting_score_mos", "lighting_score_mos_int"]
        )
        for i, b in enumerate(levels):
            raw = (6 * b + (6 - b)) / 7
            fx.image(folder / "images" / "lighting" / f"{4100 + i}.jpg", (b - 1) / 4)
            writer.writerow([4100 + i, *([b] * 6), 6 - b, round(raw, 4), int(raw + 0.5)])
    cleaned = {r.key: r for r in load_ratings(f"sa-bench-cleaned:{folder}:train:lighting").rows}
    for i, b in enumerate(levels):
        row, mean = cleaned[f"images/lighting/{4100 + i}.jpg"], (6 * b + (6 - b)) / 7
        assert row.mos == pytest.approx((6 * b + mean) / 7 if b != 3 else 3.0, abs=1e-9)
        assert row.extra["mos_released"] == round(mean, 4) and row.extra["mos_int"] == int(row.mos + 0.5)
    info = load_ratings(f"sa-bench-cleaned:{folder}:train").info
    flagged = info["annotators_flagged"]  # pooled over every dimension (the fixture's annotators too)
    assert flagged["r7"] == pytest.approx(-1.0) and not {f"r{k}" for k in range(1, 7)} & set(flagged)
    assert info["ratings_replaced"] == 5
    assert info["mos_differs_from_released"] == 5 and "annotators flagged for review" in caplog.text
    released = {r.key: r.mos for r in load_ratings(f"sa-bench:{folder}:train:lighting").rows}
    assert released["images/lighting/4100.jpg"] == round(11 / 7, 4)  # as published, untouched


def test_the_recipes_targets_are_the_released_converters_rows_for_every_csv(bench, monkeypatch):
    folder, _ = bench
    path = folder / "annotations" / "distortion_2k_train.csv"
    lines = path.read_text().splitlines()
    lines[1] = lines[1].rsplit(",", 1)[0] + ",4.0"  # a level written as a float: int() as the converter's
    lines.append("9999,3,3,3,3,3.0,")  # no level: skipped by both
    path.write_text("\n".join(lines) + "\n")
    fx.image(folder / "images" / "distortion" / "9999.jpg", 0.5)
    monkeypatch.chdir(folder.parents[1])
    assert run_cli("sft", run, ["+recipe=sa-iqa-bench", "targets_out=t.jsonl"], schema=SftSettings) == 0
    ours = [json.loads(line) for line in Path("t.jsonl").read_text().splitlines()]
    for dim, subset in fx.SA_BENCH.items():
        expected = released_converter(folder / "annotations" / f"{dim}_{subset}_train.csv", f"images/{dim}", dim)
        got = [r for r in ours if r["image"].startswith(f"images/{dim}/")]
        assert [
            {"query": "<image>" + r["prompt"], "response": r["response"], "images": [r["image"]]} for r in got
        ] == (expected)
        assert all(max(r["target"].values()) == 1.0 for r in got)  # one-hot on the released word
    assert len(ours) == 16 and not Path("runs").exists()  # no model loaded, no output folder


def test_plan_counts_the_folders_rows_without_weights(bench, monkeypatch, caplog):
    folder, _ = bench
    monkeypatch.chdir(folder.parents[1])
    caplog.set_level("INFO")
    assert run_cli("sft", run, ["+recipe=sa-iqa-bench", "plan=true"], schema=SftSettings) == 0
    assert "steps: 3 (3 epochs of 16 rows)" in caplog.text and "nothing was loaded" in caplog.text


@pytest.mark.slow
def test_the_recipe_trains_on_an_sa_bench_folder_with_the_documented_command(bench, tiny_vlm_path):
    """``accelerate launch training/sft.py +recipe=sa-iqa-bench model.path=TINY data.train=sa-bench:DIR:train
    data.test=sa-bench:DIR:test``, nothing else changed (on the CPU: 3 epochs of 16 rows are 3 steps)."""
    folder, _ = bench
    accelerate = str(Path(sys.executable).parent / "accelerate")
    command = [accelerate, "launch", str(ROOT / "training" / "sft.py"), "+recipe=sa-iqa-bench"]
    command += [
        f"model.path={tiny_vlm_path}",
        f"data.train=sa-bench:{folder}:train",
        f"data.test=sa-bench:{folder}:test",
    ]
    done = subprocess.run(command, cwd=folder.parents[1], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = folder.parents[1] / "runs" / "sa-iqa-bench"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert {"layout", "harmony", "lighting", "distortion"} <= set(json.dumps(metrics).replace('"', " ").split())
    meta = json.loads((run_dir / "scorer" / "sa_iqa.json").read_text())
    assert "<image>" + meta["queries"]["layout"]["question"] == RELEASED_PROMPT4["layout"]
    assert json.loads((run_dir / "sft_result.json").read_text())["global_step"] == 3
