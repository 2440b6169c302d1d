"""Say why nothing was scored: rows a reward cannot compare are reasons with counts, said before any image is scored
when none can be; compare=fused compares the fused score instead; scoring shows a progress bar as Best-of-N does."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from scipy.stats import spearmanr

from conftest import photo_mos, real_photos, run_cli
from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.data import SkippedRow
from reward.eval.evaluation import why_skipped


@pytest.fixture
def photos(tmp_path: Path) -> list[str]:
    return [p.name for p in real_photos(tmp_path / "data", n=6, size=40)]


def _manifest(tmp_path: Path, name: str, photos: list[str], dimensions: list[str]) -> Path:
    rows = [{"image": p, "dimension": d, "mos": photo_mos(i)} for i, p in enumerate(photos) for d in dimensions]
    path = tmp_path / "data" / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _evaluate(tmp_path: Path, scorer: Path, manifest: Path, out: str, *extra: str) -> int:
    argv = ["reward=sa-iqa", f"reward.model={scorer}", f"data={manifest}", f"out={tmp_path / out}", "num_workers=0"]
    return run_cli("evaluate", run_evaluate, [*argv, *extra], schema=EvaluateSettings)


def test_rows_of_a_dimension_the_scorer_lacks_are_one_line_with_the_count_before_any_image_is_scored(
    tmp_path, tiny_scorer_path, photos, capsys, monkeypatch
):
    quality = _manifest(tmp_path, "quality.jsonl", photos, ["quality"])

    def not_scored(*args, **kwargs):
        raise AssertionError("an image was scored though no row can be compared")

    with monkeypatch.context() as patch:
        patch.setattr("reward.rewards.sa_iqa.SaIqaReward.score", not_scored)
        assert _evaluate(tmp_path, tiny_scorer_path, quality, "refused") == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: no row could be scored: 6 rows: the scorer has no dimension 'quality' (it has lighting, harmony); "
        "compare its fused score with compare=fused"
    )

    assert _evaluate(tmp_path, tiny_scorer_path, quality, "fused", "compare=fused") == 0
    metrics = json.loads((tmp_path / "fused" / "metrics.json").read_text())
    assert metrics["quality"]["n"] == 6 and metrics["skipped"] == 0
    scores = {json.loads(line)["image"]: json.loads(line) for line in (tmp_path / "fused" / "scores.jsonl").open()}
    mos = [photo_mos(i) for i in range(6)]
    fused, lighting = ([scores[p][key] for p in photos] for key in ("score", "lighting"))
    assert metrics["quality"]["srcc"] == pytest.approx(spearmanr(fused, mos).statistic)  # the fused score compared
    assert spearmanr(fused, mos).statistic != pytest.approx(spearmanr(lighting, mos).statistic)  # not one dimension
    assert "scoring: 100%" in capsys.readouterr().err  # the bar, though stderr is no terminal here


def test_rows_left_out_beside_scored_ones_are_one_warning_of_reasons_and_counts(
    tmp_path, tiny_scorer_path, photos, caplog
):
    mixed = _manifest(tmp_path, "mixed.jsonl", photos, ["lighting", "quality"])
    with caplog.at_level(logging.WARNING, logger="reward.eval.evaluation"):
        assert _evaluate(tmp_path, tiny_scorer_path, mixed, "mixed", "skip_bad=true") == 0
    said = [r.getMessage() for r in caplog.records if r.name == "reward.eval.evaluation"]
    assert said == [
        "6 of 12 rows not compared: 6 rows: the scorer has no dimension 'quality' (it has lighting, harmony); "
        "compare its fused score with compare=fused"
    ]
    metrics = json.loads((tmp_path / "mixed" / "metrics.json").read_text())
    assert metrics["lighting"]["n"] == 6 and metrics["skipped"] == 6 and "quality" not in metrics


def test_reasons_are_counted_most_frequent_first_a_single_row_by_its_line():
    rows = [
        SkippedRow(3, "cannot read the image"),
        SkippedRow(9, "no dimension 'q'"),
        SkippedRow(4, "no dimension 'q'"),
    ]
    rows += [SkippedRow(20 + i, f"odd {i}") for i in range(5)]
    assert why_skipped(rows, limit=3) == (
        "2 rows: no dimension 'q'; line 3: cannot read the image; line 20: odd 0; 4 more rows for other reasons"
    )
