"""Seconds each command takes to answer what needs no model: a misspelt key refused, a rerun of a complete run
"already complete", and a few other refusals (an unknown reward, a scorer without the data's dimensions). Each is a
fresh process, as a user runs it; the best of ``--repeats`` runs.

    HF_HUB_OFFLINE=1 python bench/answer_speed.py                       # this checkout
    HF_HUB_OFFLINE=1 python bench/answer_speed.py --base /tmp/base      # and another checkout, in the same run

With ``--base``, every case runs under both checkouts in turn (the same interpreter and installed libraries, the
checkout first on ``PYTHONPATH``), so the two columns are measured under the same load; each checkout makes its own
complete runs first. The table gives the seconds and their ratio; the machine's load average is printed with it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = "reward/assets/samples"

# each command: its entry script and the settings of a small complete run ({tmp}: a scratch folder; {vlm}, {lm}:
# tiny models; {samples}: the shipped samples; {out}: the run's folder); None: the command has no rerun to check
COMMANDS: dict[str, tuple[str, list[str] | None]] = {
    "sft": (
        "training/sft.py",
        [
            "model.path={vlm}",
            "data.train={samples}/ratings.jsonl",
            "out={out}",
            "trainer.max_steps=1",
            "trainer.gradient_accumulation_steps=1",
            "trainer.per_device_train_batch_size=2",
        ],
    ),
    "grpo-scorer": (
        "training/grpo_scorer.py",
        [
            "model.path={vlm}",
            "data.train={samples}/ratings.jsonl",
            "out={out}",
            "trainer.max_steps=1",
            "trainer.per_device_train_batch_size=2",
            "trainer.num_generations=2",
            "trainer.max_completion_length=4",
        ],
    ),
    "evaluate": (
        "reward/evaluate.py",
        ["reward=qbench", "reward.model={vlm}", "data={samples}/ratings.jsonl", "out={out}", "num_workers=0"],
    ),
    "fit": ("fusion/fit.py", ["pairs={tmp}/bench/pairs.jsonl", "scores={tmp}/bench/scores.jsonl", "out={out}.json"]),
    "judge": (
        "pace_judge/judge.py",
        ["protocol={samples}/pace/protocol.json", "images={samples}/images", "out={out}", "model={vlm}"],
    ),
    "calibrate": ("pace_judge/calibrate.py", None),
    "memory": ("pace_judge/memory.py", None),
    "grpo": (
        "rl/grpo.py",
        [
            "reward=scene-proxy",
            "policy.path={lm}",
            "generator=procedural",
            "data={tmp}/tasks/tasks.jsonl",
            "out={out}",
            "trainer.max_steps=1",
            "trainer.max_completion_length=8",
            "eval.every=0",
        ],
    ),
    "best-of-n": (
        "rl/best_of_n.py",
        ["reward=scene-proxy", "generator=procedural", "data={tmp}/tasks/tasks.jsonl", "n=2", "limit=2", "out={out}"],
    ),
    "qbench-eval": (
        "reward/qbench_eval.py",
        ["task=a1", "model.path={vlm}", "data={tmp}/a1/questions.json", "out={out}"],
    ),
    "mos": ("training/mos.py", ["raw={tmp}/bench/raw_ratings.jsonl"]),  # beside its images: no out=
    "tasks": ("rl/tasks.py", ["out={out}", "n=4"]),
    "synthetic": ("training/synthetic.py", ["out={out}", "n=8"]),
    "photos": ("training/photos.py", None),
    "perception-questions": ("training/perception_questions.py", ["out={out}", "n=8"]),
    "dataset-manifest": ("reward/dataset_manifest.py", None),
    "study": ("rl/study.py", None),
}
SUBCOMMAND = {"memory": ["list"], "photos": ["heldout"], "study": ["report"]}  # the first word they need
# settings naming an input that is not there (the bad-input tests' table)
MISSING = {
    "sft": ["model.path=/nope/model", "data.train=/nope/ratings.jsonl", "out={tmp}/m-sft"],
    "grpo-scorer": ["model.path=/nope/model", "data.train=/nope/ratings.jsonl", "out={tmp}/m-gs"],
    "evaluate": ["reward=sa-iqa", "reward.model=/nope/model", "data=/nope/ratings.jsonl", "out={tmp}/m-ev"],
    "fit": ["pairs=/nope/pairs.jsonl", "scores=/nope/scores.jsonl", "out={tmp}/m-w.json"],
    "judge": ["protocol=/nope/protocol.json", "images={tmp}/vlm", "out={tmp}/m-judge", "model=/nope/m"],
    "calibrate": ["protocol=/nope/protocol.json", "benchmark=/nope/calibration.jsonl"],
    "memory": ["import", "memory={tmp}/m-memory", "protocol=/nope/protocol.json"],
    "grpo": ["policy.path=/nope/model", "data=/nope/tasks.jsonl", "out={tmp}/m-grpo", "reward=scene-proxy"],
    "best-of-n": ["reward=qbench", "reward.model=/nope/model", "data=/nope/tasks.jsonl", "out={tmp}/m-bon"],
    "qbench-eval": ["task=a1", "model.path=/nope/model", "data=/nope/questions.json", "out={tmp}/m-qb"],
    "mos": ["raw=/nope/raw.jsonl"],
    "photos": ["brisque", "data=/nope/ratings.jsonl"],
    "dataset-manifest": ["data=koniq10k:/nope/koniq", "out={tmp}/m.jsonl"],
    "study": ["serve", "run=/nope/run", "study={tmp}/m-study"],
}
# other answers that need no model: (name, command, settings)
REFUSALS = [
    ("evaluate reward=sa-iqq", "evaluate", ["reward=sa-iqq", "data={samples}/ratings.jsonl", "out={tmp}/r1"]),
    ("best-of-n reward=sa-iqq", "best-of-n", ["reward=sa-iqq", "data={tmp}/tasks/tasks.jsonl", "out={tmp}/r2"]),
    (
        "evaluate: scorer without the data's dimension",
        "evaluate",
        ["reward=sa-iqa", "reward.model={tmp}/sft/scorer", "data={tmp}/bench/other_dimension.jsonl", "out={tmp}/r3"],
    ),
    (
        "evaluate: missing data file",
        "evaluate",
        ["reward=qbench", "reward.model={vlm}", "data={tmp}/nope.jsonl", "out={tmp}/r4"],
    ),
    (
        "judge model.path=DIR",
        "judge",
        ["protocol={samples}/pace/protocol.json", "images={samples}/images", "out={tmp}/r5", "model.path={vlm}"],
    ),
]


def run(checkout: Path, script: str, argv: list[str], cwd: Path) -> tuple[float, int, str]:
    """Seconds, exit status and the last line of output of ``python CHECKOUT/SCRIPT ARGV``."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(checkout / script), *argv], cwd=cwd, env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return seconds, done.returncode, lines[-1] if lines else ""


