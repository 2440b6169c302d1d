"""Q-Bench data as released: the Hugging Face layout lmms-eval reads (options padded with "N/A", a correct_choice
letter, integer question_type/question_concern, images inside the table) and A3's JSON (gt_score as a string)."""

from __future__ import annotations

import json

import pytest

from conftest import random_images
from reward.commands.qbench_eval import QbenchEvalSettings
from reward.core.config import parse
from reward.data import DatasetImage, load_image
from reward.data.manifest import ManifestError
from reward.qbench.a1_questions import hf_row, image_name, load_questions
from reward.qbench.a3_leaderboard import load_a3_json

HF_ROWS = [  # Q-Bench-HF's documented row, and a pair row of Q-Bench2-HF
    {
        "id": 0,
        "question": "How is the lighting of this building?",
        "option0": "High",
        "option1": "Low",
        "option2": "Medium",
        "option3": "N/A",
        "question_type": 2,
        "question_concern": 3,
        "correct_choice": "B",
    },
    {
        "id": 1,
        "question": "Which image is sharper?",
        "option0": "The first image",
        "option1": "The second image",
        "option2": "N/A",
        "option3": "N/A",
        "question_type": 1,
        "question_concern": 0,
        "correct_choice": "A",
    },
]


def _table(tmp_path, pair: bool):
    import datasets

    rows = [dict(r) for r in HF_ROWS]
    images = random_images(3, seed=4)
    if pair:
        data = {k: [r[k] for r in rows] for k in rows[0]} | {"image1": images[:2], "image2": images[1:]}
        features = {"image1": datasets.Image(), "image2": datasets.Image()}
    else:
        data = {k: [r[k] for r in rows] for k in rows[0]} | {"image": images[:2]}
        features = {"image": datasets.Image()}
    ds = datasets.Dataset.from_dict(data)
    for name, feature in features.items():
        ds = ds.cast_column(name, feature)
    return ds, images


def test_hf_row_reads_options_up_to_the_first_na_and_the_answer_from_its_letter():
    row = hf_row({**HF_ROWS[0], "image": "a.jpg"}, "dev row 1")
    assert row["candidates"] == ["High", "Low", "Medium"] and row["correct_ans"] == "Low"
    assert (row["type"], row["concern"], row["id"]) == (2, 3, 0)
    gap = hf_row({**HF_ROWS[0], "option1": "N/A", "correct_choice": "A", "image": "a.jpg"}, "x")
    assert gap["candidates"] == ["High"]  # lmms-eval stops at the first "N/A"
    with pytest.raises(ManifestError, match=r"dev row 1: correct_choice 'D' names none of the 3 options .* A-C"):
        hf_row({**HF_ROWS[0], "correct_choice": "D", "image": "a.jpg"}, "dev row 1")


@pytest.mark.parametrize("kind", ["parquet", "save_to_disk"])
def test_hf_tables_keep_their_images_and_give_the_released_questions(tmp_path, kind):
    ds, images = _table(tmp_path, pair=False)
    path = tmp_path / ("dev.parquet" if kind == "parquet" else "dev")
    ds.to_parquet(str(path)) if kind == "parquet" else ds.save_to_disk(str(path))
    questions, skipped = load_questions(path)
    assert not skipped and [q.correct for q in questions] == ["Low", "The first image"]
    assert [(q.type, q.concern, q.part) for q in questions] == [(2, 3, "single"), (1, 0, "single")]
    image = questions[0].images[0]
    assert isinstance(image, DatasetImage) and image_name(image) == f"{path.name}/0/image"
    assert load_image(image).tobytes() == images[0].convert("RGB").tobytes()


def test_hf_pair_tables_give_pairs(tmp_path):
    ds, images = _table(tmp_path, pair=True)
    ds.save_to_disk(str(tmp_path / "pairs"))
    questions, _ = load_questions(tmp_path / "pairs")
    assert [q.part for q in questions] == ["pair", "pair"]
    first, second = (load_image(p) for p in questions[1].images)
    assert first.tobytes() == images[1].tobytes() and second.tobytes() == images[2].tobytes()


def test_hf_rows_as_json_with_image_paths(tmp_path):
    random_images(1)[0].save(tmp_path / "a.png")
    (tmp_path / "dev.jsonl").write_text(json.dumps({**HF_ROWS[0], "image": "a.png"}) + "\n")
    (question,), _ = load_questions(tmp_path / "dev.jsonl")
    assert question.images == ((tmp_path / "a.png").resolve(),) and question.correct == "Low"


@pytest.mark.slow
def test_task_a1_answers_an_hf_table(tmp_path, tiny_vlm_path):
    from reward.commands.qbench_eval import run as run_qbench

    ds, _ = _table(tmp_path, pair=False)
    ds.save_to_disk(str(tmp_path / "dev"))
    out = tmp_path / "out"
    metrics = run_qbench(
        parse(
            QbenchEvalSettings,
            {"task": "a1", "model": {"path": str(tiny_vlm_path)}, "data": str(tmp_path / "dev"), "out": str(out)},
        )
    )
    assert metrics["n"] == 2 and metrics["single"]["by_type"]["how"]["n"] == 1
    answers = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    assert [a["img_path"] for a in answers] == [["dev/0/image"], ["dev/1/image"]] and answers[0]["id"] == 0


def test_a3_json_as_released_gt_score_strings_and_images_found_by_name(tmp_path):
    (tmp_path / "1024x768").mkdir()  # the images in the dataset's folder, the JSON above them
    for i, im in enumerate(random_images(3)):
        im.save(tmp_path / "1024x768" / f"{i}.jpg")
    rows = [
        {"img_path": "0.jpg", "gt_score": "3.83"},
        {"img_path": "1.jpg", "gt_score": "2.82 "},  # cgi.json writes a trailing space
        {"image": "1024x768/2.jpg", "gt_score": 4.1},  # Q-Align's key, a number
    ]
    (tmp_path / "koniq.json").write_text(json.dumps(rows, indent=2))
    result = load_a3_json(tmp_path / "koniq.json")
    assert [(r.image.name, r.mos, r.dimension) for r in result.rows] == [
        ("0.jpg", 3.83, "quality"),
        ("1.jpg", 2.82, "quality"),
        ("2.jpg", 4.1, "quality"),
    ]
    assert [r.line for r in result.rows] == [2, 6, 10]  # where each row starts in the file
    (tmp_path / "koniq.json").write_text(json.dumps([*rows, {"img_path": "9.jpg", "gt_score": "1.0"}]))
    with pytest.raises(ManifestError, match=r"koniq\.json:1: image '9\.jpg' not found .* skip_bad=true"):
        load_a3_json(tmp_path / "koniq.json")
    assert len(load_a3_json(tmp_path / "koniq.json", skip_bad=True).skipped) == 1
