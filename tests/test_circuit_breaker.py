"""The circuit breaker of the served rewards (reward.vlm.server.ServerPool): a server failing breaker_failures tries
in a row is skipped for breaker_cooldown seconds, and when every server is down the run stops at once with one
message instead of waiting out every timeout of every item."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest
from hydra import initialize_config_dir
from PIL import Image

from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.core.cli import compose
from reward.testing.openai_server import serve_scripted
from reward.vlm import OptionQuery
from reward.vlm.server import OpenAIBackend, ServerConfig, ServersDown

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
QUERY = OptionQuery("Rate the quality of the image.", ("good", "poor"), "The quality of the image is")
OPTIONS = [" good", " poor"]


def _image(v: int = 100) -> list[list[Image.Image]]:
    return [[Image.fromarray(np.full((16, 16, 3), v, np.uint8))]]


def test_at_the_default_settings_a_failing_server_is_cut_off_after_breaker_failures_tries():
    defaults = ServerConfig()
    assert (defaults.breaker_failures, defaults.max_retries, defaults.breaker_cooldown) == (5, 3, 60.0)
    stats: dict = {}
    with serve_scripted(OPTIONS, fault="http_500", stats=stats) as url:
        backend = OpenAIBackend(ServerConfig(base_urls=[url], model="tiny"))  # the defaults users run
        first = backend.option_logprobs(_image(), [QUERY])  # 1 + max_retries = 4 tries: a failed item
        assert bool(first.failed[0, 0]) and stats["requests"] == 4
        assert dict(backend.stats["failed_reasons"]) == {"http_500": 1}
        with pytest.raises(ServersDown, match=r"every scoring server is down \(5 failed tries in a row; .*HTTP 500"):
            backend.option_logprobs(_image(), [QUERY])  # the 5th failed try marks the only server down
        assert stats["requests"] == 5 and backend.stats["marked_down"] == 1
        with pytest.raises(ServersDown):  # skipped while down: no request at all, no timeout waited
            backend.option_logprobs(_image(), [QUERY])
        assert stats["requests"] == 5


def test_a_hung_server_is_cut_off_and_the_other_server_takes_its_share():
    hung: dict = {}
    good: dict = {}
    with contextlib.ExitStack() as stack:
        url_hung = stack.enter_context(serve_scripted(OPTIONS, fault="hang", stats=hung))
        url_good = stack.enter_context(serve_scripted(OPTIONS, stats=good))
        server = ServerConfig(
            base_urls=[url_hung, url_good],
            model="tiny",
            timeout=0.5,
            breaker_failures=2,
            breaker_cooldown=600.0,
            backoff=0.01,
            backoff_max=0.02,
            concurrency=1,
        )
        backend = OpenAIBackend(server)
        groups = [g for v in range(0, 240, 30) for g in _image(v)]
        out = backend.option_logprobs(groups, [QUERY])
    assert not out.failed.any()  # every item answered, by the good server after a retry
    assert hung["requests"] == 2 and backend.stats["marked_down"] == 1  # then skipped: no third timeout
    assert good["requests"] == 8


def test_evaluate_against_a_hung_server_stops_with_one_message(tmp_path):
    (tmp_path / "img").mkdir()
    rows = []
    for i in range(6):
        Image.fromarray(np.full((16, 16, 3), 40 * i, np.uint8)).save(tmp_path / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "q", "mos": 1 + i * 0.5})
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with serve_scripted(OPTIONS, fault="hang") as url:
        overrides = ["reward=qbench", "reward.backend=openai", "reward.model=null", f"data={tmp_path / 'r.jsonl'}"]
        overrides += [f"out={tmp_path / 'out'}", f"+reward.server.base_urls=[{url}]", "reward.server.model=tiny"]
        overrides += ["num_workers=0", "reward.server.timeout=0.3", "reward.server.breaker_failures=2"]
        overrides += ["reward.server.max_retries=1", "reward.server.backoff=0.01", "reward.server.concurrency=1"]
        with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
            cfg = compose("evaluate", overrides=overrides, schema=EvaluateSettings)
        with pytest.raises(ServersDown, match=r"every scoring server is down \(2 failed tries in a row; .*timeout"):
            run_evaluate(cfg)


def test_breaker_settings_are_checked():
    with pytest.raises(ValueError, match="server.breaker_failures=-1"):
        OpenAIBackend(ServerConfig(base_urls=["http://127.0.0.1:9/v1"], model="m", breaker_failures=-1), check=False)
    with pytest.raises(ValueError, match=r"server.max_missing_mass=1.5: give a share in \[0, 1\)"):
        OpenAIBackend(ServerConfig(base_urls=["http://127.0.0.1:9/v1"], model="m", max_missing_mass=1.5), check=False)
