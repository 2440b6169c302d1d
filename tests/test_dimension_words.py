"""A new dimension is asked about in words: its key ``colour_cast`` is "colour cast" in every prompt a model reads
(SFT's queries, PACE's agents and Track 2), and stays the key in every file."""

from __future__ import annotations

import json

from pace_doubles import ScriptedBackend

from pace_judge.agents import AgentConfig, build_protocol
from pace_judge.protocol import protocol_to_dict
from pace_judge.tracks import rank_query
from training.prompts import build_prompt, response_prefix, scorer_metadata


def test_sft_asks_about_a_new_dimension_in_words_and_keeps_its_key_in_sa_iqa_json():
    assert (
        build_prompt("colour_cast", 1)
        == "Please evaluate the spatial aesthetic colour cast quality level of this image."
    )
    assert build_prompt("colour_cast", 2).startswith("<colour_cast>Please evaluate the spatial aesthetic colour cast ")
    assert response_prefix("colour_cast") == "The spatial aesthetic colour cast quality level of this image is"
    assert (
        response_prefix("lighting") == "The spatial aesthetic lighting quality level of this image is"
    )  # as released
    meta = scorer_metadata(["colour_cast"], prompt_type=4, definitions={})  # no definition: asked in plain words
    assert list(meta["queries"]) == ["colour_cast"] and meta["generic"] == ["colour_cast"]
    assert meta["queries"]["colour_cast"] == {
        "question": "Please evaluate the colour cast of this image.",
        "response_prefix": "The colour cast of this image is",
    }


def test_pace_asks_its_agents_and_track_2_about_the_words_and_keeps_the_key_in_the_protocol():
    rule = {"question": "Is there a colour tint?", "option_scores": {"Yes": 1, "No": 5}, "weight": 1.0}

    def script(prompt: str, n_images: int) -> str:
        if prompt.startswith("[Planning Agent]"):
            return json.dumps({"subdimensions": [{"name": n} for n in ("tint", "white balance", "grey neutrality")]})
        if prompt.startswith("[Critic Agent]"):
            return "Yes. Reason: observable"
        return json.dumps({"rules": [rule]})

    backend = ScriptedBackend(script)
    protocol = build_protocol(backend, "colour_cast", None, AgentConfig(), backbone="script")
    asked = [prompt for prompt, _ in backend.calls]
    assert asked and all("'colour cast'" in p and "colour_cast" not in p for p in asked), asked[0]
    assert protocol_to_dict(protocol)["dimension"] == "colour_cast"
    for variant in ("comparative", "scored"):
        question = rank_query("colour_cast", 4.5, 1.5, variant).question
        assert "colour cast" in question and "colour_cast" not in question, question
