"""fusion/fit.py end to end: Hydra config, pairs/scores files, bad input, the reward path, JSON + PNG outputs."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from davidson import outcome_probabilities

import reward
from fusion.commands.fit import FusionSettings
from fusion.commands.fit import run as run_fit
from reward.core.cli import compose
from reward.core.config import parse
from reward.core.errors import UserError
from reward.core.outputs import RunComplete
from reward.rewards.fusion_weights import load_weights

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
DIMS = ["layout", "harmony", "lighting", "distortion"]
TRUE_W = np.array([1.0, 0.6, 0.3, 0.0])


def compose_cfg(*overrides: str, config_dir: Path | None = None):
    return compose("fit", list(overrides), config_dir=config_dir, schema=FusionSettings)


def write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture
def data(tmp_path: Path) -> SimpleNamespace:
    """120 images with 4 dimension scores (plus metadata keys) and 600 pairs labelled by a Davidson model."""
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 5, (120, 4)).round(4)
    scores = [
        {
            "image": f"img/{i:03d}.png",
            **dict(zip(DIMS, x[i].tolist(), strict=True)),
            "mos": 3.0,
            "dimension": "overall",
        }
        for i in range(120)
    ]
    pairs = []
    for _ in range(600):
        i, j = rng.choice(120, 2, replace=False)
        p_a, p_b, _ = outcome_probabilities(np.array([(x[i] - x[j]) @ TRUE_W]), 0.3)
        u = rng.random()
        label = "a" if u < p_a[0] else "b" if u < p_a[0] + p_b[0] else "tie"
        pairs.append({"a": f"img/{i:03d}.png", "b": f"img/{j:03d}.png", "label": label})
    root = tmp_path / "data"
    return SimpleNamespace(
        root=root,
        x=x,
        pairs_rows=pairs,
        scores_rows=scores,
        pairs=write_jsonl(root / "pairs.jsonl", pairs),
        scores=write_jsonl(root / "scores.jsonl", scores),
        out=tmp_path / "out" / "weights.json",
    )


def test_fit_writes_weights_json_and_bar_chart(data, caplog):
    cfg = compose_cfg(f"pairs={data.pairs}", f"scores={data.scores}", f"out={data.out}", "bootstrap=20")
    with caplog.at_level(logging.INFO, logger="fusion"):
        written = run_fit(parse(FusionSettings, cfg))  # what the entry script runs, given its composed config
    fw = load_weights(data.out)
    assert written == fw
    assert fw.dimensions == tuple(DIMS)  # mos/dimension are metadata, not dimensions
    w = np.array(fw.weights)
    assert w[0] > w[1] > w[2] > -0.2 and abs(w[3]) < 0.25
    assert np.all(np.array(fw.ci_low) <= w) and np.all(w <= np.array(fw.ci_high))
    meta = fw.meta
    assert meta["n_pairs"] == 600 and 0 < meta["n_ties"] < 600 and meta["n_skipped"] == 0
    assert meta["tie_model"] == "davidson" and meta["l2"] == 1e-4 and meta["bootstrap"] == 20
    assert 0.6 < meta["heldout_accuracy"] <= 1.0
    assert set(meta["heldout_baselines"]) == {"uniform", *DIMS}
    assert meta["heldout_log_likelihood_per_pair"] > meta["heldout_baselines"]["distortion"]["log_likelihood_per_pair"]
    datetime.fromisoformat(meta["date"])
    png = data.out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "ci_low" in logged and re.search(r"^uniform\s+0\.\d{3}", logged, re.M)


@pytest.mark.slow
def test_entry_script_runs_from_any_folder_and_creates_no_hydra_folders(data, tmp_path):
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    cmd = [
        sys.executable,
        "-X",
        "importtime",  # what the fit imports, on stderr
        str(REPO / "fusion" / "fit.py"),
        "pairs=../data/pairs.jsonl",
        "scores=../data/scores.jsonl",
        "out=w.json",
        "bootstrap=0",
        "holdout=0.25",
    ]
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in cwd.iterdir()) == ["w.json", "w.png"]  # no outputs/, no .hydra/
    assert "dimension" in done.stdout and "held-out acc" in done.stdout
    assert load_weights(cwd / "w.json").meta["heldout_fraction"] == 0.25
    imported = re.findall(r"^import time:.*\|\s*([\w.]+)$", done.stderr, re.M)
    assert "fusion.bradley_terry" in imported and "torch" not in imported  # a fit from scores loads no torch (2 s)


def test_config_starts_with_the_command_and_its_defaults_are_the_settings_dataclass():
    lines = (CONFIGS / "fit.yaml").read_text().splitlines()
    assert lines[0] == "# python fusion/fit.py pairs=PAIRS.jsonl scores=SCORES.jsonl out=WEIGHTS.json"
    cfg = compose_cfg("pairs=p.jsonl", "scores=s.jsonl")
    assert parse(FusionSettings, cfg) == FusionSettings(pairs="p.jsonl", scores="s.jsonl")


def test_unknown_and_invalid_settings_are_errors_reported_together():
    with pytest.raises(UserError, match=r"unknown key l3 \(did you mean 'l2'\?\)"):
        compose_cfg("pairs=p.jsonl", "scores=s.jsonl", "l3=1")
    with pytest.raises(UserError, match=r"l2='big': expected a float"):
        compose_cfg("pairs=p.jsonl", "scores=s.jsonl", "l2=big")
    bad = {
        "pairs": "p.jsonl",
        "scores": "s.jsonl",
        "tie_model": "bt",
        "l2": -1,
        "bootstrap": 1,
        "out": "w.png",
        "colour": "red",
    }
    with pytest.raises(ValueError) as info:
        parse(FusionSettings, bad)
    assert "unknown key colour" in str(info.value)
    bad.pop("colour")
    with pytest.raises(ValueError) as info:
        parse(FusionSettings, bad)
    for part in ("tie_model='bt'", "l2=-1", "bootstrap=1", "out='w.png'"):
        assert part in str(info.value)
    with pytest.raises(ValueError, match="exactly one of scores=SCORES.jsonl or reward=NAME"):
        parse(FusionSettings, {"pairs": "p.jsonl"})
    with pytest.raises(ValueError, match=r"missing required key pairs \(set it with pairs=...\)"):
        run_fit(parse(FusionSettings, compose_cfg("scores=s.jsonl")))


def _run(data, *overrides: str):
    """Fit again into the same out file (each variation replaces the last: overwrite=true)."""
    return run_fit(
        parse(
            FusionSettings,
            compose_cfg(
                f"pairs={data.pairs}",
                f"scores={data.scores}",
                f"out={data.out}",
                "bootstrap=0",
                "overwrite=true",
                *overrides,
            ),
        )
    )


def test_unknown_label_is_reported_with_file_and_line(data):
    data.pairs_rows[2]["label"] = "draw"
    write_jsonl(data.pairs, data.pairs_rows)
    with pytest.raises(ValueError, match=r"pairs\.jsonl:3: 'label' must be 'a', 'b' or 'tie', got 'draw'.*skip_bad"):
        _run(data)


def test_image_without_scores_is_reported_with_file_and_line(data):
    data.pairs_rows[1]["b"] = "img/unscored.png"
    write_jsonl(data.pairs, data.pairs_rows)
    with pytest.raises(ValueError, match=r"pairs\.jsonl:2: image 'b' \(.*unscored\.png\) has no scores in .*scores"):
        _run(data)


def test_missing_dimension_names_the_pair_line_and_the_scores_line(data):
    image = data.pairs_rows[4]["a"]
    index = next(i for i, r in enumerate(data.scores_rows) if r["image"] == image)
    del data.scores_rows[index]["lighting"]
    write_jsonl(data.scores, data.scores_rows)
    first_use = next(i for i, r in enumerate(data.pairs_rows) if image in (r["a"], r["b"])) + 1
    pattern = rf"pairs\.jsonl:{first_use}: image '.' .*lacks dimension\(s\) \['lighting'\].*scores\.jsonl:{index + 1}"
    with pytest.raises(ValueError, match=pattern):
        _run(data)


def test_malformed_scores_json_is_reported_with_file_and_line(data):
    write_jsonl(data.scores, [data.scores_rows[0], '{"image": "img/001.png", "layout": ', *data.scores_rows[2:]])
    with pytest.raises(ValueError, match=r"scores\.jsonl:2: invalid JSON"):
        _run(data)


def test_skip_bad_skips_and_counts_every_kind_of_bad_row(data, caplog):
    data.pairs_rows[0]["label"] = "draw"  # unknown label
    data.pairs_rows[1]["b"] = "img/unscored.png"  # no scores
    del data.pairs_rows[2]["label"]  # missing key
    image = data.pairs_rows[3]["a"]
    for row in data.scores_rows:
        if row["image"] == image:
            del row["harmony"]  # a dimension missing: every pair using this image is skipped
    uses = sum(image in (r["a"], r["b"]) for r in data.pairs_rows[3:])
    write_jsonl(data.pairs, data.pairs_rows)
    write_jsonl(data.scores, data.scores_rows)
    with caplog.at_level(logging.WARNING):
        fw = _run(data, "skip_bad=true")
    assert fw.meta["n_skipped"] == 3 + uses
    assert fw.meta["n_pairs"] == 600 - 3 - uses
    assert any("Skipped" in r.getMessage() and "(skip_bad=true)" in r.getMessage() for r in caplog.records)


def test_explicit_dimensions_choose_and_order_the_columns(data):
    fw = _run(data, "dimensions=[lighting,layout]", "holdout=0")
    assert fw.dimensions == ("lighting", "layout") and fw.weights[1] > fw.weights[0] > 0
    assert fw.meta["heldout_accuracy"] is None
    with pytest.raises(ValueError, match=r"dimension\(s\) \['lightning'\] requested .* appear in no row"):
        _run(data, "dimensions=[lightning]")


def test_scores_written_elsewhere_resolve_against_scores_root(data, tmp_path):
    # reward/evaluate.py writes scores.jsonl in its out folder with paths relative to the evaluated manifest
    moved = write_jsonl(tmp_path / "eval" / "scores.jsonl", data.scores_rows)
    base = [f"pairs={data.pairs}", f"scores={moved}", f"out={data.out}", "bootstrap=0"]
    with pytest.raises(
        ValueError, match=rf"pairs\.jsonl:1: .*has no scores.*pass scores_root={re.escape(str(data.root))}"
    ):
        run_fit(parse(FusionSettings, compose_cfg(*base)))
    fw = run_fit(parse(FusionSettings, compose_cfg(*base, f"scores_root={data.root}", "overwrite=true")))
    np.testing.assert_allclose(fw.weights, _run(data).weights)


class FakeDimensionReward:
    """Stands in for a registered reward with dimensions: scores come from the test's table, looked up by path."""

    def __init__(self, table: dict[str, np.ndarray]):
        self.table = table
        self.scored: list[str] = []

    def score(self, images, prompts=None):
        self.scored.extend(images)
        rows = np.stack([self.table[Path(p).name] for p in images])
        dims = {d: torch.tensor(rows[:, j], dtype=torch.float32) for j, d in enumerate(DIMS)}
        return SimpleNamespace(scores=sum(dims.values()), dimensions=dims)


