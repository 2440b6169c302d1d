"""A blind pairwise study of a Best-of-N or GRPO run by people, as SA-IQA §4.4-4.5 ran theirs.

    python rl/study.py serve run=RUN study=STUDY [port=8765 seed=0 limit=null]   # raters open /?rater=NAME
    python rl/study.py report study=STUDY

``serve`` makes the study the first time (the run's pairs shuffled, each side drawn, the sources hidden), then serves
its page on 127.0.0.1: each answer is appended to ``answers/RATER.jsonl`` and flushed as it is given. ``report``: the
three percentages per rater and pooled, a sign test, a 95% Wilson interval, Fleiss' kappa (``report.json``).
"""

from __future__ import annotations

import logging
import random
import shutil
import threading
import time
import unicodedata
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import MISSING

from reward.core.config import COUNT
from reward.core.errors import UserError
from reward.core.outputs import prepare_output
from reward.core.summary import log_summary, text_table
from reward.data.files import append_jsonl, atomic_write_json, read_json_object, safe_name
from reward.data.manifest import ManifestError, iter_jsonl, parse_json, resolve_image_path

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
SIDES = ("method", "baseline")
MAX_NAME = 100  # characters of a rater's name at most
POOLED = ("all answers", "pairs by net verdict")  # the report's pooled rows, apart from the raters'
RUN_FIX = "the run's files are its command's own: use the folder it wrote, unchanged"


