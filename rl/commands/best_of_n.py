"""What ``rl/best_of_n.py`` does: N candidates per task in one batched generator call, scored in one batched reward
call, the best kept, and compared with a random choice (mean reward; win rate judged by a second reward).

Outputs in ``out``, one file per task named after its id (``reward.data.files.safe_name``: unique): ``chosen/``,
``random/`` (the random pick: a blind study sets the two side by side, ``rl/study.py``), ``sheets/`` (the candidates
with their scores, the chosen one marked); ``scores.jsonl`` (every candidate's seed, scores and dimensions, and the
task's file name) and ``summary.json`` (with the models and data it came from). ``out`` must be new: an earlier run
there is refused, or moved aside whole with ``overwrite=true``. The chosen and the random pick are compared on the same
tasks (paired); tasks where the random pick failed are counted apart.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import MISSING
from tqdm import tqdm

from reward.core.config import BATCH, COUNT, PIXELS, to_plain
from reward.core.errors import UserError
from reward.core.outputs import Output
from reward.core.summary import log_summary, text_table
from reward.data.files import atomic_write_json, atomic_write_jsonl, safe_name
from reward.data.images import DEFAULT_MAX_PIXELS
from reward.data.manifest import allow_absolute_paths_field, image_paths, image_root_field
from reward.integrations.reward_set import RewardSet, missing_reward_models, reward_has_device
from reward.rewards.registry import reward_config
from reward.vlm.hub import missing_model
from rl.devices import resolve_devices
from rl.generators import build_generator, generator_config, inpaint_each
from rl.inpaint_tasks import Task, load_tasks
from rl.run_folder import prepare_run_folder, run_inputs, settings_record

logger = logging.getLogger(__name__)


@dataclass
class BestOfNSettings:
    groups: ClassVar[dict] = {"reward": reward_config, "generator": generator_config}

    data: str = field(
        default=MISSING,
        metadata={"help": 'inpainting tasks manifest (JSONL {"image", "mask", "prompt"}) or datasets folder'},
    )
    image_root: str | None = image_root_field()
    allow_absolute_paths: bool = allow_absolute_paths_field()
    out: str = field(default=MISSING, metadata={"help": "chosen/, random/, scores.jsonl, sheets/, summary.json"})
    reward: Any = field(
        default=MISSING, metadata={"help": "the reward that picks: reward=NAME selects the config reward/NAME.yaml"}
    )
    generator: Any = field(default=MISSING, metadata={"help": "generator=NAME selects the config generator/NAME.yaml"})
    judge: Any = field(
        default=None, metadata={"help": "a second reward judging chosen vs random (name or config node); null: none"}
    )
    n: int = field(
        default=4,
        metadata={
            "help": "candidates per task (the paper: 4); n=1 seed=S reproduces candidate S - seed of every task",
            "range": (1, 4096),
        },
    )
    seed: int = field(default=0, metadata={"help": "candidate j of every task uses seed + j"})
    tasks_per_call: int = field(
        default=8, metadata={"help": "tasks per generator / reward call (each with n candidates)", "range": BATCH}
    )
    limit: int | None = field(default=None, metadata={"help": "use only the first tasks", "range": COUNT})
    skip_bad: bool = field(
        default=False,
        metadata={"help": "a bad row (file and line named) is refused; true: skipped and counted instead"},
    )
    max_decode_pixels: int = field(
        default=DEFAULT_MAX_PIXELS,
        metadata={"help": "decode guard: larger images are refused unread", "range": PIXELS},
    )
    sheets: bool = field(
        default=True, metadata={"help": "write one contact sheet per task with the scores under the images"}
    )
    overwrite: bool = field(
        default=False,
        metadata={"help": "an earlier run in out is moved aside to out.old-<time> (never deleted, never mixed)"},
    )

    def problems(self) -> list[str]:
        """The reward's, the judge's and the generator's models that are not there."""
        found = missing_reward_models([self.reward], "reward")
        found += missing_reward_models([self.judge] if self.judge else [], "judge")
        if problem := missing_model(to_plain(self.generator).get("path"), "generator.path"):
            found.append(problem)
        return found


def prepare(settings: BestOfNSettings, *, create: bool = True) -> Output | None:
    """The output folder: new, or an earlier run moved aside (``overwrite=true``); else refused. With
    ``create=False`` only the refusal is checked (nothing is written), so it comes before any model loads."""
    inputs = run_inputs(
        {"data": settings.data},
        [("reward", [settings.reward]), ("judge", [settings.judge] if settings.judge else [])],
        settings.generator,
    )
    record = settings_record(settings, leave_out=("out", "overwrite"))
    return prepare_run_folder(
        Path(settings.out), "best_of_n", record, inputs, create=create, overwrite=settings.overwrite, resume_hint=None
    )