@pytest.fixture
def fake_reward(data, monkeypatch):
    for row in data.scores_rows:  # the images must exist for the reward path
        (data.root / row["image"]).parent.mkdir(parents=True, exist_ok=True)
        (data.root / row["image"]).touch()
    model = FakeDimensionReward({Path(r["image"]).name: np.array([r[d] for d in DIMS]) for r in data.scores_rows})
    calls = []

    def get_reward(name, cfg=None, **overrides):
        calls.append((name, dict(cfg or {})))
        return model

    monkeypatch.setattr(reward, "get_reward", get_reward)
    monkeypatch.setattr("reward.data.images.load_image", lambda path, **kw: str(path))
    return SimpleNamespace(model=model, calls=calls)


def test_reward_group_scores_the_pair_images_like_a_scores_file(data, fake_reward, tmp_path):
    configs = tmp_path / "configs"  # the real fit.yaml plus a reward group option of our own
    shutil.copytree(CONFIGS, configs, ignore=shutil.ignore_patterns("reward"))
    (configs / "reward").mkdir()
    (configs / "reward" / "fake-dims.yaml").write_text("name: fake-dims\npath: ???\nbatch: 4\n")
    cfg = compose_cfg(
        f"pairs={data.pairs}",
        "reward=fake-dims",
        "reward.path=/scorer",
        f"out={data.out}",
        "bootstrap=0",
        "batch_size=7",
        config_dir=configs,
    )
    fw = run_fit(parse(FusionSettings, cfg))
    assert fake_reward.calls == [("fake-dims", {"path": "/scorer", "batch": 4})]
    used = {p for r in data.pairs_rows for p in (r["a"], r["b"])}
    assert len(fake_reward.model.scored) == len(used)  # each image scored once
    assert fw.dimensions == tuple(DIMS) and fw.meta["reward"] == "fake-dims" and fw.meta["scores"] is None
    from_file = _run(data)  # same numbers from the scores file (float32 round trip aside)
    np.testing.assert_allclose(fw.weights, from_file.weights, atol=1e-5)


