"""Every VLM reward scored through OpenAI-compatible servers (reward.vlm.server) against loopback servers serving the
tiny VLM: the same scores as in-process, the response prefix continued, two servers sharing the work, a server that
dies giving counted failures instead of a crash (every server dead: one message from the circuit breaker), and a clear
error when no server answers at the start."""

from __future__ import annotations

import contextlib
import json
import math
import urllib.error
import urllib.request

import pytest
import torch

from conftest import random_images, tiny_reward_config
from reward import get_reward
from reward.integrations.reward_set import RewardSet
from reward.testing.openai_server import serve_openai
from reward.vlm import OptionQuery
from reward.vlm.server import OpenAIBackend, ServerConfig, ServersDown, ServerUnavailable

FAST_RETRY = {"backoff": 0.01, "backoff_max": 0.05, "max_retries": 2, "timeout": 30.0}


def _served(name: str, request, urls: list[str], top_k: int) -> dict:
    cfg = tiny_reward_config(name, request)
    if name == "pace":
        cfg.pop("model")  # nothing loads in this process
    server = {"base_urls": urls, "model": "tiny", "top_logprobs": top_k, **FAST_RETRY}
    return {**cfg, "backend": "openai", "server": server}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qbench", "sa-iqa", "pace"])
def test_a_served_reward_scores_as_the_in_process_one(name, request, tiny_vlm):
    images = random_images(3, seed=5, sizes=(56, 64))
    local_cfg = tiny_reward_config(name, request)
    if name == "pace":  # the pixel budget is the server's (the checkpoint's here): the same one in-process
        local_cfg["max_pixels"] = None
    local = get_reward(name, local_cfg).score(images)
    # a trained scorer's level words are in the top 20; the random tiny model's are not: ask for the whole vocabulary
    with serve_openai(tiny_vlm) as url:
        served = get_reward(name, _served(name, request, [url], len(tiny_vlm.tokenizer))).score(images)
    diff = (served.scores - local.scores).abs().max().item()
    assert diff < 1e-4, diff  # measured on 8 images: 2.1e-7 qbench, 4.8e-7 sa-iqa, 2.4e-7 pace
    assert set(served.dimensions) == set(local.dimensions)
    for d, v in local.dimensions.items():
        assert (served.dimensions[d] - v).abs().max().item() < 1e-4
    assert local.scores.std() > 1e-3  # different images score differently: the equality is not about a constant


@pytest.mark.slow
def test_the_loopback_server_continues_the_response_prefix_only_when_asked(tiny_vlm):
    image = random_images(1, seed=2)[0]
    query = OptionQuery("Rate the quality of the image.", ("good", "poor"), "The quality of the image is")
    want = tiny_vlm.option_logprobs([[image]], [query]).logprobs[0, 0]
    with serve_openai(tiny_vlm) as url:
        backend = OpenAIBackend(ServerConfig(base_urls=[url], model="tiny", top_logprobs=len(tiny_vlm.tokenizer)))
        got = backend.option_logprobs([[image]], [query]).logprobs[0, 0]
        from reward.vlm.server import messages

        body = {"model": "tiny", "messages": messages(query.question, [image], None, query.response_prefix)}
        body |= {"max_tokens": 1, "logprobs": True, "top_logprobs": 5}
        post = urllib.request.Request(f"{url}/chat/completions", json.dumps(body).encode(), method="POST")
        post.add_header("Content-Type", "application/json")
        with pytest.raises(urllib.error.HTTPError) as refused:  # the prefix without the flag
            urllib.request.urlopen(post, timeout=30)
    assert torch.allclose(got, want, atol=1e-5), (got, want)
    assert refused.value.code == 400 and "continue_final_message" in refused.value.read().decode()