def run(settings: BestOfNSettings) -> dict[str, Any]:
    """Set up, pick the best of N for every task, report; returns the summary (also ``out/summary.json``)."""
    setup = set_up(settings)
    rows, counts = pick_best(setup)
    return report(setup, rows, counts)


@dataclass
class Setup:
    """What :func:`set_up` builds for :func:`pick_best` and :func:`report`."""

    settings: BestOfNSettings
    tasks: list[Task]
    skipped: int  # bad manifest rows, skipped and counted
    picker: RewardSet  # the reward that picks
    judge: RewardSet | None  # the second reward judging chosen vs random
    generator: Any
    output: Output
    out: Path


def set_up(settings: BestOfNSettings) -> Setup:
    """The tasks and a refused ``out=`` first (before any model loads), then the rewards on their devices, the
    generator and the output folder."""
    tasks, skipped = load_tasks(
        settings.data, skip_bad=settings.skip_bad, max_pixels=settings.max_decode_pixels, **image_paths(settings)
    )
    tasks = tasks[: settings.limit] if settings.limit else tasks
    if not tasks:
        raise UserError(f"{settings.data}: no usable tasks ({len(skipped)} bad rows); see the warnings above")
    prepare(settings, create=False)  # a refused out= fails here, before any model loads
    picker, judge = (  # each on this process's device
        RewardSet(
            resolve_devices(
                [n if isinstance(n, str) else to_plain(n)], schema_has_device=reward_has_device, where=key
            ),
            normalize=False,
        )
        if n
        else None
        for key, n in (("reward", settings.reward), ("judge", settings.judge))
    )
    generator = build_generator(settings.generator)
    output = prepare(settings)
    assert output is not None
    for folder in ("chosen", "random", *(["sheets"] if settings.sheets else [])):
        (output.path / folder).mkdir(parents=True, exist_ok=True)
    return Setup(settings, tasks, len(skipped), picker, judge, generator, output, output.path)


def pick_best(setup: Setup) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """N candidates per task (``tasks_per_call`` tasks per generator and reward call), each scored by the picker
    and the judge; the best kept in ``chosen/``, the random pick in ``random/`` (and the task's contact sheet).
    Returns one row per task and the counts of what failed or was cut."""
    settings = setup.settings
    rng = random.Random(settings.seed)
    rows: list[dict[str, Any]] = []
    counts = {"generation_failed": 0, "reward_failed": 0, "truncated": 0}
    for start in tqdm(range(0, len(setup.tasks), settings.tasks_per_call), desc="best-of-n", unit="call"):
        chunk = setup.tasks[start : start + settings.tasks_per_call]
        candidates, prompts, results = _candidates(setup, chunk, counts)
        for offset, (task, result, prompt) in enumerate(zip(chunk, results, prompts, strict=True)):
            index = start + offset
            if result is None:
                rows.append({"task": task.id, "index": index, "prompt": prompt, "error": "generation failed"})
                continue
            higher = setup.picker.rewards[0].higher_is_better
            row = _pick(task.id, index, prompt, candidates.pop(0), rng, higher, counts)
            rows.append(row)
            if "chosen" in row:
                # the task's id (FILE:LINE of the one source) without its folder; unique, and so are its safe names
                row["file"] = f"{safe_name(Path(task.id).name)}.png"
                for pick in ("chosen", "random"):
                    result[row[pick]].save(setup.out / pick / row["file"])
                if settings.sheets:
                    label, judged = setup.picker.labels[0], setup.judge is not None
                    _sheet(setup.out / "sheets" / row["file"], task, result, row, label, judged)
    return rows, counts


