"""rl/best_of_n.py: N candidates, the reward's best kept and reproducible from its seed, contact sheets, and the
summary against random choice (mean reward; win rate on a second reward)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
from hydra import initialize_config_dir
from PIL import Image

from reward.core.cli import compose
from reward.core.config import parse
from reward.core.outputs import RunComplete
from reward.data.files import safe_name
from rl.commands.best_of_n import BestOfNSettings
from rl.commands.best_of_n import run as run_best_of_n
from rl.generators import ProceduralConfig, build_generator, candidate_levels
from rl.inpaint_tasks import load_tasks
from training.procedural.synthetic import DEFAULT_WEIGHTS, write_inpainting_tasks

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
JUDGE = "judge={name: scene-proxy, weights: {layout: 0.25, harmony: 0.25, lighting: 0.25, distortion: 0.25}, size: 96}"


def _true_quality(prompt: str, seed: int) -> float:
    """The preference-weighted levels the procedural generator rendered candidate ``seed`` of ``prompt`` at."""
    levels = candidate_levels(prompt, seed, ProceduralConfig().level_jitter)[1]
    return sum(DEFAULT_WEIGHTS[d] * v for d, v in levels.items())


@pytest.mark.slow
def test_best_of_n_keeps_the_best_reproducible_candidate_and_beats_random_on_the_judge(tmp_path, caplog):
    manifest = write_inpainting_tasks(tmp_path / "tasks", 24, size=64, seed=3)
    with manifest.open("a") as f:  # a bad row: named by file:line, skipped and counted under skip_bad=true
        f.write(json.dumps({"image": "images/t0000.png", "mask": "masks/missing.png", "prompt": "x"}) + "\n")
    out = tmp_path / "bon"
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(
            "best_of_n",
            overrides=["reward=scene-proxy", f"data={manifest}", f"out={out}", "n=4", JUDGE, "skip_bad=true"],
            schema=BestOfNSettings,
        )
    with caplog.at_level(logging.WARNING):
        summary = run_best_of_n(parse(BestOfNSettings, cfg))
    assert f"{manifest}:25" in caplog.text and summary["skipped_rows"] == 1 and summary["tasks"] == 24
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert len(rows) == 24 and all(len(r["candidates"]) == 4 for r in rows)
    for r in rows:
        scores = [c["score"] for c in r["candidates"]]
        assert r["chosen"] == int(np.argmax(scores))
        assert set(r["candidates"][0]["dimensions"]) == {"layout", "harmony", "lighting", "distortion"}
    # the chosen image is candidate `seed` of its task: regenerate it alone
    tasks = load_tasks(manifest, skip_bad=True)[0]
    task = tasks[0]
    seed = rows[0]["candidates"][rows[0]["chosen"]]["seed"]
    again = build_generator({"name": "procedural"}).inpaint([task.image], [task.mask], [task.prompt], n=1, seed=seed)
    assert rows[0]["file"] == f"{safe_name(Path(task.id).name)}.png"  # named by its task
    assert np.array_equal(np.asarray(again[0][0]), np.asarray(Image.open(out / "chosen" / rows[0]["file"])))
    assert (out / "sheets" / rows[0]["file"]).exists() and len(list((out / "chosen").glob("*.png"))) == 24
    assert summary["judge_wins"] + summary["judge_ties"] + summary["judge_losses"] == 24
    # judged independently of the picker: the true quality levels each candidate was rendered at
    truth = {
        t.id: [_true_quality(t.prompt, c["seed"]) for c in r["candidates"]] for t, r in zip(tasks, rows, strict=True)
    }
    chosen = np.array([truth[t.id][r["chosen"]] for t, r in zip(tasks, rows, strict=True)])
    random = np.array([truth[t.id][r["random"]] for t, r in zip(tasks, rows, strict=True)])
    wins, losses = int((chosen > random).sum()), int((chosen < random).sum())
    assert chosen.mean() > random.mean() + 0.1, (chosen.mean(), random.mean())
    assert wins >= 2 * losses, (wins, losses)


def _compose(overrides: list[str]) -> BestOfNSettings:
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return parse(BestOfNSettings, compose("best_of_n", overrides=overrides, schema=BestOfNSettings))


def test_a_reused_out_is_refused_and_overwrite_moves_the_old_run_aside_whole(tmp_path):
    manifest = write_inpainting_tasks(tmp_path / "tasks", 3, size=32, seed=1)
    out = tmp_path / "bon"
    base = ["reward=scene-proxy", "reward.calibration_scenes=2", f"data={manifest}", f"out={out}", "n=2"]
    first = run_best_of_n(_compose(base))
    assert first["provenance"]["inputs"]["data"]["bytes"] == manifest.stat().st_size  # the data it came from
    before = {p.name: p.read_bytes() for p in (out / "chosen").iterdir()}
    with pytest.raises(RunComplete, match="already complete"):  # the same run: nothing to do, nothing written
        run_best_of_n(_compose(base))
    with pytest.raises(ValueError, match=r"holds another run"):  # another: refused, nothing written
        run_best_of_n(_compose([*base[:-1], "n=3", "limit=1"]))
    assert {p.name: p.read_bytes() for p in (out / "chosen").iterdir()} == before
    second = run_best_of_n(_compose([*base[:-1], "n=3", "limit=1", "overwrite=true"]))
    first_task = f"{safe_name(Path(load_tasks(manifest)[0][0].id).name)}.png"
    assert second["tasks"] == 1 and sorted(p.name for p in (out / "chosen").iterdir()) == [first_task]
    (old,) = tmp_path.glob("bon.old-*")  # the first run, whole: no file of it beside the new one's
    assert {p.name: p.read_bytes() for p in (old / "chosen").iterdir()} == before


def test_the_closing_summary_is_printed_as_a_table_and_kept_whole_in_summary_json(tmp_path, caplog):
    manifest = write_inpainting_tasks(tmp_path / "tasks", 3, size=32, seed=1)
    out = tmp_path / "bon"
    judge = "judge={name: scene-proxy, weights: {layout: 1.0}, calibration_scenes: 2}"
    argv = ["reward=scene-proxy", "reward.calibration_scenes=2", f"data={manifest}", f"out={out}", "n=2", judge]
    with caplog.at_level(logging.INFO):
        summary = run_best_of_n(_compose(argv))
    printed = [r.getMessage() for r in caplog.records]
    (closing,) = [m for m in printed if m.startswith("done: best_of_n")]  # each folder the run wrote, by its name
    for name, path in (("chosen", "chosen"), ("random pick", "random"), ("sheets", "sheets")):
        assert f"  {name}: {out / path}\n" in closing and len(list((out / path).glob("*.png"))) == 3
    assert not [m for m in printed if '"mean_chosen"' in m]  # no JSON line on the console
    (table,) = [
        m for m in printed if m.startswith("best-of-2 on 3 tasks, picked by scene-proxy, judged by scene-proxy")
    ]
    rows = dict(re.split(r"\s{2,}", line.strip()) for line in table.splitlines()[3:])  # label, value
    assert rows["mean scene-proxy of the chosen candidate (self-judged)"] == f"{summary['mean_chosen']:.4f}"
    assert rows["mean scene-proxy of a random candidate (self-judged)"] == f"{summary['mean_random']:.4f}"
    assert summary["mean_chosen_vs_random"].startswith("self-judged: the picker's own reward")
    verdict = f"{summary['judge_wins']} / {summary['judge_ties']} / {summary['judge_losses']}"
    assert rows["judge scene-proxy: chosen wins / ties / losses"] == verdict
    assert rows["win rate (a tie is no win)"] == f"{summary['win_rate']:.4f}"
    saved = json.loads((out / "summary.json").read_text())
    assert {k: saved[k] for k in ("mean_chosen", "win_rate", "servers")} == {
        k: summary[k] for k in ("mean_chosen", "win_rate", "servers")
    }


def test_n0_is_refused_at_the_start_and_n1_reproduces_one_candidate(tmp_path):
    from conftest import run_cli
    from rl.commands.best_of_n import run

    manifest = write_inpainting_tasks(tmp_path / "tasks", 2, size=32, seed=1)
    argv = ["reward=scene-proxy", "reward.calibration_scenes=2", f"data={manifest}"]
    assert run_cli("best_of_n", run, [*argv, f"out={tmp_path / 'zero'}", "n=0"], schema=BestOfNSettings) == 2
    assert not (tmp_path / "zero").exists()
    one = run_best_of_n(_compose([*argv, f"out={tmp_path / 'one'}", "n=1", "seed=5"]))  # candidate 1 of seed=4
    four = run_best_of_n(_compose([*argv, f"out={tmp_path / 'four'}", "n=4", "seed=4"]))
    rows = [json.loads(line) for line in (tmp_path / "four" / "scores.jsonl").read_text().splitlines()]
    rows1 = [json.loads(line) for line in (tmp_path / "one" / "scores.jsonl").read_text().splitlines()]
    assert [r["candidates"][0]["score"] for r in rows1] == [r["candidates"][1]["score"] for r in rows]
    assert one["n"] == 1 and four["n"] == 4


def test_chosen_and_random_are_compared_on_the_same_tasks():
    from rl.commands.best_of_n import summarize

    def row(scores, chosen, rand):
        return {"chosen": chosen, "random": rand, "candidates": [{"score": s, "judge": None} for s in scores]}

    rows = [row([4.0, 2.0], 0, 1), row([5.0, None], 0, 1), row([3.0, 1.0], 0, 0)]
    s = summarize(rows)
    # the second task's random pick failed: it leaves both means (before: mean_chosen over 3 tasks, 4.0, against
    # mean_random over 2, 2.5 -- a gap made of different tasks)
    assert (s["mean_chosen"], s["mean_random"]) == (3.5, 2.5)
    assert (s["tasks_scored"], s["tasks_paired"], s["random_failed"]) == (3, 2, 1)
