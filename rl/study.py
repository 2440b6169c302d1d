"""A blind pairwise study of a Best-of-N or GRPO run by people, as SA-IQA §4.4-4.5 ran theirs.

    python rl/study.py serve run=RUN study=STUDY [port=8765 seed=0 limit=null]   # raters open /?rater=NAME
    python rl/study.py report study=STUDY

``serve`` makes the study the first time (the run's pairs shuffled, each side drawn, the sources hidden), then serves
its page on 127.0.0.1: each answer is appended to ``answers/RATER.jsonl`` and flushed as it is given. ``report``: the
three percentages per rater and pooled, a sign test, a 95% Wilson interval, Fleiss' kappa (``report.json``).
"""

from __future__ import annotations

import json
import logging
import random
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
from omegaconf import MISSING

from reward.core.config import COUNT, parse
from reward.core.errors import UserError
from reward.core.outputs import prepare_output
from reward.core.summary import log_summary, text_table
from reward.data.files import append_jsonl, atomic_write_json, read_json_object, read_records, safe_name

logger = logging.getLogger(__name__)

SUBCOMMANDS = ("serve", "report")
NEEDS = {"serve": ("run",), "report": ()}
# run.json's command -> what its pair compares: the method, and the baseline it is judged against
KINDS = {
    "best_of_n": ("the reward's pick", "a random pick"),
    "grpo": ("the trained policy", "the base prompt"),
    "flow_grpo": ("the trained generator", "the base generator"),  # heldout/ as GRPO's: NNNN-policy.png, -base.png
}
CHOICES = ("left", "comparable", "right")


@dataclass
class StudySettings:
    cmd: str = field(default="serve", metadata={"help": "serve | report (the first word of the command line)"})
    study: str = field(
        default=MISSING, metadata={"help": "the study folder: study.json, images/, answers/RATER.jsonl, report.json"}
    )
    run: str | None = field(default=None, metadata={"help": "serve: the Best-of-N or GRPO run folder to judge"})
    seed: int = field(default=0, metadata={"help": "serve: the order of the pairs and the side of each image"})
    limit: int | None = field(default=None, metadata={"help": "serve: at most this many pairs", "range": COUNT})
    port: int = field(
        default=8765, metadata={"help": "serve: port on 127.0.0.1 (0: any free one)", "range": (0, 65535)}
    )
    overwrite: bool = field(
        default=False, metadata={"help": "serve: a study of another run in study= is moved aside, answers and all"}
    )


def run(cfg: Any) -> Any:
    from reward.core.cli import check_subcommand

    settings = parse(StudySettings, cfg, where="")
    check_subcommand(settings, NEEDS)
    return serve(settings) if settings.cmd == "serve" else report(Path(settings.study))


def pairs_of(run_dir: Path) -> tuple[str, list[dict[str, Any]]]:
    """What ``run_dir`` compares (its command) and its pairs: task, prompt and the two images (method, baseline)."""
    saved = read_json_object(run_dir / "run.json", "pass run= a Best-of-N or GRPO output folder")
    command = saved.get("command")
    if command not in KINDS or not saved.get("complete"):
        raise UserError(f"run={run_dir}: not a complete Best-of-N or GRPO run (run.json: {command}); finish it first")
    if command == "best_of_n":
        rows = [r for r in read_records(run_dir / "scores.jsonl") if "file" in r]
        files = [(r, *(run_dir / pick / r["file"] for pick in ("chosen", "random"))) for r in rows]
    else:
        folder = run_dir / "heldout"
        rows = read_records(folder / "pairs.jsonl")
        files = [(r, *(folder / f"{r['index']:04d}-{s}.png" for s in ("policy", "base"))) for r in rows]
    pairs = [
        {"task": r["task"], "prompt": r["prompt"], "method": str(a), "baseline": str(b)}
        for r, a, b in files
        if a.is_file() and b.is_file()
    ]
    if not pairs:
        where = "random/ (runs before it was saved lack it)" if command == "best_of_n" else "heldout/ (eval.every>0)"
        raise UserError(f"run={run_dir}: no pair of images to judge in {where}; run it again")
    return command, pairs


