"""Scorers used as people use pyiqa's and Q-Align's: ``scorer(images)``, image paths and ``Path``s, the Python snippet
of the scorer's model card run as written, and the card's command as it was launched (``accelerate launch ...``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import real_photos
from reward.rewards.registry import get_reward
from training.shared.cards import scorer_card

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def scorer(tiny_scorer_path):
    return get_reward("sa-iqa", {"model": str(tiny_scorer_path)})


def test_a_scorer_is_called_on_images_paths_or_a_path_as_pyiqa_and_q_align_are(scorer, tmp_path):
    from PIL import Image

    photos = real_photos(tmp_path, n=3, size=40)
    expected = scorer.score([Image.open(p) for p in photos]).scores
    assert expected.shape == (3,) and len(set(expected.tolist())) == 3  # three photos, three scores
    assert torch.allclose(scorer([Image.open(p) for p in photos]), expected, atol=1e-5)
    assert torch.allclose(scorer([str(p) for p in photos]), expected, atol=1e-5)
    assert torch.allclose(scorer(photos), expected, atol=1e-5)  # pathlib.Path
    one = scorer.score(str(photos[1]))
    assert torch.allclose(one.scores, expected[1:2], atol=1e-5) and set(one.dimensions) == {"lighting", "harmony"}
    with pytest.raises(Exception, match=r"nowhere\.png.*does not exist"):
        scorer("nowhere.png")


def test_the_cards_python_snippet_runs_as_written(tiny_scorer_path, tmp_path, monkeypatch):
    card = scorer_card(
        base_model="Qwen/Qwen2-VL-2B-Instruct",
        dimensions={"lighting": "", "harmony": ""},
        level_words=["good", "poor"],
        level_values=[5.0, 1.0],
        train_data="r.jsonl",
        command="python training/sft.py",
        location=str(tiny_scorer_path),
    )
    snippet = str(card).split("```python\n")[1].split("```")[0]
    assert str(tiny_scorer_path) not in str(card)  # a folder here: the reader's own folder or repo id, in its place
    snippet = snippet.replace("THIS_FOLDER_OR_REPO_ID", str(tiny_scorer_path))
    photo = real_photos(tmp_path, n=1, size=40)[0]
    photo.rename(tmp_path / "photo.png")
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    exec(compile(snippet, "card", "exec"), names)  # noqa: S102 - the card's snippet, as a reader runs it
    assert names["scores"].shape == (1,) and 1.0 <= float(names["scores"][0]) <= 5.0
    assert set(names["out"].dimensions) == {"lighting", "harmony"}


def test_the_card_says_accelerate_launch_when_the_scorer_was_made_under_it(tmp_path):
    probe = tmp_path / "PROBE.py"
    probe.write_text("from training.shared.cards import launch_of\nprint('LAUNCHED', launch_of('PROBE.py'))\n")
    launch = Path(sys.executable).parent / "accelerate"
    cmd = [str(launch), "launch"] if launch.is_file() else [sys.executable, "-m", "accelerate.commands.launch"]
    cmd += ["--num_processes", "1", "--cpu", "--mixed_precision", "no", str(probe)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env)
    said = [line for line in proc.stdout.splitlines() if line.startswith("LAUNCHED")]
    assert said == ["LAUNCHED accelerate launch --num_processes 1 --cpu --mixed_precision no"], proc.stderr
    plain = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert plain.stdout.strip() == "LAUNCHED python"
