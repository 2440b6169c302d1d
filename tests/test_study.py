"""rl/study.py: the blind pairwise study. The report's numbers against hand-computed ones; the page driven in Debian's
headless chromium over the DevTools protocol (a key and a click answer pairs, each saved as given, a reload resumes);
the served command on a real Best-of-N run; its refusals; its server spoken to over HTTP on loopback as another site,
a rebound name or a careless client would (tests/test_bad_inputs.py has the bad files)."""

from __future__ import annotations

import base64
import http.client
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from PIL import Image

from reward.core.cli import compose
from reward.core.config import parse
from reward.core.errors import UserError
from rl.commands.best_of_n import BestOfNSettings
from rl.commands.best_of_n import run as run_best_of_n
from rl.study import StudySettings, listen, run
from training.procedural.synthetic import write_inpainting_tasks

ROOT = Path(__file__).resolve().parents[1]
JSON = {"Content-Type": "application/json"}
Z = 1.959963984540054  # the 97.5% normal quantile


def _study(*args: str):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("study", list(args), schema=StudySettings, subcommands=("serve", "report"))
        return run(parse(StudySettings, cfg))


def _wilson(k: int, n: int) -> list[float]:
    p, z2 = k / n, Z * Z
    centre, half = (p + z2 / (2 * n)) / (1 + z2 / n), Z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return [centre - half, centre + half]


RECORD = {"command": "best_of_n", "run": "RUN", "method": "the reward's pick", "baseline": "a random pick"}


