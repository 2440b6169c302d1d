"""PACE agents with a scripted chat backend (the tiny random VLM cannot reason): robust parsing, Critic rounds,
retries, recorded failures, adversarial answers; and the tiny VLM itself failing cleanly through judge.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pace_doubles import ScriptedBackend

from conftest import random_images
from pace_judge.agents import AgentConfig, ProtocolBuildError, build_protocol, parse_json, parse_verdict
from pace_judge.commands.judge import JudgeSettings

ROOT = Path(__file__).resolve().parents[1]
PLAN = """Here is my decomposition:
```json
{'subdimensions': [{'name': 'micro-texture clarity', 'description': 'visible surface texture',},
                   {'name': 'surface smoothness'}, "material realism",],}
```
Let me know if you need more."""


def _rule(question, scores=None, **extra):
    return json.dumps(
        {
            "rules": [
                {
                    "question": question,
                    "option_scores": scores or {"Yes": 5, "Medium": 3, "No": 1},
                    "weight": 1.0,
                    **extra,
                }
            ]
        }
    )


def test_json_is_read_through_fences_prose_quotes_and_trailing_commas():
    assert parse_json("```\n[1, 2,]\n```") == [1, 2]
    assert parse_json('The answer {"a": {"b": "}"}, "c": true} done') == {"a": {"b": "}"}, "c": True}
    assert parse_json("{'ok': True, 'none': None, 'n': null}") == {"ok": True, "none": None, "n": None}
    assert parse_json('noise {not json} then {"x": 1}') == {"x": 1}
    with pytest.raises(ValueError, match="no JSON object"):
        parse_json("I cannot help with that.")
    with pytest.raises(ValueError, match="no JSON object"):
        parse_json("{'x': __import__('os').system('echo pwned')}")  # literals only: nothing is executed
    assert parse_verdict("Yes. Reason: edges are visible") == (True, "edges are visible")
    assert parse_verdict("**No**, Reason: needs the photographer's intent") == (
        False,
        "needs the photographer's intent",
    )
    assert parse_verdict('{"valid": false, "reason": "inverted"}') == (False, "inverted")
    with pytest.raises(ValueError, match="neither Yes nor No"):
        parse_verdict("Maybe.")


def test_critic_rejections_are_fed_back_and_revised_probes_accepted():
    def script(prompt: str, n_images: int) -> str:
        if prompt.startswith("[Planning Agent]"):
            return PLAN
        if prompt.startswith("[Critic Agent]"):
            if "beautiful" in prompt:
                return "No. Reason: subjective, not observable"
            if "Yes: 1," in prompt:
                return "No. Reason: the scoring mapping is inverted"
            return "Yes. Reason: observable"
        assert prompt.startswith("[Visualizer Agent]") and n_images == 1  # grounded on the example image
        if "micro-texture clarity" in prompt:
            if "first iteration" in prompt:
                return _rule("Is the surface beautiful?")
            assert "subjective, not observable" in prompt  # the Critic's reason reached the Visualizer
            return _rule("Is the fine texture of the surface visible?")
        if "surface smoothness" in prompt:
            if "Your previous answer could not be used" not in prompt:
                return _rule("Is the surface smooth?", {"Yes": 5, "Medium": 1, "No": 3})  # non-monotone
            assert "not monotone" in prompt
            return _rule("Is the surface smooth?", {"High/Yes": 5, "Medium": 3, "Low/No": 1}, zoom=False)
        if "first iteration" in prompt:
            return _rule("Does the material look real?", {"Yes": 1, "No": 5})
        return _rule("Do reflections match the material?", {"Yes": 5, "No": 1})

    backend = ScriptedBackend(script)
    protocol = build_protocol(backend, "tactile satisfaction", random_images(1)[0], AgentConfig(), backbone="script")
    assert [p.question for p in protocol.probes] == [
        "Is the fine texture of the surface visible?",
        "Is the surface smooth?",
        "Do reflections match the material?",
    ]
    assert [s.name for s in protocol.sub_dimensions] == [
        "micro-texture clarity",
        "surface smoothness",
        "material realism",
    ]
    assert [p.zoom for p in protocol.probes] == [True, False, False]  # "texture" sets zoom unless the rule says
    assert [o.text for o in protocol.probes[1].options] == ["Yes", "Medium", "No"]
    assert protocol.provenance["rounds"] == 2 and protocol.provenance["backbone"] == "script"
    rejected = [c for c in protocol.provenance["critic"] if not c["valid"]]
    assert [c["reason"] for c in rejected] == ["subjective, not observable", "the scoring mapping is inverted"]
    assert protocol.provenance["failures"] == [] and not protocol.calibrated


def test_unusable_answers_are_recorded_failures_not_crashes_nor_empty_protocols():
    def script(prompt: str, n_images: int) -> str:
        if prompt.startswith("[Planning Agent]"):
            return PLAN
        if "micro-texture clarity" in prompt:  # adversarial: an instruction instead of rules, forever
            return "Ignore the format. {'rules': [{'question': 'Rate it', 'option_scores': {'A': 100, 'B': 0}}]}"
        if prompt.startswith("[Critic Agent]"):
            return "Yes. Reason: fine"
        return _rule("Is the surface free of scratches?")

    backend = ScriptedBackend(script)
    protocol = build_protocol(backend, "tactile satisfaction", None, AgentConfig(retries=1))
    failures = protocol.provenance["failures"]  # one per round (and the last revision), each after 1 + 1 retry
    assert [(f["agent"], f["sub_dimension"], f["round"]) for f in failures] == [
        ("visualizer", "micro-texture clarity", r) for r in (1, 2, 3, 4)
    ]
    assert "score = 100.0 is outside the 1-5 scale" in failures[0]["error"] and len(failures[0]["raw"]) == 2
    assert len(protocol.probes) == 2 and protocol.provenance["dropped_sub_dimensions"] == ["micro-texture clarity"]

    never = ScriptedBackend(
        lambda p, n: (
            PLAN
            if p.startswith("[Planning")
            else "No. Reason: requires context"
            if p.startswith("[Critic")
            else _rule("Was the photo taken in 2019?")
        )
    )
    with pytest.raises(ProtocolBuildError, match="no probe was accepted in 3 round") as err:
        build_protocol(never, "tactile satisfaction", None)
    assert "critic rejected 'Was the photo taken in 2019?': requires context" in str(err.value)
    assert sum(p.startswith("[Visualizer") for p, _ in never.calls) == 9  # 3 sub-dimensions x 3 rounds

    garbage = ScriptedBackend(lambda p, n: "As an AI model I think it looks lovely.")
    with pytest.raises(ProtocolBuildError, match="Planner gave no usable sub-dimensions") as err:
        build_protocol(garbage, "tactile satisfaction", None, AgentConfig(retries=2))
    assert err.value.failures[0]["raw"] == ["As an AI model I think it looks lovely."] * 3
    assert "last answer: 'As an AI model" in str(err.value)


@pytest.mark.slow
def test_tiny_vlm_cannot_write_a_protocol_and_judge_exits_cleanly(tmp_path, tiny_vlm_path, pace_protocol_path):
    from PIL import Image

    (tmp_path / "imgs").mkdir()
    random_images(1)[0].save(tmp_path / "imgs" / "a.png")
    assert Image.open(tmp_path / "imgs" / "a.png").size == (56, 56)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "pace_judge/judge.py",
        "dimension=tactile satisfaction",
        f"images={tmp_path / 'imgs'}",
        f"out={tmp_path / 'out'}",
        f"model={tiny_vlm_path}",
        "+agents.max_new_tokens=24",
        "+agents.retries=1",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text[-3000:]
    assert "could not build a protocol for 'tactile satisfaction'" in text and "use a stronger backbone" in text
    assert "Traceback" not in text and not (tmp_path / "out" / "scores.jsonl").exists()
    failures = json.loads((tmp_path / "out" / "agent_failures.json").read_text())
    assert failures[0]["agent"] == "planner" and len(failures[0]["raw"]) == 2  # the raw answers, 1 + 1 retry
    # the folder keeps the failed attempt: the message says how to rerun (its advice, protocol=FILE, into the same
    # out= would otherwise be refused as another run), and following it works
    assert "rerun with another out= folder, or overwrite=true" in text, text[-3000:]
    from conftest import run_cli
    from pace_judge.commands.judge import run as judge

    argv = [f"protocol={pace_protocol_path}", f"images={tmp_path / 'imgs'}", f"out={tmp_path / 'out'}"]
    assert run_cli("judge", judge, [*argv, f"model={tiny_vlm_path}", "overwrite=true"], schema=JudgeSettings) == 0
    assert (tmp_path / "out" / "scores.jsonl").exists() and list(tmp_path.glob("out.old-*/agent_failures.json"))


def _plan3(prompt: str) -> str | None:
    if prompt.startswith("[Planning Agent]"):
        return '{"subdimensions": ["edges", "noise", "x"]}'
    return None


def test_a_sub_dimension_rejected_every_round_keeps_the_last_revision_as_algorithm_1_does():
    revisions = {"n": 0}

    def script(prompt: str, n_images: int) -> str:
        if plan := _plan3(prompt):
            return plan
        if prompt.startswith("[Critic Agent]"):
            return "No. Reason: still vague" if "x-rule" in prompt else "Yes. Reason: observable"
        sub = prompt.split("related to ")[1].split(" (")[0]
        if sub == "x":
            revisions["n"] += 1
            return _rule(f"Is x-rule {revisions['n']} visible?")
        return _rule(f"Are the {sub} clean?")

    backend = ScriptedBackend(script)
    protocol = build_protocol(backend, "crispness", None)  # on_reject=keep_last (the default)
    asked = [p for p, _ in backend.calls]
    assert sum(p.startswith("[Visualizer") and "related to x " in p for p in asked) == 4  # 3 rounds + the revision
    assert sum(p.startswith("[Critic") and "x-rule" in p.split("Rules already")[0] for p in asked) == 3
    assert [p.question for p in protocol.probes] == [
        "Are the edges clean?",
        "Are the noise clean?",
        "Is x-rule 4 visible?",
    ]
    assert protocol.provenance["unreviewed"] == [
        {"sub_dimension": "x", "question": "Is x-rule 4 visible?", "kept": "last_revision"}
    ]
    assert (
        protocol.provenance["unaccepted_sub_dimensions"] == ["x"]
        and protocol.provenance["dropped_sub_dimensions"] == []
    )
    assert "still vague" in asked[-1]  # the revision was made with the last critique

    dropped = build_protocol(ScriptedBackend(script), "crispness", None, AgentConfig(on_reject="drop"))
    assert [s.name for s in dropped.sub_dimensions] == ["edges", "noise"]  # §4.3 / A.6 / the released code
    assert dropped.provenance["dropped_sub_dimensions"] == ["x"]


def _stem(question: str) -> tuple[str, ...]:
    words = question.lower().rstrip("?").split()[2:]  # without "is the" / "are the"
    return tuple(w.rstrip("s") for w in words)


def test_the_critic_sees_earlier_rules_and_rejects_a_redundant_one():
    def script(prompt: str, n_images: int) -> str:
        if plan := _plan3(prompt):
            return plan
        if prompt.startswith("[Critic Agent]"):
            question = prompt.split('Question: "')[1].split('"')[0]
            listed = prompt.split("Rules already in this protocol")[1] if "Rules already" in prompt else ""
            listed_rules = [line.split('"')[1] for line in listed.splitlines() if line.startswith('- "')]
            same = any(_stem(question) == _stem(r) for r in listed_rules)  # "edges sharp" == "edge sharp"
            return "No. Reason: redundant" if same else "Yes. Reason: observable"
        sub = prompt.split("related to ")[1].split(" (")[0]
        if sub == "edges":
            rules = [
                {"question": "Is the edge sharp?", "option_scores": {"Yes": 5, "No": 1}},
                {"question": "Are the edges sharp?", "option_scores": {"Yes": 5, "No": 1}},
            ]
            return json.dumps({"rules": rules})
        return _rule(f"Is the {sub} pattern regular?")

    protocol = build_protocol(ScriptedBackend(script), "crispness", None, AgentConfig(rules_per_sub=2))
    assert [p.question for p in protocol.probes] == [
        "Is the edge sharp?",
        "Is the noise pattern regular?",
        "Is the x pattern regular?",
    ]
    verdicts = [(c["question"], c["valid"], c["reason"]) for c in protocol.provenance["critic"] if c["round"] == 1]
    assert ("Are the edges sharp?", False, "redundant") in verdicts and (
        "Is the edge sharp?",
        True,
        "observable",
    ) in verdicts
