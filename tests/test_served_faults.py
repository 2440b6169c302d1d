"""Served rewards never invent a score and never end a run on one malformed answer: options a server's top-k does
not resolve, malformed log-probs and every malformed 200 answer of the fault-injecting loopback server
(tests/server_doubles.py: serve_scripted) fail their item with a counted reason, and evaluate completes (or,
when nothing could be scored, stops with one line)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import initialize_config_dir
from PIL import Image
from server_doubles import FAULTS, scripted_top, serve_scripted

from reward import get_reward
from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.core.cli import compose
from reward.core.config import parse
from reward.eval.evaluation import NothingScored
from reward.vlm import OptionQuery
from reward.vlm.server import AnswerError, OpenAIBackend, ServerConfig, letter_logprobs

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
QUERY = OptionQuery("Rate the quality of the image.", ("good", "poor"), "The quality of the image is")
OPTIONS = [" good", " poor"]  # the tokens the server lists (the separator is a space after the prefix)
FAST = {"max_retries": 0, "timeout": 30.0}


def _reason(call) -> str:
    with pytest.raises(AnswerError) as err:
        call()
    return err.value.reason


def test_an_option_the_top_k_does_not_list_is_never_given_a_share_of_the_unlisted_mass():
    ln = math.log
    # none of the options listed, 0.2 unlisted: the old rule gave each option 0.1 (qbench 0.5 for every image)
    assert _reason(lambda: letter_logprobs([("x", ln(0.5)), ("y", ln(0.3))], ["A", "B"])) == "options_absent"
    # the listed mass is all other words: the old rule gave each option 0 (a NaN score with missing mass 0)
    assert _reason(lambda: letter_logprobs([("x", ln(0.7)), ("y", ln(0.3))], ["A", "B"])) == "options_absent"
    # B absent from a top-3, which proves nothing about it without a tokenizer (B may be several tokens)
    top = [("A", ln(0.6)), ("x", ln(0.3)), ("y", ln(0.0999))]
    assert _reason(lambda: letter_logprobs(top, ["A", "B"], single_tokens=False)) == "options_absent"
    # with a tokenizer B is one token, at most min(p_k, unlisted) = min(0.0999, 0.0001) = 0.0001 of 0.6001
    logprobs, share = letter_logprobs(top, ["A", "B"], single_tokens=True)
    assert logprobs == [pytest.approx(ln(0.6)), -math.inf]  # B as 0, never as a share
    assert share == pytest.approx(0.0001 / 0.6001, rel=1e-3)
    # B could hold min(0.05, 0.3) = 0.05 of 0.1 + 0.05: more than the default bound of 0.01
    wide = [("A", ln(0.1)), ("x", ln(0.55)), ("y", ln(0.05))]
    assert _reason(lambda: letter_logprobs(wide, ["A", "B"])) == "missing_mass"
    assert ServerConfig().max_missing_mass == 0.01
    assert letter_logprobs(wide, ["A", "B"], max_missing_mass=0.5)[1] == pytest.approx(0.05 / 0.15)


def test_malformed_log_probs_fail_and_a_token_listed_twice_counts_once_at_its_larger_value():
    assert _reason(lambda: letter_logprobs([("A", 0.5), ("B", -2.0)], ["A", "B"])) == "positive_logprob"
    assert _reason(lambda: letter_logprobs([("A", math.nan), ("B", -2.0)], ["A", "B"])) == "bad_logprob"
    assert _reason(lambda: letter_logprobs([("A", None), ("B", -2.0)], ["A", "B"])) == "malformed"
    assert _reason(lambda: letter_logprobs([("A", -0.1), ("B", -0.2)], ["A", "B"])) == "bad_logprob"  # sum 1.72
    logprobs, share = letter_logprobs([("A", -3.0), ("B", -1.0), ("A", -2.0)], ["A", "B"])
    assert logprobs == [-2.0, -1.0] and share == 0.0  # the last copy (-2.0) is kept because it is the larger
    logprobs, _ = letter_logprobs([("A", -2.0), ("B", -1.0), ("A", -3.0)], ["A", "B"])
    assert logprobs == [-2.0, -1.0]  # the same whatever the order


def _backend(url: str, **server) -> OpenAIBackend:
    return OpenAIBackend(ServerConfig(base_urls=[url], model="tiny", **{**FAST, **server}))


def _gray(levels) -> list[Image.Image]:
    return [Image.fromarray(np.full((16, 16, 3), v, np.uint8)) for v in levels]


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_malformed_answer_fails_its_item_with_its_reason_and_never_raises(fault):
    stats: dict = {}
    with serve_scripted(OPTIONS, fault=fault, fault_every=2, stats=stats) as url:
        backend = _backend(url)
        out = backend.option_logprobs([[im] for im in _gray([40, 120, 200, 250])], [QUERY])
    assert out.failed[:, 0].sum() == 2 and stats["faults"] == 2 and stats["requests"] == 4  # never retried
    assert torch.isnan(out.logprobs[out.failed]).all() and torch.isfinite(out.logprobs[~out.failed]).all()
    assert backend.stats["failed"] == 2 and dict(backend.stats["failed_reasons"]) == {FAULTS[fault]: 2}
    assert backend.stats["answers"] == 2 and backend.stats["requests"] == 4  # answered, half of them malformed


def test_the_scripted_answers_score_what_the_script_says():
    with serve_scripted(OPTIONS) as url:
        out = _backend(url).option_logprobs([[im] for im in _gray([0, 255])], [QUERY])
    for row, brightness in zip(out.logprobs[:, 0], (0.0, 1.0), strict=True):
        want = [v for _, v in scripted_top(OPTIONS, brightness)[:2]]
        assert row.tolist() == pytest.approx(want, abs=1e-6)


def test_with_a_tokenizer_an_absent_option_is_bounded_and_fails_only_beyond_max_missing_mass(tiny_vlm_path):
    with serve_scripted(OPTIONS, fault="option_missing") as url:  # " good" alone at 0.9 x w, " poor" absent
        backend = _backend(url)
        backend.use_tokenizer(str(tiny_vlm_path))
        image = _gray([250])
        failed = backend.option_logprobs([image], [QUERY])
        p_good = math.exp(scripted_top(OPTIONS, 250 / 255)[0][1])
        share = min(p_good, 1 - p_good) / (min(p_good, 1 - p_good) + p_good)  # the k-th is " good" itself
        lenient = _backend(url, max_missing_mass=0.6)
        lenient.use_tokenizer(str(tiny_vlm_path))
        scored = lenient.option_logprobs([image], [QUERY])
    assert bool(failed.failed[0, 0]) and dict(backend.stats["failed_reasons"]) == {"missing_mass": 1}
    assert not scored.failed[0, 0] and scored.logprobs[0, 0, 1] == -math.inf  # taken as 0, never a share
    assert float(scored.missing_mass[0, 0]) == pytest.approx(share, rel=1e-5) and 0.01 < share < 0.6


def test_a_served_qbench_whose_top_k_names_no_option_scores_none_not_one_half(request):
    with serve_scripted(OPTIONS, fault="options_absent") as url:
        reward = get_reward("qbench", {"backend": "openai", "server": {"base_urls": [url], "model": "tiny", **FAST}})
        scores = reward.score(_gray([30, 220]))
    assert torch.isnan(scores.scores).all()  # before: 0.5 for every image, failed 0
    assert reward.vlm.stats["failed_reasons"] == {"options_absent": 2}


def _manifest(tmp: Path, n: int = 8) -> Path:
    (tmp / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        Image.fromarray(np.full((24, 24, 3), 30 * i, np.uint8)).save(tmp / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "lighting", "mos": 1 + 4 * i / (n - 1)})
    path = tmp / "ratings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _evaluate(url: str, data: Path, out: Path) -> dict:
    overrides = ["reward=qbench", "reward.backend=openai", "reward.model=null", f"data={data}", f"out={out}"]
    overrides += [f"+reward.server.base_urls=[{url}]", "reward.server.model=tiny", "num_workers=0"]
    overrides += [f"reward.server.{k}={v}" for k, v in FAST.items()]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return run_evaluate(parse(EvaluateSettings, compose("evaluate", overrides=overrides, schema=EvaluateSettings)))


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_evaluate_completes_through_every_malformed_answer_and_counts_it(fault, tmp_path):
    data = _manifest(tmp_path / "data")
    with serve_scripted(OPTIONS, fault=fault, fault_every=2) as url:
        metrics = _evaluate(url, data, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "metrics.json").read_text())
    server = written["meta"]["server"]
    assert server["failed"] == 4 and server["failed_reasons"] == {FAULTS[fault]: 4}
    assert written["lighting"]["n"] == 4 and metrics["skipped"] == 4  # the other half scored
    assert len((tmp_path / "out" / "scores.jsonl").read_text().splitlines()) == 4


def test_evaluate_where_every_request_fails_stops_with_one_line_naming_the_counts(tmp_path):
    data = _manifest(tmp_path / "data")
    with serve_scripted(OPTIONS, fault="html") as url, pytest.raises(NothingScored) as err:
        _evaluate(url, data, tmp_path / "out")
    assert "no row could be scored" in str(err.value)
    assert "reward qbench: 8 of 8 items failed (not_json 8)" in str(err.value)
    assert "\n" not in str(err.value)
