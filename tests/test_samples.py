"""The samples shipped in reward/assets/samples (what the README's commands and the demo run on): installed as
package data, tiny, and valid inputs of the commands that read them."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "reward" / "assets" / "samples"


def test_every_sample_file_is_package_data_and_the_whole_set_is_tiny():
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["reward"]
    files = [p for p in (REPO / "reward" / "assets").rglob("*") if p.is_file()]
    rel = [p.relative_to(REPO / "reward").as_posix() for p in files]
    assert not [r for r in rel if not any(fnmatch.fnmatch(r, g) for g in patterns)]
    for needed in ("ratings.jsonl", "pairs.jsonl", "pace/protocol.json", "pace/anchors/high.png"):
        assert (SAMPLES / needed).is_file(), needed
    assert sum(p.stat().st_size for p in files) < 200_000  # KBs, not MBs


def test_the_sample_pairs_and_protocol_load_with_their_images():
    from pace_judge.protocol import load_protocol
    from reward.data import load_pairs, load_ratings

    pairs = load_pairs(SAMPLES / "pairs.jsonl", check_images=True)  # every image named is shipped and decodes
    ratings = load_ratings(SAMPLES / "ratings.jsonl", check_images=True)
    rated = {row.image for row in ratings.rows}
    assert len(pairs.rows) >= 20 and {p for row in pairs.rows for p in (row.a, row.b)} <= rated
    assert {row.label for row in pairs.rows} >= {"a", "b"}
    protocol = load_protocol(SAMPLES / "pace" / "protocol.json")
    assert protocol.calibrated and protocol.anchor_path("high").is_file() and protocol.anchor_path("low").is_file()