@dataclass
class StudySettings:
    cmd: str = field(
        default="serve",
        metadata={"help": "serve | report (the first word of the command line)", "choices": SUBCOMMANDS},
    )
    study: str = field(
        default=MISSING,
        metadata={"help": "the study folder: study.json, images/, answers/RATER.jsonl, report.json", "output": True},
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

    def problems(self) -> list[str]:
        missing = [k for k in NEEDS.get(self.cmd, ()) if not getattr(self, k)]
        return [f"{self.cmd} needs {', '.join(f'{k}=...' for k in missing)}"] if missing else []


def run(settings: StudySettings) -> Any:
    return serve(settings) if settings.cmd == "serve" else report(Path(settings.study))


def rater_name(typed: Any) -> str:
    """A rater's name as every route reads it (the page's state, its answers, the report): Unicode NFC, white space
    at the ends dropped and inside made one space.

    >>> rater_name("  bob "), rater_name("Ann\tLee"), rater_name("e\u0301") == rater_name("\u00e9")
    ('bob', 'Ann Lee', True)
    """
    return " ".join(unicodedata.normalize("NFC", str(typed)).split())


def _field(row: dict[str, Any], key: str, kind: type, where: str, fix: str) -> Any:
    """``row[key]`` when it is a ``kind`` (an ``int`` never a bool), else a one-line error."""
    value = row.get(key)
    if isinstance(value, kind) and not isinstance(value, bool):
        return value
    got = "nothing" if value is None else f"{type(value).__name__} {value!r:.40}"
    raise UserError(f"{where}: {key!r} must be {'an integer' if kind is int else 'a text'}, got {got}; {fix}")


def _rows(path: Path, run_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """The rows of a run's JSONL file with their ``file:line`` (none when it is not there); a line that is not a JSON
    object is refused, and so is the file when it is a link out of the run."""
    if not path.is_file():
        return []
    if not path.resolve().is_relative_to(run_dir.resolve()):
        raise UserError(f"{path} leads to {path.resolve()}, outside the run {run_dir}; {RUN_FIX}")
    rows = []
    for line, row in iter_jsonl(path):
        if isinstance(row, ManifestError):
            raise UserError(f"{row} ({RUN_FIX})")
        rows.append((f"{path}:{line}", row))
    return rows


def _run_image(folder: Path, name: Any, run_dir: Path, where: str) -> Path | None:
    """The image ``name`` (a row's) in ``folder`` of the run: relative, inside the run even once links are followed,
    a PNG; ``None`` when the file is not there (a pair without it is left out)."""
    path = resolve_image_path(folder, name, where=where, fix=f"a run names its images inside it ({RUN_FIX}).")
    if not path.is_relative_to(run_dir.resolve()):
        raise UserError(f"{where}: {name!r} leads to {path}, outside the run {run_dir} (a link?); {RUN_FIX}")
    if not path.is_file():
        return None
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            kind = image.format
            image.verify()
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError):
        kind = None
    if kind != "PNG":
        raise UserError(f"{where}: {path} is not a PNG image; {RUN_FIX}")
    return path


def pairs_of(run_dir: Path) -> tuple[str, list[dict[str, Any]]]:
    """What ``run_dir`` compares (its command) and its pairs: task, prompt and the two images (method, baseline);
    every row and image checked (one line naming the file and line)."""
    saved = read_json_object(run_dir / "run.json", "pass run= a Best-of-N or GRPO output folder")
    command = saved.get("command")
    if command not in KINDS or not saved.get("complete"):
        raise UserError(f"run={run_dir}: not a complete Best-of-N or GRPO run (run.json: {command}); finish it first")
    pairs = []
    if command == "best_of_n":
        rows = [(w, r) for w, r in _rows(run_dir / "scores.jsonl", run_dir) if "file" in r]  # tasks with a pick
        sources = [
            (w, r, *(_run_image(run_dir / p, r["file"], run_dir, w) for p in ("chosen", "random"))) for w, r in rows
        ]
    else:
        folder = run_dir / "heldout"
        rows = _rows(folder / "pairs.jsonl", run_dir)
        sources = []
        for where, row in rows:
            index = _field(row, "index", int, where, RUN_FIX)
            images = (_run_image(folder, f"{index:04d}-{side}.png", run_dir, where) for side in ("policy", "base"))
            sources.append((where, row, *images))
    for where, row, method, baseline in sources:
        task, prompt = (_field(row, key, str, where, RUN_FIX) for key in ("task", "prompt"))
        if method and baseline:
            pairs.append({"task": task, "prompt": prompt, "method": str(method), "baseline": str(baseline)})
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
        left = rng.choice(SIDES)
        right = "baseline" if left == "method" else "method"
        for side, source in (("left", left), ("right", right)):
            shutil.copyfile(pair[source], study / "images" / f"{k:04d}-{side}.png")
        pairs.append({"pair": k, "left": left, **pair})
    method, baseline = KINDS[command]
    record = {"command": command, "run": str(run_dir), "method": method, "baseline": baseline, "pairs": pairs}
    atomic_write_json(study / "study.json", record)


def read_study(study: Path) -> dict[str, Any]:
    """``study.json``, every key the page and the report read checked (one line naming the file and the entry)."""
    path = study / "study.json"
    fix = "it is written by `study serve`: serve the run into a new study= folder"
    record = read_json_object(path, "pass study= a folder the study command's serve made")
    for key in ("command", "run", "method", "baseline"):
        _field(record, key, str, str(path), fix)
    pairs = record.get("pairs")
    if not isinstance(pairs, list) or not pairs:
        got = "nothing" if pairs is None else f"{type(pairs).__name__} {pairs!r:.40}"
        raise UserError(f"{path}: 'pairs' must be a list of the study's pairs, got {got}; {fix}")
    for k, pair in enumerate(pairs):
        where = f"{path}: pairs[{k}]"
        number = pair.get("pair") if isinstance(pair, dict) else None
        if not isinstance(number, int) or isinstance(number, bool) or number != k:
            raise UserError(f'{where} must be an object with "pair": {k}; {fix}')
        if pair.get("left") not in SIDES:
            raise UserError(f"{where}: 'left' must be 'method' or 'baseline', got {pair.get('left')!r:.40}; {fix}")
        _field(pair, "prompt", str, where, fix)
    return record


def check_answer(row: Any, pairs: int) -> tuple[str, int, str]:
    """An answer ``{rater, pair, choice}`` as (the rater's :func:`rater_name`, the pair, the choice), else a
    ``ValueError`` saying what is wrong: the one reading of an answer, posted by the page or read back.

    >>> check_answer({"rater": " bob ", "pair": 1, "choice": "left"}, pairs=2)
    ('bob', 1, 'left')
    >>> check_answer({"rater": "bob", "pair": 2, "choice": "same"}, pairs=2)
    Traceback (most recent call last):
    ValueError: 'pair' must be one of the study's pairs, an integer 0 to 1, got 2
    """
    if not isinstance(row, dict):
        raise ValueError(f"an answer is an object {{rater, pair, choice}}, got {type(row).__name__}")
    rater, pair, choice = row.get("rater"), row.get("pair"), row.get("choice")
    name = rater_name(rater) if isinstance(rater, str) else ""
    if not 0 < len(name) <= MAX_NAME:
        raise ValueError(f"'rater' must be a name of 1 to {MAX_NAME} characters, got {rater!r:.40}")
    if not isinstance(pair, int) or isinstance(pair, bool) or not 0 <= pair < pairs:
        raise ValueError(f"'pair' must be one of the study's pairs, an integer 0 to {pairs - 1}, got {pair!r:.40}")
    if choice not in CHOICES:
        raise ValueError(f"'choice' must be one of {', '.join(CHOICES)}, got {choice!r:.40}")
    return name, pair, choice


def read_answers(study: Path, pairs: int) -> dict[str, dict[int, str]]:
    """Every rater's answers (by :func:`rater_name`; the last one per pair) in ``answers/*.jsonl``: a line torn by a
    crash (not JSON) is left out, any other row that is no answer refused in one line naming its file and line."""
    raters: dict[str, dict[int, str]] = {}
    for file in sorted((study / "answers").glob("*.jsonl")):
        for line, raw in enumerate(file.read_bytes().splitlines(), start=1):
            try:
                row = parse_json(raw.decode("utf-8"))
            except ValueError:  # torn (or not UTF-8), or blank
                continue
            try:
                name, pair, choice = check_answer(row, pairs)
            except ValueError as err:
                raise UserError(f"{file}:{line}: {err}; answers are the page's own: fix or delete the line") from None
            raters.setdefault(name, {})[pair] = choice
    return raters


class StudyPage:
    """What the study's server reads and writes (:class:`rl.study_server.StudyServer`): each rater's state, their
    answers (appended to ``answers/RATER.jsonl`` and flushed before the page goes on; kept here too), the images."""

    def __init__(self, study: Path, held: Any) -> None:
        self.study, self.held = study, held  # the study folder's lock, held while it is served
        self.pairs = read_study(study)["pairs"]
        self.answered = read_answers(study, len(self.pairs))  # checked now, then kept with each answer saved
        self.shown = [{"pair": p["pair"], "prompt": p["prompt"]} for p in self.pairs]
        sides = [f"{k:04d}-{side}.png" for k in range(len(self.pairs)) for side in ("left", "right")]
        self.images = {f"/images/{name}": study / "images" / name for name in sides}
        self.lock, self.saved = threading.Lock(), 0

    def state(self, typed: str) -> dict[str, Any]:
        """The pairs (their prompts) and what the rater named ``typed`` answered already."""
        name = rater_name(typed)
        with self.lock:
            return {"rater": name, "pairs": self.shown, "answered": dict(self.answered.get(name, {}))}

    def answer(self, body: Any) -> None:
        """Save an answer (:func:`check_answer`; its ``ValueError`` is the page's 400)."""
        name, pair, choice = check_answer(body, len(self.pairs))
        row = {"rater": name, "pair": pair, "choice": choice, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
        with self.lock:
            append_jsonl(self.study / "answers" / f"{safe_name(name)}.jsonl", [row])
            self.answered.setdefault(name, {})[pair] = choice
            self.saved += 1

    def image(self, path: str) -> bytes | None:
        """The bytes of a pair's image at ``path`` (``/images/0003-left.png``); ``None`` for any other path or a
        file that is not a plain one of the study's."""
        file = self.images.get(path)
        return file.read_bytes() if file is not None and file.is_file() and not file.is_symlink() else None


def listen(settings: StudySettings) -> Any:
    """The study built the first time (or read again, every file checked), its server listening on 127.0.0.1 (a
    :class:`rl.study_server.StudyServer`; requests wait until it serves)."""
    from rl.study_server import StudyServer

    study, run_dir = Path(settings.study), Path(settings.run or "")
    read = {name: run_dir / name for name in ("run.json", "chosen", "random", "heldout")}  # what a study reads
    record, inputs = {"seed": settings.seed, "limit": settings.limit}, {k: v for k, v in read.items() if v.exists()}
    if not (study / "study.json").is_file():
        pairs_of(run_dir)  # a bad run= is refused before the study folder is made
    held = prepare_output(study, "study", record, inputs, resume=True, overwrite=settings.overwrite, out_key="study")
    if not (study / "study.json").is_file():
        build(study, run_dir, settings.seed, settings.limit)
    site = StudyPage(study, held)
    page = resources.files("rl").joinpath("study.html").read_bytes()
    try:
        return StudyServer(settings.port, page, site)
    except OSError as err:
        raise UserError(f"port={settings.port}: cannot listen ({err.strerror}); pass another port= (0: any)") from None


def serve(settings: StudySettings) -> int:
    """Build the study the first time, then serve its page until Ctrl-C; returns the answers saved meanwhile."""
    server = listen(settings)
    site = server.site
    url = f"http://127.0.0.1:{server.port}/?rater=NAME"
    logger.info("%d pairs in %s: open %s (one NAME per rater); Ctrl-C stops", len(site.pairs), site.study, url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    log_summary(
        "study serve", {"pairs": len(site.pairs), "answers saved": site.saved}, {"answers": site.study / "answers"}
    )
    return site.saved


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
    """The report of every answer so far (see the module docstring), also ``STUDY/report.json``: ``raters`` (a row
    per rater) and ``pooled`` (every answer; each pair by its raters' net verdict), apart, so that no rater's name
    can take a pooled row's place."""
    record = read_study(study)
    left = [p["left"] for p in record["pairs"]]
    sign = {"left": 1, "comparable": 0, "right": -1}  # the left image preferred: its source's verdict
    answers = read_answers(study, len(left))
    raters = {
        name: {k: sign[c] if left[k] == "method" else -sign[c] for k, c in sorted(given.items())}
        for name, given in sorted(answers.items())
    }
    if not raters:
        raise UserError(f"study={study}: no answers yet in {study / 'answers'}; serve the page to the raters first")
    pairs = sorted({k for verdicts in raters.values() for k in verdicts})
    net = [int(np.sign(sum(v.get(k, 0) for v in raters.values()))) for k in pairs]
    pooled = dict(zip(POOLED, (tally([v for vs in raters.values() for v in vs.values()]), tally(net)), strict=True))
    common = [k for k in pairs if all(k in v for v in raters.values())]
    counts = np.array([[sum(v[k] == c for v in raters.values()) for c in (1, 0, -1)] for k in common])
    kappa = fleiss_kappa(counts) if len(raters) > 1 and common else None
    result = {
        **{k: record[k] for k in ("command", "run", "method", "baseline")},
        "pairs": len(record["pairs"]),
        "raters": {name: tally(list(v.values())) for name, v in raters.items()},
        "pooled": pooled,
        "fleiss_kappa": kappa,
        "kappa_pairs": len(common),
    }
    atomic_write_json(study / "report.json", result)
    logger.info("%s", report_text(result))
    log_summary("study report", {"raters": len(raters), "answers": pooled["all answers"]["n"]}, {"report": study})
    return result


def report_text(result: dict[str, Any]) -> str:
    """The report as a table: a row per rater, then the pooled rows (every answer; each pair by its raters' net
    verdict), told apart by the first column."""
    pct = "{:.1%}".format
    named = [("rater", name, t) for name, t in result["raters"].items()]
    table = [
        [
            kind,
            name,
            str(t["n"]),
            *(pct(t[k]) for k in ("better", "comparable", "worse")),
            f"{t['p_value']:.2g}" if "p_value" in t else "n/a",
            f"{pct(t['preferred'])} [{pct(t['ci95'][0])}, {pct(t['ci95'][1])}]" if "ci95" in t else "n/a",
        ]
        for kind, name, t in [*named, *(("pooled", name, t) for name, t in result["pooled"].items())]
    ]
    method, baseline = result["method"], result["baseline"]
    text = f"blind study of the {result['command']} run {result['run']} ({result['pairs']} pairs): the share of "
    text += f"answers preferring {method}, neither (comparable) or {baseline}\n"
    header = ["row", "name", "n", method, "comparable", baseline, "sign test p", f"{method} of decided [95% CI]"]
    text += text_table(header, table, [False, False, *[True] * 6])
    if (kappa := result["fleiss_kappa"]) is not None:
        text += f"\nFleiss' kappa {kappa:.3f} over the {result['kappa_pairs']} pairs every rater answered"
    return text


if __name__ == "__main__":
    from reward.core.cli import main

    main("study", run, schema=StudySettings, doc=__doc__, subcommands=SUBCOMMANDS)
