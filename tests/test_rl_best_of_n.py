"""rl/best_of_n.py: N candidates, the reward's best kept and reproducible from its seed, contact sheets, and the
summary against random choice (mean reward; win rate on a second reward)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from PIL import Image

from rl.commands.best_of_n import run as run_best_of_n
from rl.generators import ProceduralConfig, build_generator, jitter_levels
from rl.inpaint_tasks import load_tasks, write_procedural_tasks
from rl.prompt_levels import levels_from_prompt
from training.procedural.scenes import sample_scene
from training.procedural.synthetic import DEFAULT_WEIGHTS

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
JUDGE = "judge={name: scene-proxy, weights: {layout: 0.25, harmony: 0.25, lighting: 0.25, distortion: 0.25}, size: 96}"


def _true_quality(prompt: str, seed: int) -> float:
    """The preference-weighted levels the procedural generator rendered candidate ``seed`` of ``prompt`` at."""
    rng = np.random.default_rng(seed)
    sample_scene(rng)
    levels = jitter_levels(levels_from_prompt(prompt), rng, ProceduralConfig().level_jitter)
    return sum(DEFAULT_WEIGHTS[d] * v for d, v in levels.items())


@pytest.mark.slow
def test_best_of_n_keeps_the_best_reproducible_candidate_and_beats_random_on_the_judge(tmp_path, caplog):
    manifest = write_procedural_tasks(tmp_path / "tasks", 24, size=64, seed=3)
    with manifest.open("a") as f:  # a bad row: named by file:line, skipped, counted
        f.write(json.dumps({"image": "images/t0000.png", "mask": "masks/missing.png", "prompt": "x"}) + "\n")
    out = tmp_path / "bon"
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("best_of_n", overrides=["reward=scene-proxy", f"data={manifest}", f"out={out}", "n=4", JUDGE])
    with caplog.at_level(logging.WARNING):
        summary = run_best_of_n(cfg)
    assert f"{manifest}:25" in caplog.text and summary["skipped_rows"] == 1 and summary["tasks"] == 24
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert len(rows) == 24 and all(len(r["candidates"]) == 4 for r in rows)
    for r in rows:
        scores = [c["score"] for c in r["candidates"]]
        assert r["chosen"] == int(np.argmax(scores))
        assert set(r["candidates"][0]["dimensions"]) == {"layout", "harmony", "lighting", "distortion"}
    # the chosen image is candidate `seed` of its task: regenerate it alone
    tasks = load_tasks(manifest)[0]
    task = tasks[0]
    seed = rows[0]["candidates"][rows[0]["chosen"]]["seed"]
    again = build_generator({"name": "procedural"}).inpaint([task.image], [task.mask], [task.prompt], n=1, seed=seed)
    assert np.array_equal(np.asarray(again[0][0]), np.asarray(Image.open(out / "chosen" / "0000.png")))
    assert (out / "sheets" / "0000.png").exists() and len(list((out / "chosen").glob("*.png"))) == 24
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
