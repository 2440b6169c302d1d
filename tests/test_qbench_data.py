"""Known-answer perception questions, their SFT examples, the mix with rating data, and the Hydra config."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hydra import initialize_config_dir

from reward.commands.qbench_eval import QbenchEvalSettings
from reward.commands.qbench_eval import run as run_qbench
from reward.core.cli import compose
from reward.core.config import parse
from reward.qbench.a1_perception import lettered_prompt
from reward.qbench.a1_questions import load_questions
from training.commands.sft import SftSettings
from training.commands.sft_setup import training_rows
from training.perception_sft import perception_example
from training.procedural.perception_questions import PHOTOS_HELDOUT, PHOTOS_TRAIN, question_at, write_questions
from training.procedural.synthetic import write_benchmark

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _luma(im) -> float:
    return float(np.asarray(im, float).mean())


def _residual(im) -> float:
    a = np.asarray(im, float).mean(-1)
    return float(np.abs(a[1:, 1:] - a[:-1, 1:] - a[1:, :-1] + a[:-1, :-1]).mean())


def test_generated_answers_follow_the_rendered_effect():
    dims, brights, noisy, clean = [], [], [], []
    for i in range(160):
        q = question_at(7, i, size=48, families=["scene-dim", "pair-brighter", "photo-noisy"])
        ims = q["images"]
        if q["family"] == "scene-dim":
            (dims if q["correct_ans"] == "Yes" else brights).append(_luma(ims[0]))
        elif q["family"] == "pair-brighter":
            first_brighter = _luma(ims[0]) > _luma(ims[1])
            assert first_brighter == (q["correct_ans"] == "The first image")
        else:
            (noisy if q["correct_ans"] == "Yes" else clean).append(_residual(ims[0]))
    assert np.mean(dims) < 0.6 * np.mean(brights)
    assert min(noisy) > max(clean) * 0.9 and np.mean(noisy) > 2 * np.mean(clean)
    assert set(PHOTOS_TRAIN).isdisjoint(PHOTOS_HELDOUT)


def test_written_questions_load_back_with_balanced_answers(tmp_path):
    path = write_questions(tmp_path, 60, seed=3, size=32, photos="heldout", fmt="jsonl")
    questions, skipped = load_questions(path)
    assert len(questions) == 60 and not skipped
    assert {q.part for q in questions} == {"single", "pair"} and {q.type for q in questions} == {0, 1, 2}
    yes_no = [q.correct for q in questions if q.candidates == ("Yes", "No")]
    assert 0.25 < yes_no.count("Yes") / len(yes_no) < 0.75
    with pytest.raises(ValueError, match="unknown question family"):
        question_at(0, 0, families=["pair-blurrier"])


def test_sft_example_prompt_is_the_a1_prompt_and_the_completion_its_correct_letter():
    cands = ["High", "Medium", "Low"]
    ex = perception_example(2, "How is it?", cands, "Low", seed=4, index=9)
    prompt, letters, order = lettered_prompt("How is it?", cands, n_images=2, seed=4, index=9)
    content = ex["prompt"][0]["content"]
    assert [p["type"] for p in content] == ["text", "image", "text", "image", "text"]  # the paper's pair layout
    assert "".join(p["text"] if p["type"] == "text" else "<image>" for p in content) == prompt
    assert content[0]["text"] == "How is it?\nThe first image: " and content[2]["text"] == "\nThe second image: "
    letter = ex["completion"][0]["content"][0]["text"]
    assert f"{letter}. Low" in prompt and letter == letters[order.index(2)]
    text = perception_example(1, "How is it?", cands, "Low", seed=4, index=9, answer="letter_text")
    assert text["completion"][0]["content"][0]["text"].endswith(". Low")


def test_perception_questions_are_mixed_with_rating_data_by_config(tmp_path, tiny_vlm_path):
    bench = write_benchmark(tmp_path / "bench", 6, size=32, seed=1)
    qfile = write_questions(tmp_path / "q", 8, seed=2, size=32)
    base = [
        f"model.path={tiny_vlm_path}",
        f"data.train={bench.ratings}",
        f"out={tmp_path / 'o'}",
        f"data.perception={qfile}",
        "prompt.type=1",
        "prompt.dimensions=[lighting]",
    ]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        s = parse(SftSettings, compose("sft", overrides=[*base, "data.perception_fraction=0.5"], schema=SftSettings))
        with pytest.raises(ValueError, match=r"data.perception_fraction=0.0: use a share in \(0, 1\]"):
            compose("sft", overrides=[*base, "data.perception_fraction=0"], schema=SftSettings)  # before any load
        with pytest.raises(ValueError, match=r"^data.perception_answer='x': choose one of letter, letter_text$"):
            compose("sft", overrides=[*base, "data.perception_answer=x"], schema=SftSettings)
    queries = {"lighting": {"question": "How is the lighting?", "response_prefix": "The lighting is"}}
    ds, _ = training_rows(s, queries)
    replies = [ex["completion"][0]["content"][0]["text"] for ex in ds]
    letters = [r for r in replies if len(r) == 1]
    assert letters and len(letters) < len(replies)  # both kinds of example
    assert all(r.startswith("The lighting is") for r in replies if len(r) > 1)


def test_qbench_eval_config_composes_and_a3_reads_model_path(tmp_path, tiny_vlm_path):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(
            "qbench_eval",
            overrides=["task=a3", f"model.path={tiny_vlm_path}", "data=[]", "out=o"],
            schema=QbenchEvalSettings,
        )
    assert cfg.reward.name == "qbench" and cfg.a3.ensemble is False
    with pytest.raises(ValueError, match="task='a4'"):
        run_qbench(parse(QbenchEvalSettings, {"task": "a4", "data": "x", "out": "o"}))
    img = tmp_path / "a.png"
    question_at(0, 0, size=32, families=["scene-dim"])["images"][0].save(img)
    (tmp_path / "r.jsonl").write_text(json.dumps({"image": "a.png", "dimension": "overall", "mos": 3}) + "\n")
    with pytest.raises(ValueError, match="needs a VLM: pass model.path"):
        run_qbench(
            parse(QbenchEvalSettings, {"task": "a3", "data": [str(tmp_path / "r.jsonl")], "out": str(tmp_path / "o")})
        )
