"""Q-Bench A2: descriptions from the paper's prompts, scored by an OpenAI-compatible judge (a loopback server here)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI, Request

from conftest import random_images
from reward.commands.qbench_eval import QbenchEvalSettings
from reward.commands.qbench_eval import run as run_qbench
from reward.core.config import parse
from reward.qbench.a2_description import PROMPTS, parse_score
from reward.testing.loopback import serve


def _judge_reply(text: str, round_: int) -> str:
    """Scripted judge: completeness always 2; precision 1, 0, 1, 0, 1 over rounds; relevance 2 stated after prose,
    except round 4, which states no score."""
    if "completely includes" in text:
        return "Score: 2"
    if "precisely reflects" in text:
        return f"Score: {1 - round_ % 2}"
    return "I cannot tell, maybe 1 or 2." if round_ == 4 else "Relevant throughout.\nScore: 2"


@pytest.fixture
def judge_server() -> Iterator[tuple[str, list[dict]]]:
    app = FastAPI()
    seen: list[dict] = []

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict:
        body = await request.json()
        seen.append(body)
        reply = _judge_reply(body["messages"][-1]["content"], int(body.get("seed", 0)))
        return {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    with serve(app) as url:
        yield f"{url}/v1", seen


def _descriptions(root: Path) -> Path:
    for i, im in enumerate(random_images(3, seed=31)):
        im.save(root / f"{i}.png")
    rows = [
        {"img_path": "0.png", "golden_description": "A sharp, well exposed photo with slight noise."},
        {"img_path": ["1.png", "2.png"], "golden_description": "The first image is darker than the second."},
    ]
    (root / "gold.json").write_text(json.dumps(rows, indent=2))
    return root / "gold.json"


def test_judge_scores_are_parsed_and_averaged_over_five_rounds(tmp_path, tiny_vlm_path, judge_server, monkeypatch):
    url, seen = judge_server
    monkeypatch.setenv("QB_TEST_KEY", "sk-test")
    cfg = {
        "task": "a2",
        "model": {"path": str(tiny_vlm_path)},
        "data": str(_descriptions(tmp_path)),
        "out": str(tmp_path / "out"),
        "a2": {
            "max_new_tokens": 6,
            "judge": {
                "base_url": url,
                "model": "judge-x",
                "api_key_env": "QB_TEST_KEY",
                "rounds": 5,
                "max_workers": 4,
            },
        },
    }
    m = run_qbench(parse(QbenchEvalSettings, cfg))
    assert len(seen) == 2 * 3 * 5 and {b["model"] for b in seen} == {"judge-x"}
    for part in ("single", "pair"):  # precision rounds 1,0,1,0,1 -> 0.6; relevance 2,2,2,2,(none) -> 2
        assert m[part] == {
            "completeness": 2.0,
            "precision": pytest.approx(0.6),
            "relevance": 2.0,
            "sum": pytest.approx(4.6),
            "n": 1,
            "n_scored": {"completeness": 1, "precision": 1, "relevance": 1},
            "incomplete": [],
            "p": {  # P0 / P1 / P2 over the valid rounds (Tables IV-V)
                "completeness": [0.0, 0.0, 1.0],
                "precision": pytest.approx([0.4, 0.6, 0.0]),
                "relevance": [0.0, 0.0, 1.0],
            },
        }
    rows = [json.loads(x) for x in (tmp_path / "out" / "descriptions.jsonl").read_text().splitlines()]
    assert [len(r["img_path"]) for r in rows] == [1, 2] and all(isinstance(r["description"], str) for r in rows)
    asked = [b["messages"][-1]["content"] for b in seen]
    assert any(rows[1]["golden"] in a and "[MLLM DESC]" in a for a in asked)
    assert "| pair |" in (tmp_path / "out" / "metrics.md").read_text()


def test_without_a_judge_descriptions_are_written_and_scoring_is_skipped(tmp_path, tiny_vlm_path, caplog):
    cfg = {
        "task": "a2",
        "model": {"path": str(tiny_vlm_path)},
        "data": str(_descriptions(tmp_path)),
        "out": str(tmp_path / "out"),
        "a2": {"max_new_tokens": 4},
    }
    with caplog.at_level(logging.WARNING):
        m = run_qbench(parse(QbenchEvalSettings, cfg))
    assert m == {"descriptions": 2, "skipped": 0, "scored": False}
    assert "no judge configured" in caplog.text and "a2.judge.base_url" in caplog.text
    assert not (tmp_path / "out" / "metrics.json").exists()
    assert len((tmp_path / "out" / "descriptions.jsonl").read_text().splitlines()) == 2


def test_paper_prompts_and_score_parsing():
    assert PROMPTS["single"].startswith("Describe the quality, aesthetics and other low-level appearance")
    assert PROMPTS["pair"].startswith("Compare and jointly analyze the quality")
    stated = ("Score: 1", "score:2.", "**Score:** 0", "Complete.\nScore: 2", "2")
    assert [parse_score(t) for t in stated] == [1, 2, 0, 2, 2]
    unstated = ("so 2.", "1.5 out of 2?", "Score: 1.5", "1 or 2", "There are 0 issues.", "n/a", "Score: 1\nScore: 2")
    assert [parse_score(t) for t in unstated] == [None] * len(unstated)  # never guessed from prose


def test_the_sum_is_never_taken_over_a_missing_dimension():
    from reward.qbench.a2_description import Description, description_metrics, format_description_table

    rows = [Description((Path("a.png"),), "gold", 1), Description((Path("b.png"),), "gold", 2)]
    scored = [
        {"completeness": 2.0, "precision": None, "relevance": 1.0},  # the judge never stated a precision score
        {"completeness": 1.0, "precision": 1.0, "relevance": 1.0},
    ]
    m = description_metrics(scored, rows)["single"]
    assert m["sum"] is None and m["incomplete"] == ["precision"]
    assert m["precision"] == 1.0 and m["n_scored"] == {"completeness": 2, "precision": 1, "relevance": 2}
    assert "no sum, the judge's replies gave no score for precision (1 of 2 rows)" in format_description_table(
        {"single": m}
    )
    complete = description_metrics([scored[1], scored[1]], rows)["single"]
    assert complete["sum"] == pytest.approx(3.0) and complete["incomplete"] == []