def prepare(checkout: Path, tmp: Path) -> dict[str, str]:
    """Tiny models, tasks, questions and a scorer, made with ``checkout``'s code; the values of the placeholders."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "HF_HUB_OFFLINE": "1"}
    make = (
        "import sys; from reward.testing import make_tiny_vlm, make_tiny_lm; "
        "make_tiny_vlm(sys.argv[1]); make_tiny_lm(sys.argv[2])"
    )
    subprocess.run([sys.executable, "-c", make, tmp / "vlm", tmp / "lm"], env=env, check=True, capture_output=True)
    values = {"tmp": str(tmp), "vlm": str(tmp / "vlm"), "lm": str(tmp / "lm"), "samples": str(checkout / SAMPLES)}
    steps = [
        ("rl/tasks.py", ["out={tmp}/tasks", "n=4"]),
        ("training/synthetic.py", ["out={tmp}/bench", "n=8"]),
        ("training/perception_questions.py", ["out={tmp}/a1", "n=8"]),
        (COMMANDS["sft"][0], [a.replace("{out}", "{tmp}/sft") for a in COMMANDS["sft"][1]]),
    ]
    for script, argv in steps:
        seconds, status, last = run(checkout, script, [a.format(**values) for a in argv], tmp)
        if status != 0:
            raise SystemExit(f"{checkout}: {script} failed ({status}): {last}")
    scores: dict[str, dict[str, float]] = {}  # each procedural image's true levels: the scores a fit reads
    for line in (tmp / "bench" / "ratings.jsonl").read_text().splitlines():
        row = json.loads(line)
        scores.setdefault(row["image"], {})[row["dimension"]] = row["mos"]
    (tmp / "bench" / "scores.jsonl").write_text(
        "".join(json.dumps({"image": k, **v}) + "\n" for k, v in scores.items())
    )
    other = [{"image": next(iter(scores)), "dimension": "colour_cast", "mos": 3.0}]  # a dimension the scorer lacks
    (tmp / "bench" / "other_dimension.jsonl").write_text("".join(json.dumps(r) + "\n" for r in other))
    return values


def measure(checkouts: dict[str, Path], repeats: int) -> list[tuple[str, dict[str, tuple[float, int, str]]]]:
    """Each case under each checkout: the best seconds of ``repeats`` runs, the status and the last line."""
    tmps = {label: Path(tempfile.mkdtemp(prefix=f"answer-{label}-")) for label in checkouts}
    values = {label: prepare(path, tmps[label]) for label, path in checkouts.items()}
    cases = []
    for name, (script, argv) in COMMANDS.items():  # a misspelt key among the run's own settings (its groups chosen)
        given = argv if argv is not None else SUBCOMMAND.get(name, [])
        cases.append((f"{name}: misspelt key", script, [*given, "colour=red"], False))
        if argv is not None:
            cases.append((f"{name}: rerun of a complete run", script, argv, True))
        if name in MISSING:
            cases.append((f"{name}: missing input", script, MISSING[name], False))
    cases += [(name, COMMANDS[command][0], argv, False) for name, command, argv in REFUSALS]
    table = []
    for name, script, argv, rerun in cases:
        results = {}
        for label, path in checkouts.items():
            out = f"{tmps[label]}/run-{name.split(':')[0]}"  # (a bare word such as grpo names a setting's value)
            given = [a.format(out=out, **values[label]) for a in argv]
            if rerun:  # the first run makes it complete
                run(path, script, given, tmps[label])
            best = min((run(path, script, given, tmps[label]) for _ in range(repeats)), key=lambda r: r[0])
            results[label] = best
        table.append((name, results))
    for tmp in tmps.values():
        shutil.rmtree(tmp, ignore_errors=True)
    return table


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """A bad argument in one line with its fix, exit 2 (argparse's usage block left to ``--help``)."""
        self.exit(2, f"error: {message} (--help lists the arguments)\n")


def main(argv: list[str] | None = None) -> None:
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, help="another checkout to measure in the same run (the 'before')")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each case; the best is kept")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: give 1 or more runs of each case")
    if args.base and not (args.base / "reward" / "core" / "cli.py").is_file():
        parser.error(f"--base {args.base}: no checkout of this project (no reward/core/cli.py); pass its root folder")
    checkouts = {"before": args.base.resolve(), "after": ROOT} if args.base else {"now": ROOT}
    load = os.getloadavg()
    table = measure(checkouts, args.repeats)
    labels = list(checkouts)
    print(f"load average at the start {load[0]:.2f}, at the end {os.getloadavg()[0]:.2f}; best of {args.repeats}")
    head = ["case", *(f"{label} s" for label in labels), *(["after/before"] if len(labels) == 2 else []), "answer"]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for name, results in table:
        seconds = [results[label][0] for label in labels]
        ratio = [f"{seconds[1] / seconds[0]:.2f}"] if len(labels) == 2 else []
        last, status = results[labels[-1]], " -> ".join(str(results[label][1]) for label in labels)
        answer = f"exit {status}: {last[2][:90]}"
        print(f"| {name} | " + " | ".join(f"{s:.2f}" for s in seconds) + " | " + " | ".join([*ratio, answer]) + " |")


if __name__ == "__main__":
    main()
