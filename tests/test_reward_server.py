"""Every VLM reward scored through OpenAI-compatible servers (reward.vlm.server) against loopback servers: the same
scores as in-process, the response prefix continued, URLs taking items in turn, a failing URL passing its items to the
next and used again once it recovers, a dead server giving counted failures instead of a crash, the key read from the
environment and never written, and one line naming each server when none answers at the start."""

from __future__ import annotations

import contextlib
import json
import math
import secrets
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch
from server_doubles import serve_scripted, serve_unauthorized

from conftest import random_images, tiny_reward_config
from reward import get_reward
from reward.core.errors import UserError
from reward.integrations.reward_set import RewardSet
from reward.testing.openai_server import serve_openai
from reward.vlm import OptionQuery
from reward.vlm.server import OpenAIBackend, ServerConfig, served_vlm

FAST_RETRY = {"max_retries": 0, "timeout": 30.0}  # the client's own retries wait 0.5 s, 1 s ...: tested once below
QUERY = OptionQuery("Rate the quality of the image.", ("good", "poor"), "The quality of the image is")
OPTIONS = [" good", " poor"]  # the tokens the scripted server lists


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
def test_two_servers_share_the_work_a_dead_server_passes_its_share_and_all_dead_is_counted_nones(tiny_vlm):
    images = random_images(8, seed=9)
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
        first = rewards.score(images)["qbench"]
        assert stats_a["requests"] == stats_b["requests"] == len(images) // 2  # in turn
        want = [float(v) for v in _qbench(tiny_vlm, images, QUERY)]
        assert first.raw == pytest.approx(want, abs=1e-4) and first.failed == 0

        b_stack.close()  # server B dies: its share goes to A
        second = rewards.score(images)["qbench"]
        assert second.failed == 0 and second.raw == pytest.approx(want, abs=1e-4)
        assert stats_a["requests"] == len(images) // 2 + len(images)

        stack.close()  # every server is gone: every item a counted failure, never an exception nor a number
    third = rewards.score(images)["qbench"]
    assert third.raw == [None] * len(images) and third.failed == len(images)
    assert reward.vlm.stats["failed_reasons"] == {"connection": len(images)}


def _qbench(vlm, images, query) -> torch.Tensor:
    logp = vlm.option_logprobs([[im] for im in images], [query]).logprobs[:, 0]
    return torch.sigmoid(logp[:, 0] - logp[:, 1])


def _gray(levels) -> list[list]:
    from PIL import Image

    return [[Image.new("RGB", (16, 16), (v, v, v))] for v in levels]


def test_urls_take_items_in_turn_a_failing_one_passes_them_on_and_is_used_again_once_it_recovers():
    a: dict = {}
    b: dict = {}
    with serve_scripted(OPTIONS, stats=a) as url_a, serve_scripted(OPTIONS, stats=b) as url_b:
        backend = OpenAIBackend(ServerConfig(base_urls=[url_a, url_b], model="tiny", concurrency=1, **FAST_RETRY))
        images = _gray(range(0, 240, 40))
        assert not backend.option_logprobs(images, [QUERY]).failed.any()
        assert a["requests"] == b["requests"] == 3  # in turn
        a["fault"] = "http_500"  # A fails every request: each of its items goes on to B, and is scored
        assert not backend.option_logprobs(images, [QUERY]).failed.any()
        assert (a["requests"], a["faults"], b["requests"]) == (6, 3, 9)  # asked again for each of its items
        a["fault"] = None  # A recovers: it takes its turn again
        assert not backend.option_logprobs(images, [QUERY]).failed.any()
        assert (a["requests"], b["requests"]) == (9, 12)
        assert backend.stats["failed"] == 0 and backend.stats["requests"] == 18


def test_a_url_not_reached_is_left_out_for_the_rest_of_the_call_and_all_urls_failing_is_a_counted_none():
    hung: dict = {}
    good: dict = {}
    with serve_scripted(OPTIONS, fault="hang", stats=hung) as url_hung, serve_scripted(OPTIONS, stats=good) as url:
        fast = {**FAST_RETRY, "timeout": 1.0}  # the hung server's one wait; the other answers in milliseconds
        backend = OpenAIBackend(ServerConfig(base_urls=[url_hung, url], model="tiny", concurrency=1, **fast))
        images = _gray(range(0, 240, 40))
        assert not backend.option_logprobs(images, [QUERY]).failed.any()
        assert hung["requests"] == 1 and good["requests"] == 6  # one timeout, not one per item whose turn it was
        backend.option_logprobs(images, [QUERY])
        assert hung["requests"] == 2  # a new call asks it again: a server that recovers is used
        dead = OpenAIBackend(ServerConfig(base_urls=[url_hung], model="tiny", **fast))
        out = dead.option_logprobs(images, [QUERY])
    assert out.failed.all() and torch.isnan(out.logprobs).all()  # None, never a made-up number
    assert dead.stats["failed_reasons"] == {"timeout": 6} and dead.stats["requests"] == 0


def test_the_client_retries_max_retries_times_on_one_server_then_the_item_fails_with_its_reason():
    stats: dict = {}
    with serve_scripted(OPTIONS, fault="http_500", stats=stats) as url:
        backend = OpenAIBackend(ServerConfig(base_urls=[url], model="tiny", max_retries=1))
        out = backend.option_logprobs(_gray([100]), [QUERY])  # the client waits about 0.5 s before its retry
    assert bool(out.failed[0, 0]) and stats["requests"] == 2
    assert backend.stats["failed_reasons"] == {"http_500": 1}


