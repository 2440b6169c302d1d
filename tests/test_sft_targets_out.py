"""``training/sft.py ... targets_out=FILE``: the file it writes is checked as any result file, before anything is
written: an empty name, a folder, a path under a file, one of the run's inputs (or inside one) are refused in one
line with exit 2; an existing file is replaced only with ``overwrite=true``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from conftest import run_cli
from training.commands.sft import SftSettings, run


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    for i in range(3):
        Image.new("RGB", (40, 30), (60 * i, 90, 30)).save(tmp_path / f"{i}.png")
    rows = [{"image": f"{i}.png", "dimension": "quality", "mos": 1.0 + 1.5 * i} for i in range(3)]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _targets(manifest: Path, target: str, *extra: str) -> int:
    argv = ["model.path=m", f"data.train={manifest}", "out=o", f"targets_out={target}", *extra]
    return run_cli("sft", run, argv, schema=SftSettings)


def test_targets_out_writes_rows_and_replaces_only_with_overwrite(manifest, tmp_path, capsys):
    target = tmp_path / "t.jsonl"
    assert _targets(manifest, str(target)) == 0
    assert len(target.read_text().splitlines()) == 3
    target.write_text("mine\n")
    assert _targets(manifest, str(target)) == 2
    err = capsys.readouterr().err
    assert "targets_out=" in err and "overwrite=true" in err and "Traceback" not in err
    assert target.read_text() == "mine\n"  # untouched
    assert _targets(manifest, str(target), "overwrite=true") == 0
    assert len(target.read_text().splitlines()) == 3


@pytest.mark.parametrize("kind", ["empty", "folder", "under-a-file", "the-manifest", "inside-the-data"])
def test_targets_out_refused_in_one_line_before_anything_is_written(kind, manifest, tmp_path, capsys):
    before = manifest.read_bytes()
    dataset = tmp_path / "hfdata"
    if kind == "inside-the-data":  # a datasets folder read as data.train: nothing is written inside it
        from datasets import Dataset

        Dataset.from_dict({"image": [str(tmp_path / "0.png")], "mos": [3.0]}).save_to_disk(str(dataset))
    target, data = {
        "empty": ("", manifest),
        "folder": (str(tmp_path), manifest),
        "under-a-file": (f"{manifest}/t.jsonl", manifest),
        "the-manifest": (str(manifest), manifest),
        "inside-the-data": (str(dataset / "t.jsonl"), f"hf:{dataset}"),
    }[kind]
    assert _targets(data, target, "overwrite=true") == 2
    err = capsys.readouterr().err
    assert "targets_out" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert manifest.read_bytes() == before
    assert not (dataset / "t.jsonl").exists()
