"""reward/evaluate.py end to end on the tiny model, and its handling of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import initialize_config_dir
from PIL import Image
from run_state import mark_incomplete

from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.core.cli import compose
from reward.core.config import parse
from reward.core.errors import UserError
from reward.core.outputs import RunComplete
from reward.data import ImageError, ManifestError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _manifest(tmp: Path, n: int = 8, extra_rows: list[dict] | None = None) -> Path:
    (tmp / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        Image.fromarray(np.full((56, 56, 3), 30 * i, np.uint8)).save(tmp / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": "lighting", "mos": 1 + 4 * i / (n - 1)})
        rows.append({"image": f"img/{i}.png", "dimension": "noise", "ratings": [5, 4, 5 - i % 3]})
    rows += extra_rows or []
    path = tmp / "ratings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cfg(**overrides):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("evaluate", overrides=[f"{k}={v}" for k, v in overrides.items()], schema=EvaluateSettings)


def test_evaluate_writes_metrics_scores_and_plots(tmp_path, tiny_vlm_path):
    data = _manifest(tmp_path / "data")
    out = tmp_path / "out"
    metrics = run_evaluate(
        parse(EvaluateSettings, _cfg(**{"reward.model": tiny_vlm_path, "data": data, "out": out, "bootstrap": 20}))
    )
    written = json.loads((out / "metrics.json").read_text())
    assert set(written) == {"lighting", "noise", "overall", "skipped", "meta"}
    n_images = len((out / "scores.jsonl").read_text().splitlines())  # each image once, rated on two dimensions
    run = written["meta"].pop("run")
    assert written["meta"] == {"processes": 1, "images_per_process": [n_images], "resumed": 0}
    assert run["command"] == "evaluate" and run["inputs"]["data"]["path"] == str(data.resolve())
    assert run["inputs"]["reward.model"]["path"] == str(Path(tiny_vlm_path).resolve())  # the model is recorded
    assert 2 * n_images == written["overall"]["n"]
    for dim in ("lighting", "noise"):
        assert written[dim]["n"] == 8 and -1 <= written[dim]["srcc"] <= 1
        assert {"plcc", "srcc", "krcc", "hor", "n"} <= set(written[dim])
        assert (out / f"scatter_{dim}.png").stat().st_size > 1000
    assert written["overall"]["n"] == 16 and metrics["skipped"] == 0
    scores = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert [s["image"] for s in scores] == [f"img/{i}.png" for i in range(8)]  # each image scored once
    assert all(0 <= s["score"] <= 1 for s in scores)
    # the metrics are those of the written scores against the MOS
    from reward.eval.metrics import srcc

    mos = [1 + 4 * i / 7 for i in range(8)]
    assert written["lighting"]["srcc"] == pytest.approx(srcc([s["score"] for s in scores], mos))


@pytest.mark.slow
def test_entry_script_runs_from_the_command_line(tmp_path, tiny_vlm_path):
    import subprocess
    import sys

    data = _manifest(tmp_path / "data", n=4)
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [
            sys.executable,
            str(root / "reward/evaluate.py"),
            "reward=qbench",
            f"reward.model={tiny_vlm_path}",
            f"data={data}",
            f"out={tmp_path / 'out'}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "lighting" in proc.stdout + proc.stderr and (tmp_path / "out/metrics.json").exists()
    assert not (tmp_path / "outputs").exists()  # Hydra leaves no output folders behind


def test_corrupt_image_fails_with_file_and_line_unless_skip_bad(tmp_path, tiny_vlm_path):
    data_dir = tmp_path / "data"
    bad = {"image": "img/broken.png", "dimension": "lighting", "mos": 2.0}
    data = _manifest(data_dir, n=4, extra_rows=[bad])
    (data_dir / "img/broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really a png")
    with pytest.raises(UserError, match=r"ratings\.jsonl:9: .*broken\.png"):
        run_evaluate(
            parse(EvaluateSettings, _cfg(**{"reward.model": tiny_vlm_path, "data": data, "out": tmp_path / "o1"}))
        )
    metrics = run_evaluate(
        parse(
            EvaluateSettings,
            _cfg(**{"reward.model": tiny_vlm_path, "data": data, "out": tmp_path / "o2", "skip_bad": True}),
        )
    )
    assert metrics["skipped"] == 1 and metrics["lighting"]["n"] == 4
    skipped = [json.loads(x) for x in (tmp_path / "o2/skipped.jsonl").read_text().splitlines()]
    assert skipped[0]["line"] == 9


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"image": "../outside.png", "dimension": "lighting", "mos": 2.0}, "outside"),
        ({"image": "img/0.png", "mos": 2.0}, "dimension"),
        ({"image": "img/0.png", "dimension": "lighting", "mos": 9.0}, "range"),
        ({"image": "img/missing.png", "dimension": "lighting", "mos": 2.0}, "missing.png"),
    ],
)
def test_bad_rows_name_file_and_line_and_are_skipped_and_counted(tmp_path, tiny_vlm_path, row, message):
    data = _manifest(tmp_path / "data", n=4, extra_rows=[row])
    with pytest.raises((ManifestError, ImageError, FileNotFoundError), match=message) as err:
        run_evaluate(
            parse(EvaluateSettings, _cfg(**{"reward.model": tiny_vlm_path, "data": data, "out": tmp_path / "o1"}))
        )
    assert "ratings.jsonl:9" in str(err.value) or "line 9" in str(err.value)
    metrics = run_evaluate(
        parse(
            EvaluateSettings,
            _cfg(**{"reward.model": tiny_vlm_path, "data": data, "out": tmp_path / "o2", "skip_bad": True}),
        )
    )
    assert metrics["skipped"] == 1


def test_empty_manifest_is_refused(tmp_path, tiny_vlm_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ManifestError, match="empty manifest"):
        run_evaluate(
            parse(
                EvaluateSettings,
                _cfg(**{"reward.model": tiny_vlm_path, "data": tmp_path / "empty.jsonl", "out": tmp_path / "out"}),
            )
        )


def test_missing_data_and_model_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"missing required key data \(set it with data=...\)"):
        run_evaluate(parse(EvaluateSettings, _cfg(**{"reward.model": "m", "out": tmp_path})))


def test_a_folder_scored_by_another_model_is_never_resumed_and_overwrite_moves_it_aside(
    tmp_path, tiny_vlm_path, tiny_vlm25_path
):
    data = _manifest(tmp_path / "data")
    out = tmp_path / "out"
    run_evaluate(parse(EvaluateSettings, _cfg(**{"reward.model": tiny_vlm_path, "data": data, "out": out})))
    first = (out / "scores.jsonl").read_text()
    with pytest.raises(ValueError, match=r"holds another run") as refused:
        run_evaluate(
            parse(
                EvaluateSettings, _cfg(**{"reward.model": tiny_vlm25_path, "data": data, "out": out, "resume": True})
            )
        )
    assert "  - inputs.reward.model.path: " in str(refused.value) and "Pass another out=" in str(refused.value)
    with pytest.raises(RunComplete, match=f"already complete: results in {out}"):
        run_evaluate(
            parse(EvaluateSettings, _cfg(**{"reward.model": tiny_vlm_path, "data": data, "out": out, "resume": True}))
        )
    mark_incomplete(out)  # as a crashed run leaves it
    with pytest.raises(ValueError, match="holds this same run already; pass resume=auto"):
        run_evaluate(parse(EvaluateSettings, _cfg(**{"reward.model": tiny_vlm_path, "data": data, "out": out})))
    with pytest.raises(ValueError, match=r"holds another run \(1 difference\(s\)\):\n  - skip_bad: False -> True"):
        run_evaluate(
            parse(
                EvaluateSettings,
                _cfg(**{"reward.model": tiny_vlm_path, "data": data, "out": out, "resume": True, "skip_bad": True}),
            )
        )
    resumed = {"resume": True, "batch_size": 3, "reward.batch_size": 2}  # keys that may change on resume
    again = run_evaluate(
        parse(EvaluateSettings, _cfg(**{"reward.model": tiny_vlm_path, "data": data, "out": out, **resumed}))
    )
    assert again["meta"]["resumed"] == 8 and (out / "scores.jsonl").read_text() == first  # nothing re-scored
    other = run_evaluate(
        parse(EvaluateSettings, _cfg(**{"reward.model": tiny_vlm25_path, "data": data, "out": out, "overwrite": True}))
    )
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("out.old-")]
    assert len(aside) == 1 and (aside[0] / "scores.jsonl").read_text() == first  # the old run kept, whole
    assert other["meta"]["resumed"] == 0 and (out / "scores.jsonl").read_text() != first


def test_non_finite_scores_are_counted_as_skipped_and_never_written(tmp_path):
    from reward.data import load_ratings
    from reward.eval.evaluation import EvalSettings, evaluate_rows
    from reward.rewards.base import RewardOutput

    class HalfNaN:
        def score(self, images, prompts=None):
            values = [float("nan") if im.getpixel((0, 0))[0] // 30 % 2 else 3.0 for im in images]  # odd images
            return RewardOutput(scores=torch.tensor(values))

    data = _manifest(tmp_path / "data")
    rows = load_ratings(data).rows
    odd = 4  # images 1, 3, 5 and 7
    result = evaluate_rows(HalfNaN(), rows, EvalSettings(), score_range=(1, 5), out_dir=tmp_path / "o")
    written = [json.loads(line) for line in (tmp_path / "o" / "scores.jsonl").read_text().splitlines()]
    assert 0 < odd < 8 and len(written) == 8 - odd and all(r["score"] == 3.0 for r in written)
    assert sum("non-finite score" in s.reason for s in result.skipped) == odd  # named once per image
    assert len(result.skipped) == 2 * odd  # and both of its rows (two dimensions) counted as skipped


def test_a_judge_of_one_dimension_skips_and_counts_the_other_rows_and_the_table_says_overall_is_pooled(tmp_path):
    """A judge whose route names one dimension (reward=pace with a protocol) is compared with that dimension's rows
    only: the others are skipped with the reason and counted, never plotted under their names."""
    from reward.data import load_ratings
    from reward.eval.evaluation import EvalSettings, evaluate_rows, format_table, write_results
    from reward.rewards.base import RewardOutput

    class LightingJudge:
        route = {"dimension": "lighting", "path": "protocol file"}

        def score(self, images, prompts=None):
            return RewardOutput(scores=torch.tensor([1 + im.getpixel((0, 0))[0] / 60 for im in images]))

    rows = load_ratings(_manifest(tmp_path / "data")).rows  # 8 images, each rated on lighting and noise
    result = evaluate_rows(LightingJudge(), rows, EvalSettings(), score_range=(1, 5), out_dir=tmp_path / "o")
    assert set(result.metrics) == {"lighting", "overall"} and result.metrics["lighting"]["n"] == 8
    assert result.metrics["lighting"]["srcc"] == pytest.approx(1.0)  # pixel value 30 i against MOS 1 + 4 i / 7
    assert len(result.skipped) == 8 and all(
        "no dimension 'noise' (it has lighting)" in s.reason for s in result.skipped
    )
    paths = write_results(tmp_path / "o", result, EvalSettings(), (1, 5), title="judge")
    assert "plot_noise" not in paths and not (tmp_path / "o" / "scatter_noise.png").exists()
    assert json.loads((tmp_path / "o" / "metrics.json").read_text())["skipped"] == 8
    table = format_table(result.metrics).splitlines()
    assert table[-2].startswith("overall*") and table[-1].startswith("* overall: every dimension's rows pooled")