def test_the_key_comes_from_the_environment_variable_named_and_never_from_a_setting(monkeypatch):
    key = "vllm-" + "k3y" * 6
    monkeypatch.setenv("SCORER_SERVER_KEY", key)  # a name no rule knows as a secret's
    with serve_scripted(OPTIONS) as url:
        backend = served_vlm({"base_urls": [url], "model": "tiny", "api_key_env": "SCORER_SERVER_KEY"})
        assert all(client.api_key == key for client in backend.clients)
    with pytest.raises(UserError, match=r"server.api_key: a token or key is never a setting") as err:
        served_vlm({"base_urls": [url], "model": "tiny", "api_key": key})
    assert key not in str(err.value)


def test_no_server_at_the_start_is_one_line_naming_each():
    urls = ["http://127.0.0.1:9/v1", "http://127.0.0.1:7/v1"]
    with pytest.raises(UserError) as err:
        OpenAIBackend(ServerConfig(base_urls=urls, model="m", **FAST_RETRY))
    assert str(err.value).startswith("no scoring server answered (http://127.0.0.1:9/v1: APIConnectionError")
    assert "; http://127.0.0.1:7/v1: APIConnectionError" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="backend=openai needs server.base_urls"):
        get_reward("qbench", {"backend": "openai"})
    with pytest.raises(ValueError, match="reward.backend='remote': choose one of local, openai"):
        get_reward("qbench", {"backend": "remote", "model": "x"})


@pytest.mark.slow
def test_an_unserved_model_name_is_named_and_options_outside_a_short_top_k_fail_the_item(tiny_vlm, tiny_vlm_path):
    image = random_images(1, seed=4)[0]
    query = OptionQuery("Rate the quality of the image.", ("good", "poor"), "The quality of the image is")
    with serve_openai(tiny_vlm, model_name="scorer") as url:
        with pytest.raises(UserError, match=r"no server serves model 'tiny'; served: \['scorer'\]"):
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


def _with_password(url: str, password: str) -> str:
    return url.replace("http://", f"http://scorer:{password}@")


def test_a_key_a_server_echoes_and_a_urls_password_are_never_printed_nor_raised(monkeypatch, caplog):
    key, password = "sk-" + secrets.token_hex(16), secrets.token_hex(12)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with serve_unauthorized() as url:  # 401 to everything: "Incorrect API key provided: <the Authorization sent>"
        with pytest.raises(UserError) as refused:  # the key, sent as is; user:password, sent as Basic base64(...)
            OpenAIBackend(ServerConfig(base_urls=[url, _with_password(url, password)], model="tiny", **FAST_RETRY))
    message = str(refused.value)
    assert message.startswith(f"no scoring server answered ({url}: AuthenticationError: Error code: 401 - ")
    assert "Incorrect API key provided: <secret given>; http://<secret given>@127.0.0.1:" in message
    assert "Incorrect API key provided: Basic <secret given>)" in message
    assert key not in message and password not in message and "\n" not in message
    with serve_scripted(OPTIONS, fault="http_401") as url:  # models listed, every answer refused: a counted item
        backend = OpenAIBackend(ServerConfig(base_urls=[url], model="tiny", **FAST_RETRY))
        assert backend.option_logprobs(_gray([100]), [QUERY]).failed.all()
        with pytest.raises(RuntimeError) as chat:  # an agent's chat (PACE) that failed on every server
            backend.chat(["Describe the image."], _gray([100]))
    assert backend.stats["failed_reasons"] == {"http_401": 2} and "provided: <secret given>" in caplog.text
    assert key not in caplog.text + str(chat.value) and chat.value.__cause__ is None


@pytest.mark.slow
def test_a_served_run_prints_no_request_lines_no_password_and_no_key(tmp_path, monkeypatch, capfd):
    """evaluate through a chat judge at https://user:PASSWORD@host: our own lines, none of the HTTP client's 81 (one
    per request), and neither the password nor the key in any line or file."""
    from conftest import run_cli
    from reward.commands.evaluate import EvaluateSettings
    from reward.commands.evaluate import run as run_evaluate

    key, password = "sk-" + secrets.token_hex(16), secrets.token_hex(12)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    samples = Path(__file__).resolve().parents[1] / "reward" / "assets" / "samples" / "ratings.jsonl"
    stats: dict = {}
    with serve_scripted(['{"score": 5}', '{"score": 1}'], stats=stats) as url:
        argv = ["reward=chat-judge", f"reward.server.base_url={_with_password(url, password)}", f"data={samples}"]
        status = run_cli("evaluate", run_evaluate, [*argv, f"out={tmp_path / 'out'}"], schema=EvaluateSettings)
    printed = capfd.readouterr()
    lines = printed.out + printed.err
    assert status == 0 and stats["requests"] == 48 and "done: evaluate" in lines  # 12 images x 4 dimensions
    assert "HTTP Request" not in lines and "httpx" not in lines, lines[-2000:]
    assert password not in lines and key not in lines
    written = [p for p in sorted(tmp_path.rglob("*")) if p.is_file() and password.encode() in p.read_bytes()]
    assert written == [] and "<secret given>" in (tmp_path / "out" / "run.json").read_text()
