"""The fused SA-IQA reward as eq. 3: Bradley-Terry weights (divided by their positive sum), or the plain mean said at
load and recorded; the scorer folder's format written and read by one module, its version checked."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from conftest import random_images
from fusion.commands.fit import FusionSettings
from reward.commands.evaluate import EvaluateSettings
from reward.core.config import parse
from reward.core.errors import UserError
from reward.core.fingerprints import weights_fingerprint
from reward.rewards.fusion_weights import WEIGHTS_FILENAME, FusionWeights, save_weights
from reward.rewards.registry import get_reward
from reward.rewards.scorer_folder import read_metadata, write_metadata


def _scorer(tiny_scorer_path: Path, tmp_path: Path, weights: tuple[float, float] | None = None) -> Path:
    d = tmp_path / "scorer"
    shutil.copytree(tiny_scorer_path, d)
    if weights is not None:
        save_weights(d / WEIGHTS_FILENAME, FusionWeights(dimensions=("lighting", "harmony"), weights=weights))
    return d


def test_without_weights_the_mean_is_said_once_at_load_and_recorded(tiny_scorer_path, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="reward.rewards.sa_iqa"):
        reward = get_reward("sa-iqa", {"model": str(_scorer(tiny_scorer_path, tmp_path))})
    said = [r.getMessage() for r in caplog.records if "fusion" in r.getMessage()]
    assert len(said) == 1 and "fusion: mean" in said[0] and "not SA-IQA eq. 3" in said[0]
    assert reward.record["fusion"] == "mean" and reward.record["fusion_weights"] is None
    out = reward.score(random_images(3, seed=2))
    mean = (out.dimensions["lighting"] + out.dimensions["harmony"]) / 2
    assert torch.allclose(out.scores, mean, atol=1e-6)


def test_with_weights_the_score_is_eq_3_over_the_sum_of_the_weights(tiny_scorer_path, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="reward.rewards.sa_iqa"):
        reward = get_reward("sa-iqa", {"model": str(_scorer(tiny_scorer_path, tmp_path, (3.0, 1.0)))})
    assert any("fusion: bradley-terry" in r.getMessage() for r in caplog.records)
    assert reward.record["fusion"] == "bradley-terry"
    assert reward.record["fusion_weights"] == {"lighting": 3.0, "harmony": 1.0}
    out = reward.score(random_images(3, seed=2))
    eq3 = 3.0 * out.dimensions["lighting"] + 1.0 * out.dimensions["harmony"]
    assert torch.allclose(out.scores, eq3 / 4.0, atol=1e-6)


def test_weights_that_do_not_sum_above_zero_are_refused(tiny_scorer_path, tmp_path):
    with pytest.raises(ValueError, match=r"weights sum to -1; the fused score is divided by that sum"):
        get_reward("sa-iqa", {"model": str(_scorer(tiny_scorer_path, tmp_path, (1.0, -2.0)))})


def test_evaluate_records_the_fusion_in_its_metrics(tiny_scorer_path, tmp_path):
    from reward.commands.evaluate import run as run_evaluate

    (tmp_path / "data").mkdir()
    for i, im in enumerate(random_images(4, seed=5)):
        im.save(tmp_path / "data" / f"{i}.png")
    rows = [{"image": f"{i}.png", "dimension": "lighting", "mos": 1.0 + i} for i in range(4)]
    (tmp_path / "data" / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = {"reward": {"name": "sa-iqa", "model": str(_scorer(tiny_scorer_path, tmp_path))}}
    run_evaluate(
        parse(
            EvaluateSettings,
            {**cfg, "data": str(tmp_path / "data" / "r.jsonl"), "out": str(tmp_path / "out"), "bootstrap": 0},
        )
    )
    meta = json.loads((tmp_path / "out" / "metrics.json").read_text())["meta"]
    assert meta["reward"]["fusion"] == "mean"
    scorer = meta["reward"]["scorer"]  # what fit reads beside these scores: the scorer by its weights' content
    assert scorer["weights"] == weights_fingerprint(tmp_path / "scorer") and scorer["weights"]["files"] == 1


def test_the_scorer_format_is_written_and_version_checked_by_one_module(tiny_scorer_path, tmp_path):
    from training.prompts import scorer_metadata

    meta = scorer_metadata(["lighting"], prompt_type=1, definitions={})
    assert "fusion_weights" not in meta  # the weights are a file of their own, fusion_weights.json
    write_metadata(tmp_path / "a", meta)
    assert read_metadata(tmp_path / "a")["format"] == "sa-iqa-scorer/1"
    for tag, message in (
        ("sa-iqa-scorer/2", "is newer than this toolkit reads"),
        ("q-align/1", "is not 'sa-iqa-scorer/1'"),
        (None, "format None is not"),
    ):
        (tmp_path / "a" / "sa_iqa.json").write_text(json.dumps({**meta, "format": tag}))
        with pytest.raises(UserError, match=message):
            read_metadata(tmp_path / "a")


def _another_model(scorer: Path) -> None:
    """The scorer's weights changed as SFT replacing its model would: every tensor nudged, the files rewritten."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(scorer / "model.safetensors")
    save_file({k: v + 1e-3 if v.is_floating_point() else v for k, v in tensors.items()}, scorer / "model.safetensors")