def test_the_report_gives_the_three_percentages_a_sign_test_an_interval_and_fleiss_kappa(tmp_path):
    pairs = [{"pair": k, "left": side, "prompt": "p"} for k, side in enumerate(["method", "baseline"] * 2)]
    (tmp_path / "study.json").write_text(json.dumps({**RECORD, "pairs": pairs}))
    (tmp_path / "answers").mkdir()
    answers = {"a": ["left", "right", "comparable", "right", "left"], "b": ["left", "right", "comparable", "right"]}
    for rater, choices in answers.items():  # a answers pair 1 twice: "right", then "left" (the last one counts)
        order = [0, 1, 2, 3, 1][: len(choices)]
        rows = [{"rater": rater, "pair": k, "choice": c} for k, c in zip(order, choices, strict=True)]
        (tmp_path / "answers" / f"{rater}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = _study("report", f"study={tmp_path}")
    rows = {**report["raters"], **report["pooled"]}
    # a: pair 0 left=method +1, pair 1 left=baseline -1, pair 2 0, pair 3 right=method +1 -> 2 / 1 / 1
    assert (rows["a"]["n"], rows["a"]["better"], rows["a"]["comparable"], rows["a"]["worse"]) == (4, 0.5, 0.25, 0.25)
    assert rows["a"]["p_value"] == pytest.approx(1.0) and rows["a"]["ci95"] == pytest.approx(_wilson(2, 3))
    # b: +1 +1 0 +1 -> sign test two-sided 2 * (1/2)^3
    assert (rows["b"]["better"], rows["b"]["worse"], rows["b"]["p_value"]) == (0.75, 0.0, pytest.approx(0.25))
    assert rows["b"]["ci95"] == pytest.approx(_wilson(3, 3))
    # every answer: 5 / 2 / 1, p = 2 * (C(6,5) + C(6,6)) / 2^6; each pair by its net verdict: +1, 0, 0, +1
    pooled, net = rows["all answers"], rows["pairs by net verdict"]
    assert (pooled["better"], pooled["comparable"], pooled["worse"]) == (0.625, 0.25, 0.125)
    assert pooled["p_value"] == pytest.approx(14 / 64) and pooled["preferred"] == pytest.approx(5 / 6)
    assert (net["n"], net["better"], net["comparable"], net["p_value"]) == (4, 0.5, 0.5, pytest.approx(0.5))
    # Fleiss: per pair [2,0,0] [1,0,1] [0,2,0] [2,0,0] -> (3/4 - 30/64) / (1 - 30/64) = 9/17
    assert report["fleiss_kappa"] == pytest.approx(9 / 17) and report["kappa_pairs"] == 4
    assert json.loads((tmp_path / "report.json").read_text())["raters"]["a"]["n"] == 4


def test_a_folder_that_is_no_finished_best_of_n_or_grpo_run_is_named(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text(json.dumps({"command": "evaluate", "complete": True}))
    with pytest.raises(UserError, match=r"not a complete Best-of-N or GRPO run \(run.json: evaluate\)"):
        _study("serve", f"run={tmp_path / 'run'}", f"study={tmp_path / 'study'}", "port=0")
    with pytest.raises(UserError, match="no answers yet"):
        (tmp_path / "s").mkdir()
        (tmp_path / "s" / "study.json").write_text(
            json.dumps({**RECORD, "pairs": [{"pair": 0, "left": "method", "prompt": "p"}]})
        )
        _study("report", f"study={tmp_path / 's'}")


class Chromium:
    """Debian's chromium, headless, driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
    messages ended by a NUL byte, ours on its fd 3, its own on fd 4)."""

    def __init__(self, profile: Path) -> None:
        theirs_r, ours_w = os.pipe()
        ours_r, theirs_w = os.pipe()

        def fds() -> None:
            read, write = os.dup(theirs_r), os.dup(theirs_w)
            os.dup2(read, 3)
            os.dup2(write, 4)

        flags = "--headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update"
        args = [*flags.split(), "--disable-sync", "--no-first-run", "--window-size=1280,720"]
        self.proc = subprocess.Popen(
            ["chromium", *args, "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"],
            pass_fds=(3, 4),
            preexec_fn=fds,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(theirs_r)
        os.close(theirs_w)
        self.out, self.into, self.buffer, self.events, self.id = ours_r, ours_w, b"", [], 0
        target = next(t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", targetId=target["targetId"], flatten=True)["sessionId"]
        self.send("Page.enable", page=True)

    def _message(self) -> dict:
        while b"\0" not in self.buffer:
            ready, _, _ = select.select([self.out], [], [], 120)  # a guard against a hung browser, not a timing
            assert ready, "chromium stopped answering"
            self.buffer += os.read(self.out, 1 << 20)
        message, _, self.buffer = self.buffer.partition(b"\0")
        return json.loads(message)

    def send(self, method: str, page: bool = False, **params) -> dict:
        self.id += 1
        message = {"id": self.id, "method": method, "params": params, **({"sessionId": self.session} if page else {})}
        os.write(self.into, json.dumps(message).encode() + b"\0")
        while (reply := self._message()).get("id") != self.id:
            self.events.append(reply.get("method"))
        assert "error" not in reply, reply
        return reply["result"]

    def open(self, url: str) -> None:
        """Navigate and wait for the load event, then for the page's first fetch of the rater's state."""
        self.events.clear()
        self.send("Page.navigate", page=True, url=url)
        while "Page.loadEventFired" not in self.events:
            self.events.append(self._message().get("method"))
        self.js("ready")

    def js(self, expression: str):
        reply = self.send("Runtime.evaluate", page=True, expression=expression, awaitPromise=True, returnByValue=True)
        return reply["result"].get("value")

    def key(self, key: str, code: int) -> None:
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", page=True, type=kind, key=key, code=key, windowsVirtualKeyCode=code)

    def click(self, selector: str) -> None:
        box = self.js(f"JSON.stringify(document.querySelector('{selector}').getBoundingClientRect())")
        box = json.loads(box)
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", page=True, type=kind, x=x, y=y, button="left", clickCount=1)

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", page=True)["data"]))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        os.close(self.out)
        os.close(self.into)


@pytest.fixture(scope="module")
def best_of_n_run(tmp_path_factory) -> Path:
    """A finished Best-of-N run: 4 procedural tasks, the best of 4 by scene-proxy."""
    folder = tmp_path_factory.mktemp("bon")
    manifest = write_inpainting_tasks(folder / "tasks", 4, size=64, seed=1)
    overrides = ["reward=scene-proxy", f"data={manifest}", f"out={folder / 'run'}", "n=4", "sheets=false"]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        run_best_of_n(parse(BestOfNSettings, compose("best_of_n", overrides, schema=BestOfNSettings)))
    return folder / "run"


def _serve(*args: str) -> tuple[subprocess.Popen, str]:
    """The command itself in a process of its own; its page's address, read from its log line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(ROOT / "rl" / "study.py"), "serve", *args, "port=0"]
    server = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as at a terminal, even under `make test &`
    )
    for line in server.stdout:
        if "open http://" in line:
            return server, line.split("open ")[1].split("/?")[0]
    raise AssertionError(f"the server never said where it listens (exit {server.wait()})")


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="no chromium (.ci/run installs it: apt-get install chromium)"
)
def test_the_page_in_a_real_browser_saves_each_answer_as_given_and_the_report_counts_them(best_of_n_run, tmp_path):
    study = tmp_path / "study"
    server, url = _serve(f"run={best_of_n_run}", f"study={study}")
    record = json.loads((study / "study.json").read_text())
    assert len(record["pairs"]) == 4 and {p["left"] for p in record["pairs"]} <= {"method", "baseline"}
    assert sorted(p.name for p in (study / "images").iterdir())[:2] == ["0000-left.png", "0000-right.png"]
    browser = Chromium(tmp_path / "profile")
    try:
        browser.open(f"{url}/?rater=alice")
        assert browser.js("document.body.dataset.pair") == "0"
        assert browser.js("document.getElementById('left').src").endswith("/images/0000-left.png")  # no source named
        browser.key("ArrowLeft", 37)  # pair 0: the left image is better
        assert browser.js("idle().then(() => document.body.dataset.pair)") == "1"
        saved = [json.loads(line) for line in (study / "answers" / "alice.jsonl").read_text().splitlines()]
        assert [(r["rater"], r["pair"], r["choice"]) for r in saved] == [("alice", 0, "left")]  # on disk already
        browser.click("[data-choice=comparable]")  # pair 1: comparable, by mouse
        assert browser.js("idle().then(() => document.body.dataset.pair)") == "2"
        browser.open(f"{url}/?rater=alice")  # a closed and reopened page continues at the first unanswered pair
        assert browser.js("document.body.dataset.pair") == "2"
        assert "pair 3 of 4" in browser.js("document.getElementById('head').textContent")
        if os.environ.get("STUDY_SCREENSHOT"):
            browser.screenshot(Path(os.environ["STUDY_SCREENSHOT"]))
    finally:
        browser.close()
    request = urllib.request.Request(
        f"{url}/answer", json.dumps({"rater": "bob", "pair": 0, "choice": "right"}).encode(), JSON
    )
    assert json.load(urllib.request.urlopen(request)) == {"saved": True}  # a second rater, their own file
    with pytest.raises(urllib.error.HTTPError, match="400"):
        urllib.request.urlopen(
            urllib.request.Request(f"{url}/answer", b'{"rater": "bob", "pair": 9, "choice": "x"}', JSON)
        )
    server.send_signal(signal.SIGINT)  # Ctrl-C: the server stops and says what it saved
    assert "answers saved 3" in server.stdout.read() and server.wait() == 0
    report = subprocess.run(
        [sys.executable, str(ROOT / "rl" / "study.py"), "report", f"study={study}"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    first = 1 if record["pairs"][0]["left"] == "method" else -1  # alice's "left" on pair 0, in the method's terms
    alice = json.loads((study / "report.json").read_text())["raters"]["alice"]
    assert (alice["n"], alice["comparable"], alice["better"], alice["worse"]) == (
        2,
        0.5,
        0.5 * (first > 0),
        0.5 * (first < 0),
    )
    assert "the reward's pick of decided" in report and "Fleiss' kappa" in report


# ------------------------------------------------------------------------------------------ the server, over HTTP


def write_run(folder: Path, command: str = "best_of_n") -> Path:
    """A finished run's files as its command writes them, two pairs of PNGs: Best-of-N's ``run.json``,
    ``scores.jsonl`` (a row per task, naming its picks' file), ``chosen/`` and ``random/``; GRPO's
    ``heldout/pairs.jsonl`` (a row per task, by index) and ``heldout/NNNN-policy.png`` / ``NNNN-base.png``."""
    run = folder / "run"
    rows = [{"index": i, "task": f"tasks.jsonl:{i + 1}", "prompt": f"a bright room {i}"} for i in range(2)]
    if command == "best_of_n":
        images = {
            f"{pick}/t{i}.png": 200 - 100 * j + i for i in range(2) for j, pick in enumerate(("chosen", "random"))
        }
        rows, table = [{**r, "file": f"t{r['index']}.png"} for r in rows], run / "scores.jsonl"
    else:
        images = {
            f"heldout/{i:04d}-{s}.png": 200 - 100 * j + i for i in range(2) for j, s in enumerate(("policy", "base"))
        }
        table = run / "heldout" / "pairs.jsonl"
    for name, level in images.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (level, level, level)).save(run / name)
    table.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "run.json").write_text(json.dumps({"command": command, "complete": True}))
    return run


@contextmanager
def _serving(tmp_path: Path, command: str = "best_of_n") -> Iterator[tuple[str, Path]]:
    """The study of a run served in this process (``listen``, as ``serve`` does, then its loop in a thread): the
    server's ``host:port`` and the study folder. The socket listens before the loop runs: no wait for readiness."""
    study = tmp_path / "study"
    server = listen(StudySettings(study=str(study), run=str(write_run(tmp_path, command)), port=0))
    loop = threading.Thread(target=server.serve_forever, daemon=True)
    loop.start()
    try:
        yield f"127.0.0.1:{server.port}", study
    finally:
        server.shutdown()
        server.server_close()
        loop.join()


def _ask(host: str, method: str, path: str, body: bytes = b"", **headers: str) -> tuple[int, bytes]:
    """One request to the server at ``host`` with ``headers`` (``Host`` too: the default is ``host``); the status and
    the whole body of its answer (read to the end: the connection was not dropped)."""
    connection = http.client.HTTPConnection(host, timeout=60)
    try:
        headers = {"Host": host, **{k.replace("_", "-"): v for k, v in headers.items()}}
        connection.request(method, path, body if method == "POST" else None, headers)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


ANSWER = json.dumps({"rater": "alice", "pair": 0, "choice": "left"}).encode()


def test_the_server_answers_only_its_own_name_and_its_own_pages_json_posts(tmp_path):
    with _serving(tmp_path) as (host, study):
        port = host.split(":")[1]
        assert (
            _ask(host, "GET", "/")[0] == 200
            and _ask(f"localhost:{port}", "GET", "/", Host=f"localhost:{port}")[0] == 200
        )
        for other in ("evil.example", f"evil.example:{port}", "127.0.0.1:1", f"127.0.0.2:{port}"):  # DNS rebinding
            status, body = _ask(host, "GET", "/state?rater=alice", Host=other)
            assert status == 403 and b"answers only http://127.0.0.1" in body and b"pairs" not in body, other
            assert _ask(host, "POST", "/answer", ANSWER, Host=other, Content_Type="application/json")[0] == 403
        # a cross-site page: its fetch says where it comes from; its form (text/plain) needs no preflight
        assert (
            _ask(host, "POST", "/answer", ANSWER, Origin="http://evil.example", Content_Type="application/json")[0]
            == 403
        )
        assert _ask(host, "POST", "/answer", ANSWER, Origin="null", Content_Type="application/json")[0] == 403
        assert _ask(host, "POST", "/answer", ANSWER, Content_Type="text/plain")[0] == 415
        assert _ask(host, "POST", "/answer", ANSWER)[0] == 415  # no type at all
        assert not (study / "answers").exists()  # nothing of the above was saved
        own = f"http://127.0.0.1:{port}"
        assert _ask(host, "POST", "/answer", ANSWER, Origin=own, Content_Type="application/json")[0] == 200
        assert _ask(host, "PUT", "/answer", ANSWER)[0] == 501 and _ask(host, "OPTIONS", "/answer")[0] == 501
    assert [json.loads(line)["rater"] for line in (study / "answers" / "alice.jsonl").open()] == ["alice"]


def test_a_huge_deep_or_non_finite_body_is_answered_413_or_400_and_the_server_goes_on(tmp_path, capfd):
    json_type = {"Content_Type": "application/json"}
    with _serving(tmp_path) as (host, study):
        status, body = _ask(host, "POST", "/answer", b"{}", Content_Length=str(10**15), **json_type)
        assert status == 413 and b"at most" in body  # answered before a byte of it was read, nothing allocated
        assert _ask(host, "POST", "/answer", b"{}", Transfer_Encoding="chunked", **json_type)[0] == 411
        bad = {
            "nested 100,000 deep": b"[" * 100_000 + b"]" * 100_000,
            "Infinity": b'{"rater": "a", "pair": Infinity, "choice": "left"}',
            "NaN": b'{"rater": "a", "pair": NaN, "choice": "left"}',
            "a float pair": b'{"rater": "a", "pair": 0.0, "choice": "left"}',
            "a boolean pair": b'{"rater": "a", "pair": true, "choice": "left"}',
            "a pair the study has not": b'{"rater": "a", "pair": 2, "choice": "left"}',
            "a choice of none": b'{"rater": "a", "pair": 0, "choice": "same"}',
            "no rater": b'{"rater": "  ", "pair": 0, "choice": "left"}',
            "not UTF-8": b'{"rater": "\xe9", "pair": 0, "choice": "left"}',
            "not JSON": b"rater=a&pair=0",
            "a list": b"[1, 2]",
        }
        for case, sent in bad.items():
            status, body = _ask(host, "POST", "/answer", sent, **json_type)
            assert status == 400 and "error" in json.loads(body), case
        assert _ask(host, "GET", "/")[0] == 200  # still serving
    assert not (study / "answers").exists() and "Traceback" not in capfd.readouterr().err


def test_only_the_studys_own_pngs_are_served(tmp_path):
    with _serving(tmp_path) as (host, study):
        status, png = _ask(host, "GET", "/images/0000-left.png")
        assert status == 200 and png == (study / "images" / "0000-left.png").read_bytes()
        for path in (
            "/study.json",
            "/images/../study.json",
            "/images/%2e%2e/study.json",
            "/run.json",
            "/images/0002-left.png",
        ):
            assert _ask(host, "GET", path)[0] == 404, path
        (tmp_path / "secret.txt").write_text("secret")
        (study / "images" / "0001-left.png").unlink()
        (study / "images" / "0001-left.png").symlink_to(tmp_path / "secret.txt")
        (study / "images" / "0001-right.png").write_text("not an image")
        assert _ask(host, "GET", "/images/0001-left.png")[0] == 404  # a link out of the study
        assert _ask(host, "GET", "/images/0001-right.png")[0] == 404  # not a PNG


def test_a_raters_name_is_read_one_way_on_every_route_and_no_name_takes_a_pooled_rows_place(tmp_path):
    with _serving(tmp_path) as (host, study):
        for rater, pair in ((" bob ", 0), ("all  answers", 0), ("all answers", 1)):
            body = json.dumps({"rater": rater, "pair": pair, "choice": "left"}).encode()
            assert _ask(host, "POST", "/answer", body, Content_Type="application/json")[0] == 200
        for typed in ("%20bob%20", "bob", "%20%20bob"):  # the page reloaded with the name as typed, or not
            state = json.loads(_ask(host, "GET", f"/state?rater={typed}")[1])
            assert state["answered"] == {"0": "left"} and state["rater"] == "bob", typed  # not back at pair 1
    report = _study("report", f"study={study}")
    assert sorted(report["raters"]) == ["all answers", "bob"] and report["raters"]["all answers"]["n"] == 2
    assert report["pooled"]["all answers"]["n"] == 3 and report["pooled"]["pairs by net verdict"]["n"] == 2
    files = sorted(p.name for p in (study / "answers").iterdir())
    assert len(files) == 2 and files[1] == "bob.jsonl"  # a file per rater, whatever spaces were typed
