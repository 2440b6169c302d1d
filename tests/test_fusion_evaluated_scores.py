"""fusion/fit.py takes reward/evaluate.py's scores.jsonl as written: its image paths are relative to the evaluated
manifest's folder (read from the run.json beside it), pairs and scores are matched by resolved path, and an image
that merely shares a file name with a scored one is refused, never paired with its scores."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fusion.commands.fit import FusionSettings
from fusion.commands.fit import run as run_fit
from fusion.inputs import load_pair_data
from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.core.cli import compose
from reward.core.config import parse
from reward.core.errors import UserError

SAMPLES = Path(__file__).resolve().parents[1] / "reward" / "assets" / "samples"


@pytest.fixture(scope="module")
def evaluated(tiny_scorer_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``scores.jsonl`` of the shipped sample manifest, written by evaluate in a folder of its own."""
    out = tmp_path_factory.mktemp("evaluated") / "eval"
    cfg = compose(
        "evaluate",
        ["reward=sa-iqa", f"reward.model={tiny_scorer_path}", f"data={SAMPLES / 'ratings.jsonl'}", f"out={out}"],
        schema=EvaluateSettings,
    )
    run_evaluate(parse(EvaluateSettings, cfg))
    return out / "scores.jsonl"


def test_evaluate_scores_feed_the_fit_as_written(evaluated, tmp_path):
    rows = {r["image"]: r for r in map(json.loads, evaluated.read_text().splitlines())}
    assert all(not Path(k).is_absolute() for k in rows)  # relative to the sample manifest's folder, not to out/
    data = load_pair_data(SAMPLES / "pairs.jsonl", evaluated)
    pairs = [json.loads(line) for line in (SAMPLES / "pairs.jsonl").read_text().splitlines()]
    assert data.dimensions == ("lighting", "harmony") and data.n_pairs == len(pairs)
    for i, pair in enumerate(pairs):  # each pair got the scores of its own two images
        for side, x in (("a", data.x_a), ("b", data.x_b)):
            np.testing.assert_array_equal(x[i], [rows[pair[side]][d] for d in data.dimensions])
    out = tmp_path / "w.json"
    cfg = compose(
        "fit", [f"pairs={SAMPLES / 'pairs.jsonl'}", f"scores={evaluated}", f"out={out}"], schema=FusionSettings
    )
    try:  # whatever the scorer, the fit either writes weights the reward uses or says why there are none
        run_fit(parse(FusionSettings, cfg))
    except UserError as err:  # the untrained tiny scorer: no dimension orders the sample pairs better than chance
        assert "no dimension predicts these preferences" in str(err) and not out.exists()
    else:
        written = json.loads(out.read_text())
        assert written["dimensions"] == ["lighting", "harmony"] and min(written["weights"]) >= 0
        assert sum(written["weights"]) > 0


def test_an_image_sharing_a_file_name_with_a_scored_one_is_refused(evaluated, tmp_path):
    # other images under the same names in another folder: they must not borrow the samples' scores
    other = tmp_path / "other"
    shutil.copytree(SAMPLES / "images", other / "images")
    for png in (other / "images").glob("*.png"):
        png.write_bytes(png.read_bytes() + b"\0")  # another file, another image
    shutil.copy(SAMPLES / "pairs.jsonl", other / "pairs.jsonl")
    with pytest.raises(ValueError, match=r"pairs\.jsonl:1: .*has no scores.* are other images, so they are not used"):
        load_pair_data(other / "pairs.jsonl", evaluated)


def test_a_scores_file_without_a_run_is_relative_to_its_own_folder(evaluated, tmp_path):
    # the same rows copied beside the pairs (no run.json there): relative to that folder, so they match too
    folder = tmp_path / "copy"
    shutil.copytree(SAMPLES, folder)
    shutil.copy(evaluated, folder / "scores.jsonl")
    assert load_pair_data(folder / "pairs.jsonl", folder / "scores.jsonl").n_pairs == 24
