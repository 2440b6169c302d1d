"""The OpenAI-compatible backend against a loopback server (fastapi/uvicorn) serving the tiny VLM."""

from __future__ import annotations

import pytest
import torch

from conftest import random_images
from pace_judge.config import PaceConfig
from pace_judge.pace import PaceReward
from pace_judge.tracks import SYSTEM
from reward.testing.openai_server import serve_openai
from reward.vlm import OptionQuery
from reward.vlm.server import OpenAIBackend, ServerConfig, served_vlm


@pytest.mark.slow
def test_remote_backend_scores_like_the_local_model_and_fails_letters_outside_a_short_top_k(
    tiny_vlm, pace_protocol_path
):
    images = random_images(2, seed=21)
    local = PaceReward(PaceConfig(model="x", protocol=str(pace_protocol_path)), backend=tiny_vlm)
    expected = local.judge(images)
    with serve_openai(tiny_vlm) as url:
        full = OpenAIBackend(ServerConfig(base_url=url, model="tiny", top_logprobs=len(tiny_vlm.tokenizer)))
        remote = PaceReward(PaceConfig(protocol=str(pace_protocol_path), backend="openai"), backend=full).judge(images)
        assert remote.scores.tolist() == pytest.approx(expected.scores.tolist(), abs=1e-4)
        assert remote.alpha2.tolist() == pytest.approx(expected.alpha2.tolist(), abs=1e-5)
        assert all("missing_mass" not in p for e in remote.explanations for p in e["probes"])

        query = local.scorer.queries[0]  # the first probe: three letters
        top3 = (
            tiny_vlm.option_logprobs(
                [[images[0]]], [OptionQuery(query.question, ("A",), "")], system=SYSTEM, return_vocab=True
            )
            .vocab.reshape(-1)
            .exp()
            .topk(3)
        )
        ids = tiny_vlm.candidate_ids(query)
        absent = [i for i in ids if i not in top3.indices.tolist()]
        assert absent, "the tiny model should leave some letter outside its top 3 (else this test proves little)"
        short = OpenAIBackend(ServerConfig(base_url=url, model="tiny", top_logprobs=3))
        got = short.option_logprobs([[images[0]]], [query], system=SYSTEM)
        assert bool(got.failed[0, 0]) and dict(short.stats["failed_reasons"]) == {"options_absent": 1}
        # a share of the unlisted mass is never given to an absent letter: the judge's score of it is NaN (None)
        judged = PaceReward(PaceConfig(protocol=str(pace_protocol_path), backend="openai"), backend=short).judge(
            images
        )
        assert torch.isnan(judged.scores).all()

        answer = full.chat(["Describe the image."], [[images[1]]], max_new_tokens=6)
        assert answer == tiny_vlm.generate([[images[1]]], ["Describe the image."], max_new_tokens=6)
    assert torch.isfinite(remote.scores).all()


def test_remote_backend_config_errors_are_clear():
    with pytest.raises(ValueError, match="backend=openai needs server.base_url"):
        OpenAIBackend(ServerConfig(model="m"))
    with pytest.raises(ValueError, match="unknown key server.top_k"):
        served_vlm({"base_url": "http://127.0.0.1:9/v1", "model": "m", "top_k": 5})