def test_reward_path_reports_missing_image_files_with_file_and_line(data, fake_reward):
    image = data.pairs_rows[5]["b"]
    (data.root / image).unlink()
    first_use = next(i for i, r in enumerate(data.pairs_rows) if image in (r["a"], r["b"])) + 1
    cfg = {"pairs": str(data.pairs), "reward": "fake-dims", "out": str(data.out), "bootstrap": 0}
    with pytest.raises(ValueError, match=rf"pairs\.jsonl:{first_use}: image file\(s\) .* not found"):
        run_fit(parse(FusionSettings, cfg))


def test_an_existing_weights_file_is_never_replaced_silently(data):
    first = run_fit(
        parse(
            FusionSettings,
            compose_cfg(f"pairs={data.pairs}", f"scores={data.scores}", f"out={data.out}", "bootstrap=0"),
        )
    )
    with pytest.raises(RunComplete, match=f"already complete: {data.out} holds this fit"):  # the identical rerun
        run_fit(
            parse(
                FusionSettings,
                compose_cfg(f"pairs={data.pairs}", f"scores={data.scores}", f"out={data.out}", "bootstrap=0"),
            )
        )
    with pytest.raises(UserError, match=r"exists already and holds another fit \(1 difference\(s\): settings.seed"):
        run_fit(
            parse(
                FusionSettings,
                compose_cfg(
                    f"pairs={data.pairs}", f"scores={data.scores}", f"out={data.out}", "bootstrap=0", "seed=3"
                ),
            )
        )
    write_jsonl(data.scores, data.scores_rows[:-1] + [{**data.scores_rows[-1], "layout": 1.5}])  # other scores
    with pytest.raises(UserError, match=r"holds another fit \(2 difference\(s\): inputs.scores.bytes.*sha256"):
        run_fit(
            parse(
                FusionSettings,
                compose_cfg(f"pairs={data.pairs}", f"scores={data.scores}", f"out={data.out}", "bootstrap=0"),
            )
        )
    run_fit(
        parse(
            FusionSettings,
            compose_cfg(f"pairs={data.pairs}", f"scores={data.scores}", f"out={data.out}", "overwrite=true"),
        )
    )
    aside = sorted(p.name for p in data.out.parent.iterdir() if ".old-" in p.name)
    assert len(aside) == 2 and aside[0].startswith("weights.json.old-") and aside[1].startswith("weights.png.old-")
    old = load_weights(data.out.parent / aside[0])
    assert old.weights == first.weights and old.ci_low is None  # the first file kept whole (bootstrap=0 there)
    assert load_weights(data.out).ci_low is not None
    assert load_weights(data.out).meta["run"]["inputs"]["pairs"]["path"] == str(data.pairs.resolve())