def _candidates(
    setup: Setup, chunk: list[Task], counts: dict[str, int]
) -> tuple[list[list[dict[str, Any]]], list[str], list[Any]]:
    """One generator call for N candidates of every task of ``chunk`` (candidate j with seed + j) and one call of
    each reward over them all: each generated task's candidates (seed, score, dimensions, judge), the prompts as
    the generator took them, and the images (``None`` for a task whose generation failed)."""
    settings, generator, picker, judge = setup.settings, setup.generator, setup.picker, setup.judge
    prompts, cut = generator.truncate([task.prompt for task in chunk])
    counts["truncated"] += sum(cut)
    images = [task.image for task in chunk]
    results, errors = inpaint_each(
        generator, images, [task.mask for task in chunk], prompts, n=settings.n, seed=settings.seed
    )
    counts["generation_failed"] += len(errors)
    flat = [image for result in results if result is not None for image in result]
    flat_prompts = [
        p for result, p in zip(results, prompts, strict=True) if result is not None for _ in range(settings.n)
    ]
    scores = picker.score(flat, flat_prompts)[picker.labels[0]]
    judged = judge.score(flat, flat_prompts)[judge.labels[0]] if judge else None
    n = settings.n
    candidates = [  # candidate j of the m-th generated task is image m * n + j of the flat list
        [
            {
                "seed": settings.seed + j,
                "score": scores.raw[m * n + j],
                "dimensions": {d: v[m * n + j] for d, v in scores.dimensions.items()},
                "judge": judged.raw[m * n + j] if judged else None,
            }
            for j in range(n)
        ]
        for m in range(len(flat) // n)
    ]
    return candidates, prompts, results


def report(setup: Setup, rows: list[dict[str, Any]], counts: dict[str, int]) -> dict[str, Any]:
    """``scores.jsonl``, the summary (chosen vs random, the judge's verdict) in ``summary.json``, and the closing
    summary; a run whose rewards failed too often fails with the reason."""
    from rl.reward_guard import require_scores, served_reports

    settings, out, picker, judge = setup.settings, setup.out, setup.picker, setup.judge
    atomic_write_jsonl(out / "scores.jsonl", rows)
    summary = summarize(rows, judge_higher=judge.rewards[0].higher_is_better if judge else True)
    summary.update(
        {
            "reward": picker.labels[0],
            "mean_chosen_vs_random": "self-judged: the picker's own reward, higher by construction (judge= is not)",
            "judge": judge.labels[0] if judge else None,
            "n": settings.n,
            "tasks": len(setup.tasks),
            "skipped_rows": setup.skipped,
            **counts,
            "servers": served_reports(picker),  # a served reward's requests, failures and their reasons
            "provenance": setup.output.provenance(),
        }
    )
    atomic_write_json(out / "summary.json", summary)
    setup.output.finish()
    logger.info("%s", summary_table(summary))  # the numbers as a table here; all of them in summary.json
    require_scores(picker, summary["tasks_scored"], sum(len(r.get("candidates", [])) for r in rows), counts)
    files = {
        "chosen": out / "chosen",
        "random pick": out / "random",
        "sheets": out / "sheets" if settings.sheets else None,
        "scores": out / "scores.jsonl",
        "summary": out / "summary.json",
    }
    log_summary(f"best_of_n (n={settings.n})", {"tasks": len(setup.tasks)}, files)
    return summary


def _number(value: Any) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def summary_table(summary: dict[str, Any]) -> str:
    """The closing summary as a table: the picker's mean reward of the chosen vs a random candidate (the same tasks),
    the judge's verdict, and what failed."""
    reward, judge = summary["reward"], summary.get("judge")
    rows = [
        [f"mean {reward} of the chosen candidate (self-judged)", _number(summary.get("mean_chosen"))],
        [f"mean {reward} of a random candidate (self-judged)", _number(summary.get("mean_random"))],
        ["tasks compared (chosen and random pick scored)", f"{summary['tasks_paired']} of {summary['tasks']}"],
    ]
    if judge and "win_rate" in summary:
        wins, ties, losses = (summary[f"judge_{k}"] for k in ("wins", "ties", "losses"))
        rows += [
            [f"judge {judge}: chosen wins / ties / losses", f"{wins} / {ties} / {losses}"],
            ["win rate (a tie is no win)", _number(summary["win_rate"])],
            ["win rate of the decided tasks", _number(summary.get("win_rate_decided"))],
            ["expected win rate against every candidate", _number(summary.get("expected_win_rate"))],
        ]
        if summary.get("judge_failed"):
            rows.append(["tasks the judge could not score", str(summary["judge_failed"])])
    elif judge:
        rows.append([f"judge {judge}", "no task judged"])
    failed = (summary.get(k, 0) for k in ("generation_failed", "reward_failed", "random_failed"))
    rows.append(["failed: generations / reward scores / random picks", " / ".join(map(str, failed))])
    if summary.get("truncated"):
        rows.append(["prompts truncated to the generator's limit", str(summary["truncated"])])
    head = f"best-of-{summary['n']} on {summary['tasks']} tasks, picked by {reward}"
    if judge:
        head += f", judged by {judge}"
    if summary.get("skipped_rows"):
        head += f" ({summary['skipped_rows']} bad row(s) skipped)"
    return head + "\n" + text_table(["", "value"], rows, [False, True])


def _pick(
    task_id: str,
    index: int,
    prompt: str,
    candidates: list[dict[str, Any]],
    rng: random.Random,
    higher: bool,
    counts: dict[str, int],
) -> dict[str, Any]:
    row: dict[str, Any] = {"task": task_id, "index": index, "prompt": prompt, "candidates": candidates}
    ok = [j for j, candidate in enumerate(candidates) if candidate["score"] is not None]
    counts["reward_failed"] += len(candidates) - len(ok)
    if not ok:
        row["error"] = "every candidate failed to score"
        return row
    row["chosen"] = max(ok, key=lambda j: candidates[j]["score"] if higher else -candidates[j]["score"])
    row["random"] = rng.randrange(len(candidates))  # the baseline: any candidate, scored or not
    return row


def summarize(rows: list[dict[str, Any]], judge_higher: bool = True) -> dict[str, Any]:
    """Mean reward of the chosen vs a random candidate on the same tasks, and the judge's verdict on chosen vs random.

    Paired: a task counts only when both its chosen and its random pick have a score (``tasks_paired``);
    ``random_failed`` counts tasks whose random pick (any candidate, scored or not) failed to score. The judge's
    ``win_rate`` = wins / tasks judged on both (a tie, e.g. when the random pick is the chosen one, is no win);
    ``win_rate_decided`` = wins / (wins + losses); ``expected_win_rate`` compares the chosen with every candidate.

    >>> rows = [{"chosen": 0, "random": 1, "candidates": [{"score": 3.0, "judge": 2.0}, {"score": 1.0, "judge": 1.0}]}]
    >>> s = summarize(rows)
    >>> s["mean_chosen"], s["mean_random"], s["win_rate"], s["expected_win_rate"]
    (3.0, 1.0, 1.0, 0.5)
    >>> failed = [{"score": 5.0, "judge": 1.0}, {"score": None, "judge": 9.0}]
    >>> rows.append({"chosen": 0, "random": 1, "candidates": failed})
    >>> s = summarize(rows)  # the second task's random pick failed: left out of both means, counted
    >>> s["mean_chosen"], s["mean_random"], s["tasks_paired"], s["random_failed"]
    (3.0, 1.0, 1, 1)
    """
    picked = [r for r in rows if "chosen" in r]
    paired = [r for r in picked if r["candidates"][r["random"]]["score"] is not None]
    chosen = [r["candidates"][r["chosen"]]["score"] for r in paired]
    rand = [r["candidates"][r["random"]]["score"] for r in paired]
    out: dict[str, Any] = {
        "tasks_scored": len(picked),
        "tasks_paired": len(paired),
        "random_failed": len(picked) - len(paired),
        "mean_chosen": sum(chosen) / len(chosen) if chosen else None,
        "mean_random": sum(rand) / len(rand) if rand else None,
    }
    sign = 1.0 if judge_higher else -1.0
    wins = ties = losses = unjudged = 0
    expected = []
    for r in picked:
        candidates = r["candidates"]
        jc, jr = candidates[r["chosen"]]["judge"], candidates[r["random"]]["judge"]
        if jc is None or jr is None:
            unjudged += 1
            continue
        diff = sign * (jc - jr)
        wins, ties, losses = wins + (diff > 0), ties + (diff == 0), losses + (diff < 0)
        others = [sign * (jc - x["judge"]) for x in candidates if x["judge"] is not None]
        expected.append(sum(d > 0 for d in others) / len(others))
    judged = wins + ties + losses
    if judged:
        out.update(
            {
                "judge_wins": wins,
                "judge_ties": ties,
                "judge_losses": losses,
                "judge_failed": unjudged,
                "win_rate": wins / judged,
                "win_rate_decided": wins / (wins + losses) if wins + losses else None,
                "expected_win_rate": sum(expected) / len(expected),
            }
        )
    return out


def _sheet(path: Path, task: Any, images: list[Any], row: dict[str, Any], label: str, judged: bool) -> None:
    from rl.plots import image_grid

    cells = [(task.image, ["task"]), (task.mask.convert("RGB"), ["mask"])]
    for j, (image, cand) in enumerate(zip(images, row["candidates"], strict=True)):
        score = "failed" if cand["score"] is None else f"{cand['score']:.3f}"
        lines = [("* " if j == row["chosen"] else "") + f"{label} {score}", f"seed {cand['seed']}"]
        if judged and cand["judge"] is not None:
            lines.append(f"judge {cand['judge']:.3f}")
        cells.append((image, lines))
    image_grid([cells], path, row_titles=[row["prompt"][:120]])