@pytest.mark.slow
def test_two_servers_share_the_work_a_dead_server_gives_counted_nones_and_all_dead_stops_the_run(tiny_vlm):
    images = random_images(8, seed=9)
    query = OptionQuery("Rate the quality of the image.", ("good", "poor"), "The quality of the image is")
    stats_a: dict = {}
    stats_b: dict = {}
    with contextlib.ExitStack() as stack:
        url_a = stack.enter_context(serve_openai(tiny_vlm, stats=stats_a))
        b_stack = contextlib.ExitStack()
        url_b = b_stack.enter_context(serve_openai(tiny_vlm, stats=stats_b))
        k = len(tiny_vlm.tokenizer)
        server = ServerConfig(base_urls=[url_a, url_b], model="tiny", concurrency=4, top_logprobs=k, **FAST_RETRY)
        rewards = RewardSet([{"name": "qbench", "backend": "openai", "server": vars(server)}], normalize=False)
        reward = rewards.rewards[0].reward
        no_breaker = {**vars(server), "breaker_failures": 0}
        patient = RewardSet([{"name": "qbench", "backend": "openai", "server": no_breaker}], normalize=False)
        first = rewards.score(images)["qbench"]
        assert stats_a["requests"] > 0 and stats_b["requests"] > 0  # both servers worked
        assert stats_a["requests"] + stats_b["requests"] == len(images)
        want = [float(v) for v in _qbench(tiny_vlm, images, query)]
        assert first.raw == pytest.approx(want, abs=1e-4) and first.failed == 0

        b_stack.close()  # server B dies: its share goes to A after a retry
        second = rewards.score(images)["qbench"]
        assert second.failed == 0 and second.raw == pytest.approx(want, abs=1e-4)
        assert reward.vlm.stats["retries"] > 0

        stack.close()  # every server is gone: the breaker marks both down and the run stops with one message
    with pytest.raises(ServersDown, match="every scoring server is down"):
        rewards.score(images)
    assert reward.vlm.stats["marked_down"] >= 2
    third = patient.score(images)["qbench"]  # breaker_failures=0: failures, counted, and no exception
    assert third.raw == [None] * len(images) and third.failed == len(images)
    assert patient.rewards[0].reward.vlm.stats["failed_reasons"] == {"connection": len(images)}


def _qbench(vlm, images, query) -> torch.Tensor:
    logp = vlm.option_logprobs([[im] for im in images], [query]).logprobs[:, 0]
    return torch.sigmoid(logp[:, 0] - logp[:, 1])


def test_no_server_at_the_start_is_one_clear_error():
    with pytest.raises(ServerUnavailable, match=r"no scoring server answered:\n  - http://127.0.0.1:9/v1: "):
        OpenAIBackend(ServerConfig(base_urls=["http://127.0.0.1:9/v1"], model="m", **FAST_RETRY))
    with pytest.raises(ValueError, match="backend=openai needs server.base_urls"):
        get_reward("qbench", {"backend": "openai"})
    with pytest.raises(ValueError, match="reward.backend='remote': use local"):
        get_reward("qbench", {"backend": "remote", "model": "x"})


@pytest.mark.slow
def test_an_unserved_model_name_is_named_and_options_outside_a_short_top_k_fail_the_item(tiny_vlm, tiny_vlm_path):
    image = random_images(1, seed=4)[0]
    query = OptionQuery("Rate the quality of the image.", ("good", "poor"), "The quality of the image is")
    with serve_openai(tiny_vlm, model_name="scorer") as url:
        with pytest.raises(ServerUnavailable, match=r"no server serves model 'tiny'; served: \['scorer'\]"):
            OpenAIBackend(ServerConfig(base_urls=[url], model="tiny"))
        backend = OpenAIBackend(ServerConfig(base_urls=[url], top_logprobs=1))  # model: the only one served
        out = backend.option_logprobs([[image]], [query])
        backend.use_tokenizer(str(tiny_vlm_path))  # a tokenizer bounds absent words, but none is listed here
        bounded = backend.option_logprobs([[image]], [query])
    assert backend.model == "scorer"
    assert bool(out.failed[0, 0]) and torch.isnan(out.logprobs[0, 0]).all()  # never a share of the unlisted mass
    assert bool(bounded.failed[0, 0])
    assert dict(backend.stats["failed_reasons"]) == {"options_absent": 2}  # the top-1 is another word
    assert backend.stats["answers"] == 0 and math.isfinite(backend.stats["missing_mass_max"])
