"""A value read from a file bounds the work it causes: a row's std of 1e6 (or 1e300) under soft targets costs as
many steps as a std of 0.7; a manifest row's std wider than the MOS scale, or votes that are no bounded list of counts,
is a bad row named by file and line (skipped and counted under skip_bad)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

import training.sft_labels as targets
from reward.data import ManifestError, load_ratings
from training.sft_data import manifest_dataset

WORDS = ["excellent", "good", "fair", "poor", "bad"]
QUERIES = {"quality": {"question": "Rate the quality.", "response_prefix": "The quality is"}}


@pytest.fixture
def counted_gaussians(monkeypatch):
    """``training.sft_labels._gaussian`` counting its calls, and refusing more than 1,000 (the old loops ran for
    millions on a std of 1e6: a test of them fails here instead of hanging)."""
    calls = {"n": 0}
    real = targets._gaussian

    def gaussian(values, centre, std):
        calls["n"] += 1
        if calls["n"] > 1000:
            raise AssertionError(f"soft_target evaluated more than 1000 Gaussians (std {std})")
        return real(values, centre, std)

    monkeypatch.setattr(targets, "_gaussian", gaussian)
    return calls


@pytest.mark.parametrize("std", [1e6, 3.7e9, 1e300])
@pytest.mark.parametrize("mos", [1.05, 3.3, 4.9999])
def test_a_huge_std_costs_a_bounded_number_of_steps_and_keeps_the_expectation(counted_gaussians, mos, std):
    p = targets.soft_target(mos, std)
    assert counted_gaussians["n"] <= 300
    assert abs(float(p @ np.arange(1, 6)) - mos) < 1e-9 and abs(float(p.sum()) - 1) < 1e-12
    assert (p > 0).all()


def test_the_target_of_an_ordinary_std_is_unchanged_by_the_bound():
    """The bracket and the logits were rewritten: on ordinary stds they give the distribution of the formula
    p_k ∝ exp(-(k - c)^2 / (2 std^2)) with the centre c that gives the MOS (solved here independently)."""
    levels = np.arange(1.0, 6.0)

    def mean(c: float, std: float) -> float:
        logits = -((levels - c) ** 2) / (2 * std**2)
        w = np.exp(logits - logits.max())
        return float(w @ levels / w.sum())

    for mos, std in ((4.8, 0.7), (1.6, 0.3), (3.0, 2.0)):
        p = targets.soft_target(mos, std)
        lo, hi = -20.0, 25.0
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if mean(mid, std) < mos else (lo, mid)
        logits = -((levels - lo) ** 2) / (2 * std**2)
        w = np.exp(logits - logits.max())
        np.testing.assert_allclose(p, w / w.sum(), atol=1e-9)


def test_sft_skips_and_counts_a_row_whose_std_is_wider_than_the_scale_naming_its_line(tmp_path, counted_gaussians):
    for i in range(3):
        Image.new("RGB", (32, 32), (60 * i, 90, 200)).save(tmp_path / f"{i}.png")
    rows = [
        {"image": "0.png", "dimension": "quality", "mos": 4.6, "std": 1e6},
        {"image": "1.png", "dimension": "quality", "mos": 2.2, "std": 0.6},
        {"image": "2.png", "dimension": "quality", "mos": 3.1, "std": 4.5},
    ]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds, skipped = manifest_dataset(tmp_path / "m.jsonl", QUERIES, WORDS, soft_std=0.5, row_std=True, skip_bad=True)
    assert skipped == 2 and len(ds) == 1
    assert ds[0]["completion"][0]["content"][0]["text"].split()[-1].rstrip(".") in WORDS
    with pytest.raises(ManifestError, match=r"m.jsonl:1: 'std' 1e\+06 must be >= 0 and at most the scale's width 4"):
        manifest_dataset(tmp_path / "m.jsonl", QUERIES, WORDS, soft_std=0.5, row_std=True, skip_bad=False)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"std": -0.5}, "'std' -0.5 must be >= 0"),
        ({"std": "wide"}, "'std' must be a finite number, got 'wide'"),
        ({"std": 101}, "'std' 101 must be >= 0 and at most the scale's width 4"),
        ({"distribution": ["a", 1]}, "each vote count in 'distribution' must be a finite number, got 'a'"),
        ({"distribution": [0, 0, 1e308, 1e308, 0]}, "must be counts >= 0 with a positive, finite sum"),
        ({"distribution": [0, 2, -1, 0, 0]}, "must be counts >= 0 with a positive, finite sum"),
        ({"distribution": [1] * 100_000}, "'distribution' must be a list of 2 to 100 vote counts, got 100000 values"),
        ({"distribution": 7}, "'distribution' must be a list of 2 to 100 vote counts, got 7"),
    ],
)
def test_a_rows_std_and_votes_are_bounded_where_the_manifest_is_read(tmp_path, extra, said):
    Image.new("RGB", (16, 16)).save(tmp_path / "a.png")
    good = {"image": "a.png", "dimension": "quality", "mos": 3.0}
    (tmp_path / "m.jsonl").write_text(json.dumps(good) + "\n" + json.dumps({**good, **extra}) + "\n")
    result = load_ratings(tmp_path / "m.jsonl", mos_range=(1.0, 5.0), skip_bad=True)
    assert len(result.rows) == 1 and len(result.skipped) == 1
    assert result.skipped[0].reason.startswith(f"{tmp_path / 'm.jsonl'}:2: ") and said in result.skipped[0].reason