def _fitted_on(scorer: Path, weights: tuple[float, float] = (3.0, 1.0)) -> Path:
    fitted = {"path": str(scorer), "weights": weights_fingerprint(scorer)}
    fw = FusionWeights(dimensions=("lighting", "harmony"), weights=weights, meta={"fitted_on": fitted})
    return save_weights(scorer / WEIGHTS_FILENAME, fw)


def test_weights_fitted_on_another_model_are_refused_from_the_scorer_folder_naming_both(
    tiny_scorer_path, tmp_path, caplog
):
    scorer = _scorer(tiny_scorer_path, tmp_path)
    _fitted_on(scorer)
    fused = get_reward("sa-iqa", {"model": str(scorer)})  # fitted on this very scorer: used, and recorded
    assert fused.record["fusion_fitted_on"]["weights"] == fused.record["scorer"]["weights"]
    before = weights_fingerprint(scorer)["sha256"][:12]
    _another_model(scorer)  # SFT replaced the model; fusion_weights.json stayed
    now = weights_fingerprint(scorer)["sha256"][:12]
    with pytest.raises(
        UserError,
        match=rf"fitted on the scores of the scorer {scorer} \(weights {before}\), and "
        rf"reward.model={scorer} holds other weights \({now}\).*Refit them on this scorer",
    ):
        get_reward("sa-iqa", {"model": str(scorer)})
    with caplog.at_level(logging.WARNING, logger="reward.rewards.sa_iqa"):  # named by reward.fusion: a choice
        chosen = get_reward("sa-iqa", {"model": str(scorer), "fusion": str(scorer / WEIGHTS_FILENAME)})
    said = [r.getMessage() for r in caplog.records if "fitted on" in r.getMessage()]
    assert len(said) == 1 and before in said[0] and now in said[0] and "reward.fusion names the file" in said[0]
    assert chosen.record["fusion_fitted_on"]["weights"]["sha256"][:12] == before


def test_fit_records_the_scorer_of_an_evaluate_run_and_the_reward_accepts_it(tiny_scorer_path, tmp_path):
    from fusion.commands.fit import run as run_fit

    scorer = _scorer(tiny_scorer_path, tmp_path)
    run = tmp_path / "eval"
    run.mkdir()
    rows = [{"image": f"{i}.png", "lighting": 1.0 + i, "harmony": 4.0 - i % 3} for i in range(8)]
    (run / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    scored = {"meta": {"reward": {"scorer": {"path": str(scorer), "weights": weights_fingerprint(scorer)}}}}
    (run / "metrics.json").write_text(json.dumps(scored))  # as evaluate writes it beside its scores
    pairs = [{"a": f"{i}.png", "b": f"{j}.png", "label": "a" if i > j else "b"} for i in range(8) for j in range(i)]
    (run / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    out = scorer / WEIGHTS_FILENAME
    cfg = {"pairs": str(run / "pairs.jsonl"), "scores": str(run / "scores.jsonl"), "out": str(out), "bootstrap": 0}
    fitted = run_fit(parse(FusionSettings, cfg)).meta["fitted_on"]
    assert fitted == {"path": str(scorer), "weights": weights_fingerprint(scorer)}
    assert get_reward("sa-iqa", {"model": str(scorer)}).record["fusion_fitted_on"] == fitted