def test_the_same_fit_run_again_says_already_complete_and_writes_nothing(data, capsys):
    from conftest import run_cli

    argv = [f"pairs={data.pairs}", f"scores={data.scores}", f"out={data.out}", "bootstrap=0", "holdout=0"]
    assert run_cli("fit", run_fit, argv, schema=FusionSettings) == 0
    written = data.out.stat().st_mtime_ns
    assert run_cli("fit", run_fit, argv, schema=FusionSettings) == 0
    assert "already complete" in capsys.readouterr().out and data.out.stat().st_mtime_ns == written
    assert [p.name for p in data.out.parent.iterdir() if ".old-" in p.name] == []


def test_intervals_that_cannot_be_estimated_are_not_reported_and_all_ties_are_refused(data):
    few = write_jsonl(data.root / "few.jsonl", data.pairs_rows[:3])  # 3 pairs: a bootstrap says nothing
    fw = run_fit(
        parse(FusionSettings, compose_cfg(f"pairs={few}", f"scores={data.scores}", f"out={data.out}", "holdout=0"))
    )
    assert fw.ci_low is None and fw.ci_high is None  # not weight == ci_low == ci_high, which looks certain
    assert "no confidence intervals" in fw.meta["ci_note"]
    ties = write_jsonl(data.root / "ties.jsonl", [{**r, "label": "tie"} for r in data.pairs_rows[:40]])
    with pytest.raises(ValueError, match="all 40 pairs are ties"):
        run_fit(
            parse(FusionSettings, compose_cfg(f"pairs={ties}", f"scores={data.scores}", f"out={data.root / 't.json'}"))
        )
    assert not (data.root / "t.json").exists()


@pytest.mark.parametrize("module", ["fusion.fit", "reward.evaluate", "reward.qbench_eval"])
def test_help_names_the_console_command_not_files_a_wheel_lacks(module, capsys):
    """--help prints the entry script's docstring: it shows ``perceptual-rewards NAME``, never ``python PATH.py``."""
    import importlib

    from reward.core.cli import main

    entry = importlib.import_module(module)
    schema = next(v for k, v in vars(entry).items() if k.endswith("Settings"))
    name = module.split(".")[-1]
    main(name, entry.run, schema=schema, doc=entry.__doc__, argv=["--help"])
    shown = capsys.readouterr().out
    assert f"perceptual-rewards {name.replace('_', '-')} " in shown
    assert not re.search(r"python \w+/|\w+/commands/\w+\.py", shown), shown[:400]


def test_refusals_name_the_fit_command_not_its_file(tmp_path):
    from reward.core.errors import MissingInputError

    with pytest.raises(MissingInputError, match=r"Fit one with `perceptual-rewards fit pairs=") as missing:
        load_weights(tmp_path / "none.json")
    with pytest.raises(UserError) as bad:
        parse(FusionSettings, {"pairs": "p.jsonl", "scores": "s.jsonl", "out": "w.txt"})
    for said in (str(missing.value), str(bad.value)):
        assert "fusion/" not in said and ".py" not in said and "perceptual-rewards fit" in said