def build(study: Path, run_dir: Path, seed: int, limit: int | None) -> None:
    """``study.json`` (the pairs, shuffled, and each one's hidden sides) and the images under their side's name."""
    command, found = pairs_of(run_dir)
    rng = random.Random(seed)
    rng.shuffle(found)
    (study / "images").mkdir(exist_ok=True)
    pairs = []
    for k, pair in enumerate(found[:limit]):
        left = rng.choice(("method", "baseline"))
        right = "baseline" if left == "method" else "method"
        for side, source in (("left", left), ("right", right)):
            shutil.copyfile(pair[source], study / "images" / f"{k:04d}-{side}.png")
        pairs.append({"pair": k, "left": left, **pair})
    method, baseline = KINDS[command]
    record = {"command": command, "run": str(run_dir), "method": method, "baseline": baseline, "pairs": pairs}
    atomic_write_json(study / "study.json", record)


def answers(study: Path, rater: str) -> dict[int, str]:
    """A rater's answers, the last one per pair."""
    return {int(r["pair"]): r["choice"] for r in read_records(study / "answers" / f"{safe_name(rater)}.jsonl")}


def serve(settings: StudySettings) -> int:
    """Build the study the first time, then serve its page until Ctrl-C; returns the answers saved meanwhile."""
    study, run_dir = Path(settings.study), Path(settings.run or "")
    read = {name: run_dir / name for name in ("run.json", "chosen", "random", "heldout")}  # what a study reads
    record, inputs = {"seed": settings.seed, "limit": settings.limit}, {k: v for k, v in read.items() if v.exists()}
    if not (study / "study.json").is_file():
        pairs_of(run_dir)  # a bad run= is refused before the study folder is made
    _held = prepare_output(study, "study", record, inputs, resume=True, overwrite=settings.overwrite, out_key="study")
    if not (study / "study.json").is_file():
        build(study, run_dir, settings.seed, settings.limit)
    pairs = json.loads((study / "study.json").read_text())["pairs"]
    shown = [{"pair": p["pair"], "prompt": p["prompt"]} for p in pairs]
    page = resources.files("rl").joinpath("study.html").read_bytes()
    lock, saved = threading.Lock(), [0]

    class Page(BaseHTTPRequestHandler):
        def send(self, body: bytes, kind: str, status: int = 200) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urlsplit(self.path)
            image = re.fullmatch(r"/images/(\d{4,}-(left|right)\.png)", url.path)
            if url.path == "/":
                self.send(page, "text/html; charset=utf-8")
            elif url.path == "/state":
                rater = parse_qs(url.query).get("rater", [""])[0]
                self.send(json.dumps({"pairs": shown, "answered": answers(study, rater)}).encode(), "application/json")
            elif image and (study / "images" / image.group(1)).is_file():
                self.send((study / "images" / image.group(1)).read_bytes(), "image/png")
            else:
                self.send_error(404)

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                row = {"rater": str(body["rater"]).strip(), "pair": int(body["pair"]), "choice": body["choice"]}
            except (ValueError, KeyError, TypeError):
                row = {}
            if self.path != "/answer" or not row.get("rater") or row.get("pair") not in range(len(pairs)):
                return self.send_error(400, "POST /answer {rater, pair, choice: left|comparable|right}")
            if row["choice"] not in CHOICES:
                return self.send_error(400, f"choice: one of {', '.join(CHOICES)}")
            row["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
            with lock:
                append_jsonl(study / "answers" / f"{safe_name(row['rater'])}.jsonl", [row])
                saved[0] += 1
            self.send(b'{"saved": true}', "application/json")

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            logger.debug(format, *args)

    try:
        server = ThreadingHTTPServer(("127.0.0.1", settings.port), Page)
    except OSError as err:
        raise UserError(f"port={settings.port}: cannot listen ({err.strerror}); pass another port= (0: any)") from None
    url = f"http://127.0.0.1:{server.server_address[1]}/?rater=NAME"
    logger.info("%d pairs in %s: open %s (one NAME per rater); Ctrl-C stops", len(pairs), study, url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    log_summary("study serve", {"pairs": len(pairs), "answers saved": saved[0]}, {"answers": study / "answers"})
    return saved[0]


def tally(verdicts: list[int]) -> dict[str, Any]:
    """The three shares of ``verdicts`` (1: the method preferred, 0: comparable, -1: the baseline), the two-sided
    sign test of better vs worse and the 95% Wilson interval of the method's share of those decided.

    >>> t = tally([1] * 7 + [-1] + [0] * 2)
    >>> t["better"], t["comparable"], t["worse"], round(t["p_value"], 4), [round(x, 3) for x in t["ci95"]]
    (0.7, 0.2, 0.1, 0.0703, [0.529, 0.978])
    """
    from scipy.stats import binomtest

    n, better, worse = len(verdicts), verdicts.count(1), verdicts.count(-1)
    out: dict[str, Any] = {"n": n, "better": better / n, "comparable": verdicts.count(0) / n, "worse": worse / n}
    if better + worse:
        test = binomtest(better, better + worse)
        ci = [float(x) for x in test.proportion_ci(method="wilson")]
        out |= {"p_value": float(test.pvalue), "preferred": better / (better + worse), "ci95": ci}
    return out


def fleiss_kappa(counts: np.ndarray) -> float | None:
    """Fleiss' kappa of ``counts`` (pairs x categories: how many raters chose each; every pair by every rater).

    >>> round(fleiss_kappa(np.array([[2, 0, 0], [0, 2, 0], [1, 0, 1], [0, 0, 2]])), 4)  # (3/4 - 11/32) / (21/32)
    0.619
    """
    n = counts.sum(1)[0]
    agreement = ((counts**2).sum(1) - n) / (n * (n - 1))
    chance = ((counts.sum(0) / counts.sum()) ** 2).sum()
    return None if chance == 1 else float((agreement.mean() - chance) / (1 - chance))


def report(study: Path) -> dict[str, Any]:
    """The report of every answer so far (see the module docstring), also ``STUDY/report.json``."""
    record = read_json_object(study / "study.json", "pass study= a folder the study command's serve made")
    left = {p["pair"]: p["left"] for p in record["pairs"]}
    sign = {"left": 1, "comparable": 0, "right": -1}  # the left image preferred: its source's verdict
    raters: dict[str, dict[int, int]] = {}
    for file in sorted((study / "answers").glob("*.jsonl")):
        if rows := read_records(file):
            last = {int(r["pair"]): sign[r["choice"]] for r in rows}
            raters[rows[0]["rater"]] = {k: v if left[k] == "method" else -v for k, v in last.items()}
    if not raters:
        raise UserError(f"study={study}: no answers yet in {study / 'answers'}; serve the page to the raters first")
    pairs = sorted({k for verdicts in raters.values() for k in verdicts})
    rows = {name: tally(list(v.values())) for name, v in raters.items()}
    rows["all answers"] = tally([v for verdicts in raters.values() for v in verdicts.values()])
    net = [int(np.sign(sum(v.get(k, 0) for v in raters.values()))) for k in pairs]
    rows["pairs by net verdict"] = tally(net)
    common = [k for k in pairs if all(k in v for v in raters.values())]
    counts = np.array([[sum(v[k] == c for v in raters.values()) for c in (1, 0, -1)] for k in common])
    kappa = fleiss_kappa(counts) if len(raters) > 1 and common else None
    result = {
        **{k: record[k] for k in ("command", "run", "method", "baseline")},
        "pairs": len(record["pairs"]),
        "rows": rows,
        "fleiss_kappa": kappa,
        "kappa_pairs": len(common),
    }
    atomic_write_json(study / "report.json", result)
    logger.info("%s", report_text(result))
    log_summary("study report", {"raters": len(raters), "answers": rows["all answers"]["n"]}, {"report": study})
    return result


def report_text(result: dict[str, Any]) -> str:
    """The report as a table: a row per rater, then pooled (every answer; each pair by its raters' net verdict)."""
    pct = "{:.1%}".format
    table = [
        [
            name,
            str(t["n"]),
            *(pct(t[k]) for k in ("better", "comparable", "worse")),
            f"{t['p_value']:.2g}" if "p_value" in t else "n/a",
            f"{pct(t['preferred'])} [{pct(t['ci95'][0])}, {pct(t['ci95'][1])}]" if "ci95" in t else "n/a",
        ]
        for name, t in result["rows"].items()
    ]
    method, baseline = result["method"], result["baseline"]
    text = f"blind study of the {result['command']} run {result['run']} ({result['pairs']} pairs): the share of "
    text += f"answers preferring {method}, neither (comparable) or {baseline}\n"
    header = ["rater", "n", method, "comparable", baseline, "sign test p", f"{method} of decided [95% CI]"]
    text += text_table(header, table, [False, *[True] * 6])
    if (kappa := result["fleiss_kappa"]) is not None:
        text += f"\nFleiss' kappa {kappa:.3f} over the {result['kappa_pairs']} pairs every rater answered"
    return text


if __name__ == "__main__":
    from reward.core.cli import main

    main("study", run, schema=StudySettings, doc=__doc__, subcommands=SUBCOMMANDS)
