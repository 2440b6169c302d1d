"""Fusion has no dead end: the fit writes only weights the fused reward can use (every weight >= 0 by default), refuses
at fit time data no weighting fits (once, whatever nonneg) and free weights that sum to 0 or less, and a weights file
the reward cannot use is one line and status 2, said before the model loads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from davidson import outcome_probabilities

from conftest import run_cli
from fusion.commands.fit import FusionSettings
from fusion.commands.fit import run as run_fit
from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.rewards.fusion_weights import load_weights
from reward.rewards.registry import get_reward

SAMPLES = Path(__file__).resolve().parents[1] / "reward" / "assets" / "samples"
DIMS = ("lighting", "harmony")  # the tiny scorer's dimensions


def write_pairs(folder: Path, true_w: np.ndarray, *, n_images: int = 60, n_pairs: int = 300, seed: int = 0) -> Path:
    """Scores of ``n_images`` on the two dimensions and pairs labelled by Bradley-Terry with ``true_w``."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(1, 5, (n_images, 2))
    folder.mkdir(parents=True, exist_ok=True)
    scores = [{"image": f"{i}.png", **dict(zip(DIMS, x[i].tolist(), strict=True))} for i in range(n_images)]
    pairs = []
    for _ in range(n_pairs):
        i, j = rng.choice(n_images, 2, replace=False)
        p_a = outcome_probabilities(np.array([(x[i] - x[j]) @ true_w]), 0.0)[0][0]
        pairs.append({"a": f"{i}.png", "b": f"{j}.png", "label": "a" if rng.random() < p_a else "b"})
    (folder / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in scores))
    (folder / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs))
    return folder


def fit_cli(folder: Path, *extra: str) -> int:
    args = [f"pairs={folder / 'pairs.jsonl'}", f"scores={folder / 'scores.jsonl'}", f"out={folder / 'w.json'}"]
    return run_cli("fit", run_fit, [*args, "bootstrap=0", "plot=false", *extra], schema=FusionSettings)


def test_the_default_fit_writes_weights_the_reward_uses_where_the_free_fit_would_sum_below_zero(
    tmp_path, tiny_scorer_path, capsys
):
    # lighting helps, harmony hurts more: the free fit's weights sum to about 1.5 - 2.0 < 0
    folder = write_pairs(tmp_path / "d", np.array([1.5, -2.0]))
    assert fit_cli(folder, "nonneg=false") == 2
    err = capsys.readouterr().err
    assert re.search(r"weights sum to -0\.\d+ \(lighting 1\.\d+, harmony -2\.\d+\)", err) and "nonneg=true" in err
    assert len(err.strip().splitlines()) == 1
    assert not (folder / "w.json").exists()  # nothing the reward would refuse is written

    assert fit_cli(folder) == 0  # the default: every weight >= 0
    fw = load_weights(folder / "w.json")
    assert fw.weights[0] > 0.3 and fw.weights[1] == 0.0 and fw.meta["nonneg"] is True
    assert fw.meta["heldout_accuracy"] > 0.55  # lighting alone still orders the held-out pairs better than chance
    reward = get_reward("sa-iqa", {"model": str(tiny_scorer_path), "fusion": str(folder / "w.json")})
    assert reward.record["fusion"] == "bradley-terry"


def test_eq_2_and_3_as_written_fit_free_weights_and_fuse_them_undivided(tmp_path, tiny_scorer_path):
    """The SA-IQA fusion recipe's settings: the free fit (weights summing below 0 here) is written, and the reward
    applies S = x.w itself, not divided by the sum."""
    import torch

    from conftest import random_images
    from reward.integrations.reward_set import RewardSet

    folder = write_pairs(tmp_path / "d", np.array([1.5, -2.0]))
    assert fit_cli(folder, "nonneg=false", "divide_by_sum=false", "l2=0") == 0
    fw = load_weights(folder / "w.json")
    assert fw.weights[0] > 0.5 and fw.weights[1] < -0.5 and fw.meta["divide_by_sum"] is False
    reward = get_reward("sa-iqa", {"model": str(tiny_scorer_path), "fusion": str(folder / "w.json")})
    assert reward.record["fusion"] == "bradley-terry, eq. 3 undivided"
    w = fw.weights  # the fused score's own range, which reward sets normalise by (dimensions on 1-5)
    assert reward.score_range == pytest.approx((w[0] * 1 + w[1] * 5, w[0] * 5 + w[1] * 1), abs=1e-5)
    scored = RewardSet([reward]).score(random_images(3, seed=4))["sa-iqa"]  # as GRPO and Best-of-N score
    assert scored.failed == 0 and all(0 <= v <= 1 for v in scored.value)
    out = reward.score(random_images(3, seed=4))
    eq3 = fw.weights[0] * out.dimensions["lighting"] + fw.weights[1] * out.dimensions["harmony"]
    assert torch.allclose(out.scores, eq3, atol=1e-5)


def test_data_no_weighting_fits_is_said_once_whatever_nonneg_with_how_to_check_the_scorer(tmp_path, capsys):
    """Both dimensions order the pairs backwards: nonneg=true (w = 0) and nonneg=false (weights summing below 0) give
    the same one-line refusal, which sends the user to no other nonneg setting (no loop) but to the scorer."""
    folder = write_pairs(tmp_path / "d", np.array([-1.5, -1.0]))
    said = []
    for nonneg in ("true", "false"):
        assert fit_cli(folder, f"nonneg={nonneg}") == 2
        said.append(capsys.readouterr().err.strip())
    assert said[0] == said[1] and len(said[0].splitlines()) == 1
    assert "no dimension predicts these preferences better than the plain mean" in said[0]
    assert re.search(r"lighting -\d[\d.]*, harmony -\d", said[0])  # each dimension's lead of the preferred image
    assert "keeps the plain mean" in said[0] and "perceptual-rewards evaluate reward=sa-iqa" in said[0]
    assert "nonneg=" not in said[0] and "inspection" not in said[0]
    assert not (folder / "w.json").exists()


CASES = {
    "sum below zero": ('{"dimensions": ["lighting", "harmony"], "weights": [1.0, -2.0]}', "weights sum to -1"),
    "NaN": ('{"dimensions": ["lighting", "harmony"], "weights": [NaN, 1.0]}', "list of finite numbers"),
    "missing dimension": ('{"dimensions": ["lighting"], "weights": [1.0]}', "no weight for dimension(s) ['harmony']"),
    "wrong length": ('{"dimensions": ["lighting", "harmony"], "weights": [1.0]}', "1 entries for 2 dimensions"),
    "not JSON": ("lighting: 1.0\n", "not valid JSON"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_weights_file_the_reward_cannot_use_is_one_line_and_status_2_before_the_model_loads(
    tmp_path, tiny_scorer_path, monkeypatch, capsys, case
):
    text, expected = CASES[case]
    weights = tmp_path / "w.json"
    weights.write_text(text)

    def no_model(*args, **kwargs):
        raise AssertionError("the model loaded before the weights file was checked")

    monkeypatch.setattr("reward.rewards.sa_iqa.load_vlm", no_model)
    argv = [
        "reward=sa-iqa",
        f"reward.model={tiny_scorer_path}",
        f"reward.fusion={weights}",
        f"data={SAMPLES / 'ratings.jsonl'}",
        f"out={tmp_path / 'out'}",
    ]
    assert run_cli("evaluate", run_evaluate, argv, schema=EvaluateSettings) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and "Traceback" not in err
    assert str(weights) in err and expected in err
