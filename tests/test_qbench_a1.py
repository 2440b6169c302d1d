"""Q-Bench A1: seeded lettered choices, letter log-probs from one pass, pairs, both file formats, bad rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import next_token_logprobs, random_images, word_id
from reward.commands.qbench_eval import QbenchEvalSettings
from reward.commands.qbench_eval import run as run_qbench
from reward.core.config import parse
from reward.data.manifest import ManifestError
from reward.qbench.a1_perception import Answer, answer_questions, lettered_prompt, perception_metrics
from reward.qbench.a1_questions import Question, load_questions


def _rows() -> list[dict]:
    return [
        {
            "img_path": "0.png",
            "question": "Is this image blurry?",
            "candidates": ["Yes", "No"],
            "correct_ans": "No",
            "type": 0,
            "concern": 0,
        },
        {
            "img_path": "1.png",
            "question": "How is the clarity of the image?",
            "candidates": ["High", "Medium", "Low"],
            "correct_ans": "Low",
            "type": 2,
            "concern": 2,
        },
        {
            "img_path": "2.png",
            "question": "What is the main distortion?",
            "candidates": ["Noise", "Blur", "None", "Overexposure"],
            "correct_ans": "Blur",
            "type": 1,
            "concern": 0,
        },
        {
            "img_path": ["0.png", "2.png"],
            "question": "Which image is brighter?",
            "candidates": ["The first image", "The second image"],
            "correct_ans": "The second image",
            "type": 1,
            "concern": 1,
        },
    ]


@pytest.fixture
def qdir(tmp_path: Path) -> Path:
    for i, im in enumerate(random_images(3, seed=5, sizes=(56, 70))):
        im.save(tmp_path / f"{i}.png")
    (tmp_path / "q.json").write_text(json.dumps(_rows(), indent=2))
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    return tmp_path


def test_prompt_lists_exactly_the_letters_present_and_the_shuffle_follows_the_seed():
    cands = ("High", "Medium", "Low")
    prompt, letters, order = lettered_prompt("How is the clarity?", cands, n_images=1, seed=3, index=7)
    assert letters == ("A", "B", "C")
    assert [line[:3] for line in prompt.splitlines() if line[1:3] == ". "] == ["A. ", "B. ", "C. "]
    assert "D." not in prompt
    assert [f"{letter}. {cands[i]}" in prompt for letter, i in zip(letters, order, strict=True)] == [True] * 3
    assert lettered_prompt("How is the clarity?", cands, n_images=1, seed=3, index=7)[2] == order  # reproducible
    orders = {tuple(lettered_prompt("q", cands, n_images=1, seed=s, index=i)[2]) for s in range(3) for i in range(8)}
    assert len(orders) >= 4  # shuffled, not one fixed order
    assert lettered_prompt("q", cands, n_images=1, seed=3, index=7, shuffle=False)[2] == [0, 1, 2]
    assert "first image" in lettered_prompt("Which is brighter?", cands, n_images=2, seed=0, index=0)[0]


def test_answers_are_the_letters_softmax_from_one_forward_pass_with_both_pair_images(qdir, tiny_vlm):
    questions, _ = load_questions(qdir / "q.json")
    calls = []
    hook = tiny_vlm.model.register_forward_hook(lambda *a: calls.append(1))
    try:
        answers = answer_questions(tiny_vlm, questions, seed=1, batch_size=16)
    finally:
        hook.remove()
    assert len(calls) == 1  # four questions (three singles and a pair) in one batched forward pass
    images = random_images(3, seed=5, sizes=(56, 70))
    for a, q, idx in zip(answers, questions, range(4), strict=True):
        prompt, letters, order = lettered_prompt(q.question, q.candidates, n_images=len(q.images), seed=1, index=idx)
        assert (a.letters, a.order) == (letters, order)
        group = [images[int(p.stem)] for p in q.images]
        oracle = next_token_logprobs(tiny_vlm, group, prompt)  # a plain forward pass, not option_logprobs
        lp = oracle[[word_id(tiny_vlm.tokenizer, "<|im_start|>assistant\n", letter) for letter in letters]]
        assert a.probs == pytest.approx(torch.softmax(lp, -1).tolist(), abs=1e-5)
        assert a.chosen == int(lp.argmax())
        assert a.letter_mass == pytest.approx(float(lp.exp().sum()), rel=1e-4) and 0 < a.letter_mass < 1
    pair = answers[3]
    swapped = Question((pair.question.images[0], questions[1].images[0]), *list(vars(pair.question).values())[1:])
    other = answer_questions(tiny_vlm, [*questions[:3], swapped], seed=1)[3]
    assert other.probs != pytest.approx(pair.probs, abs=1e-6)  # the second image is read, not ignored


def test_json_list_and_jsonl_give_the_same_answers_and_metrics(qdir, tiny_vlm_path):
    out = {}
    for fmt in ("json", "jsonl"):
        m = run_qbench(
            parse(
                QbenchEvalSettings,
                {
                    "task": "a1",
                    "model": {"path": str(tiny_vlm_path)},
                    "data": str(qdir / f"q.{fmt}"),
                    "out": str(qdir / fmt),
                    "seed": 2,
                },
            )
        )
        rows = [json.loads(line) for line in (qdir / fmt / "answers.jsonl").read_text().splitlines()]
        out[fmt] = (m, [(r["chosen"], r["probability"], r["correct"]) for r in rows])
        saved = json.loads((qdir / fmt / "metrics.json").read_text())
        assert isinstance(saved["accuracy"], float)
        assert saved["accuracy"] == pytest.approx(sum(r["is_correct"] for r in rows) / 4)
        assert saved["pair"]["n"] == 1 and saved["single"]["n"] == 3
        assert "| single |" in (qdir / fmt / "metrics.md").read_text()
    assert [r[::2] for r in out["json"][1]] == [r[::2] for r in out["jsonl"][1]]
    assert [r[1] for r in out["json"][1]] == pytest.approx([r[1] for r in out["jsonl"][1]], abs=1e-6)
    lines = [json.loads(x)["line"] for x in (qdir / "json" / "answers.jsonl").read_text().splitlines()]
    starts = [n for n, text in enumerate((qdir / "q.json").read_text().splitlines(), 1) if text == "  {"]
    assert lines == starts == [2, 13, 25, 38]  # where each object starts in the indented JSON list


def _answer(part: str, qtype: int, concern: int, correct: bool) -> Answer:
    images = (Path("a"),) if part == "single" else (Path("a"), Path("b"))
    q = Question(images, "q", ("x", "y"), "x", qtype, concern, 1)
    return Answer(q, ("A", "B"), [0, 1], [0.6, 0.4] if correct else [0.4, 0.6], 0 if correct else 1)


def test_metrics_split_singles_and_pairs_by_type_and_concern():
    answers = [
        _answer("single", 0, 0, True),
        _answer("single", 0, 1, False),
        _answer("single", 2, 1, True),
        _answer("pair", 1, 0, True),
        _answer("pair", 1, 2, False),
    ]
    m = perception_metrics(answers)
    assert m["accuracy"] == pytest.approx(3 / 5)
    assert m["single"]["accuracy"] == pytest.approx(2 / 3)
    assert m["single"]["by_type"]["yes-or-no"] == {"accuracy": 0.5, "n": 2}
    assert m["single"]["by_type"]["how"] == {"accuracy": 1.0, "n": 1}
    assert m["single"]["by_concern"]["global other"] == {"accuracy": 0.5, "n": 2}
    assert m["pair"]["by_concern"] == {
        "comparison distortion": {"accuracy": 1.0, "n": 1},
        "joint distortion": {"accuracy": 0.0, "n": 1},
    }


def test_bad_rows_are_named_by_file_and_line_or_skipped_and_counted(qdir, tiny_vlm_path):
    rows = _rows()
    rows[0]["img_path"] = "missing.png"
    rows[1]["correct_ans"] = "Very low"
    rows[2]["type"] = 7
    path = qdir / "bad.json"
    path.write_text(json.dumps(rows, indent=2))
    with pytest.raises(ManifestError, match=r"bad\.json:2: image 'missing.png' not found"):
        load_questions(path)
    questions, skipped = load_questions(path, skip_bad=True)
    assert [s.line for s in skipped] == [2, 13, 25] and len(questions) == 1
    assert "'correct_ans' 'Very low' is not among the candidates" in skipped[1].reason
    assert "unknown 'type' 7" in skipped[2].reason
    m = run_qbench(
        parse(
            QbenchEvalSettings,
            {
                "task": "a1",
                "model": {"path": str(tiny_vlm_path)},
                "data": str(path),
                "out": str(qdir / "o"),
                "skip_bad": True,
            },
        )
    )
    assert m["skipped"] == 3 and m["n"] == 1
    assert len((qdir / "o" / "skipped.jsonl").read_text().splitlines()) == 3


def test_prompts_follow_the_paper_layout_with_each_image_where_it_is_named(tiny_vlm):
    cands = ("The first image", "The second image")
    pair, _, _ = lettered_prompt("Which image is brighter?", cands, n_images=2, seed=0, index=0)
    rendered = tiny_vlm.render(2, pair)
    image = "<|vision_start|><|image_pad|><|vision_end|>"
    assert f"Which image is brighter?\nThe first image: {image}\nThe second image: {image}\nChoose between" in rendered
    single, _, _ = lettered_prompt("How is the clarity?", ("High", "Low"), n_images=1, seed=0, index=0)
    assert f"How is the clarity?\n{image}\nChoose between one of the following options:\nA. " in tiny_vlm.render(
        1, single
    )
    lmms, _, _ = lettered_prompt("Which image is brighter?", cands, n_images=2, seed=0, index=0, layout="lmms")
    assert tiny_vlm.render(2, lmms).count(image) == 2 and "Choose between" not in lmms and "<image>" not in lmms
    from reward.qbench.a2_description import PROMPTS

    described = tiny_vlm.render(2, PROMPTS["pair"])
    assert f"of the images in details.\nThe first image: {image}\nThe second image: {image}<|im_end|>" in described
    assert "shown first" not in described


LMMS_TABLE = [  # (reply, options, what lmms-eval's parser reads; None where it guesses at random)
    ("B", "pair", "B"),
    ("B.", "pair", "B"),
    ("(B)", "pair", "B"),
    ("B. The second image", "pair", "B"),
    ("Answer: B", "pair", "B"),
    ("The answer is B.", "pair", "B"),
    ("The second image", "pair", None),  # text is matched only in replies of more than five words
    ("The second image is brighter.", "pair", None),
    ("The second image is brighter than the first image.", "pair", "A"),  # both texts match: the last wins
    ("Medium", "hml", None),
    ("The clarity of the image is medium.", "hml", "B"),
    ("A blurry image, so the answer is C", "hml", "C"),
    ("No", "yn", None),
    ("No, the image is not blurry at all", "yn", "B"),
    ("b", "pair", None),
    ("B)", "pair", None),
]


def test_generated_replies_are_parsed_as_lmms_eval_parses_them_and_unparseable_ones_are_none():
    from reward.qbench.a1_perception import parse_choice

    options = {"pair": ["The first image", "The second image"], "hml": ["High", "Medium", "Low"], "yn": ["Yes", "No"]}
    for reply, kind, expected in LMMS_TABLE:
        letters = "ABC"[: len(options[kind])]
        assert parse_choice(reply, letters, options[kind])[0] == expected, reply


def test_generate_mode_answers_from_greedy_replies_and_metrics_record_the_protocol(qdir, tiny_vlm_path):
    from reward.qbench.a1_perception import parse_choice
    from reward.vlm import load_vlm

    cfg = {"task": "a1", "model": {"path": str(tiny_vlm_path)}, "data": str(qdir / "q.json"), "seed": 1}
    m = run_qbench(parse(QbenchEvalSettings, {**cfg, "out": str(qdir / "gen"), "a1": {"mode": "generate"}}))
    rows = [json.loads(line) for line in (qdir / "gen" / "answers.jsonl").read_text().splitlines()]
    questions, _ = load_questions(qdir / "q.json")
    vlm = load_vlm(tiny_vlm_path)
    images = random_images(3, seed=5, sizes=(56, 70))
    for i, (row, q) in enumerate(zip(rows, questions, strict=True)):
        prompt, letters, order = lettered_prompt(q.question, q.candidates, n_images=len(q.images), seed=1, index=i)
        group = [images[int(p.stem)] for p in q.images]
        assert row["reply"] == vlm.generate([group], [prompt], max_new_tokens=32)[0]  # greedy, 32 tokens
        letter, rule = parse_choice(row["reply"], letters, [q.candidates[k] for k in order])
        assert (row["chosen"], row["rule"]) == (letter, rule) and row["probability"] is None
        assert row["is_correct"] == (letter is not None and letter == row["correct"])  # unparseable: wrong
    assert m["unparsed"] == sum(r["chosen"] is None for r in rows)
    assert m["accuracy"] == pytest.approx(sum(r["is_correct"] for r in rows) / 4)
    saved = json.loads((qdir / "gen" / "metrics.json").read_text())
    assert saved["protocol"]["mode"] == "generate" and saved["protocol"]["max_new_tokens"] == 32
    assert saved["protocol"]["prompt"] == "paper" and saved["protocol"]["shuffle"] is True
    assert "(generate, paper prompt)" in (qdir / "gen" / "metrics.md").read_text()
    logprob = run_qbench(parse(QbenchEvalSettings, {**cfg, "out": str(qdir / "lp")}))
    assert logprob["protocol"]["mode"] == "logprob" and logprob["unparsed"] == 0
    with pytest.raises(ValueError, match="a1.mode='sample': choose one of logprob, generate"):
        run_qbench(parse(QbenchEvalSettings, {**cfg, "out": str(qdir / "bad"), "a1": {"mode": "sample"}}))


def test_harness_loading_knobs_reach_the_loaded_model(qdir, tiny_vlm_path):
    from reward.commands.qbench_eval import QbenchEvalSettings, _load_model
    from reward.core.config import parse

    model = {
        "path": str(tiny_vlm_path),
        "max_pixels": 112 * 112,
        "min_pixels": 56 * 56,
        "attn_implementation": "eager",
    }
    s = parse(QbenchEvalSettings, {"task": "a1", "data": "x", "out": "o", "model": model}, where="")
    vlm = _load_model(s)
    size = vlm.processor.image_processor.size
    assert (size["shortest_edge"], size["longest_edge"]) == (56 * 56, 112 * 112)
    assert vlm.model.config._attn_implementation == "eager"
