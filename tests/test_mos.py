"""MOS aggregation as in SA-BENCH: z-score outlier replacement, annotator SRCC flags, scene-level split, IO."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from reward.data.raters import RawRating, aggregate, annotator_reliability, clean_group, max_abs_z
from training.mos import read_raw_ratings, split_rows, split_scenes, write_mos
from training.procedural.synthetic import AnnotatorPanel, simulate_ratings


def _write(path: Path, rows: list[dict | str]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _group(image: str, ratings: list[float], dimension: str = "lighting") -> list[RawRating]:
    return [RawRating(image, dimension, f"a{j}", r) for j, r in enumerate(ratings)]


def test_outlier_is_replaced_by_the_image_mean_and_the_mos_recomputed_by_hand():
    # ratings 3,3,3,3,3,3,5: mean = 23/7 = 3.285714; population variance = (6 * (2/7)^2 + (12/7)^2) / 7
    # = (24/49 + 144/49) / 7 = 24/49, std = 0.699854; z(5) = (12/7) / 0.699854 = 2.4495 > 2, z(3) = -0.408.
    # The 5 becomes 23/7, so MOS = (6 * 3 + 23/7) / 7 = 149/49 = 3.040816 (3.285714 before cleaning).
    [row] = aggregate(_group("x.png", [3, 3, 3, 3, 3, 3, 5]))
    assert row.mos == pytest.approx(149 / 49, abs=1e-12)
    assert row.n_outliers == 1 and row.n_ratings == 7
    cleaned, outlier = clean_group([3, 3, 3, 3, 3, 3, 5])
    assert outlier.tolist() == [False] * 6 + [True]
    assert cleaned[-1] == pytest.approx(23 / 7)


def test_five_ratings_can_never_be_outliers_at_z_two():
    # Samuelson: with n ratings |z| <= sqrt(n - 1) (population std) = 2.0 for n = 5, reached by 1,1,1,1,5
    assert max_abs_z(5) == 2.0 and max_abs_z(7) == pytest.approx(np.sqrt(6))
    assert max_abs_z(5, ddof=1) == pytest.approx(4 / np.sqrt(5))
    [row] = aggregate(_group("x.png", [1, 1, 1, 1, 5]))
    assert row.n_outliers == 0 and row.mos == pytest.approx(1.8)
    [row] = aggregate(_group("x.png", [1, 1, 1, 1, 5]), z_threshold=1.5)
    assert row.n_outliers == 1 and row.mos == pytest.approx((4 + 1.8) / 5)


def test_constant_ratings_have_no_outliers_and_zero_std():
    [row] = aggregate(_group("x.png", [4, 4, 4]))
    assert (row.mos, row.std, row.n_outliers) == (4.0, 0.0, 0)


def _panel_ratings(n_items: int = 120, seed: int = 0) -> list[RawRating]:
    rng = np.random.default_rng(seed)
    panel = AnnotatorPanel()
    biases = rng.normal(0, panel.bias_std, panel.n_annotators)
    ratings = []
    for i in range(n_items):
        for d in ("layout", "lighting"):
            mos = float(rng.uniform(1, 5))
            for j, r in enumerate(simulate_ratings(mos, panel, biases, rng)):
                ratings.append(RawRating(f"img{i}.png", d, f"a{j}", r, scene=f"s{i // 3}"))
    return ratings


def test_the_random_annotator_is_flagged_and_the_good_ones_are_not():
    ratings = _panel_ratings()
    report = annotator_reliability(ratings, aggregate(ratings))
    assert [name for name, a in report.items() if a["flagged"]] == ["a4"]
    assert report["a4"]["srcc"] < 0.5 and min(report[f"a{j}"]["srcc"] for j in range(4)) > 0.75
    assert set(report["a0"]["per_dimension"]) == {"layout", "lighting"} and report["a0"]["n"] == 240
    assert report["a4"]["flagged_dimensions"] == ["layout", "lighting"]


def test_an_annotator_with_too_few_items_is_flagged_not_dropped():
    ratings = _group("a.png", [1, 2, 5]) + _group("b.png", [5, 4, 1]) + _group("c.png", [3, 3])
    report = annotator_reliability(ratings, aggregate(ratings))
    assert report["a2"] == {
        "n": 2,
        "srcc": None,
        "per_dimension": {"lighting": None},
        "flagged": True,
        "flagged_dimensions": ["lighting"],
    }


def test_scene_split_is_four_to_one_deterministic_and_never_shares_a_scene():
    rows = aggregate(_panel_ratings())  # 40 scenes of 3 images x 2 dimensions
    train, test = split_rows(rows)
    train_scenes, test_scenes = {r.scene for r in train}, {r.scene for r in test}
    assert not train_scenes & test_scenes
    assert (len(train_scenes), len(test_scenes)) == (32, 8) and (len(train), len(test)) == (192, 48)
    assert split_rows(rows) == (train, test)
    assert {r.scene for r in split_rows(rows, seed=1)[1]} != test_scenes
    assert split_scenes(["only"]) == ({"only"}, set())
    assert split_scenes(["a", "b"], ratio=(4, 1))[1] != set()  # both sides get a scene once there are two


def test_rows_without_a_scene_are_their_own_scene():
    ratings = [r for i in range(10) for r in _group(f"i{i}.png", [3, 4])]
    train, test = split_rows(aggregate(ratings))
    assert len(test) == 2 and {r.scene for r in test} <= {f"i{i}.png" for i in range(10)}


def test_bad_rows_name_the_file_and_line_or_are_skipped_and_counted(tmp_path):
    good = {"image": "a.png", "dimension": "layout", "annotator": "a0", "rating": 4}
    path = _write(
        tmp_path / "raw.jsonl",
        [
            good,
            {"image": "a.png", "annotator": "a1", "rating": 4},  # no dimension
            {**good, "annotator": "a2", "rating": 6},  # off the scale
            "{not json",
            {**good, "rating": 3},  # a0 again
            {**good, "annotator": "a3", "rating": "4"},  # quoted number
        ],
    )
    with pytest.raises(ValueError, match=r"raw\.jsonl:2: .*dimension"):
        read_raw_ratings(path)
    ratings, skipped = read_raw_ratings(path, skip_bad=True)
    assert len(ratings) == 1 and [s["line"] for s in skipped] == [2, 3, 4, 5, 6]
    assert "outside the scale" in skipped[1]["reason"] and "already rated" in skipped[3]["reason"]


def test_grouped_rows_are_accepted(tmp_path):
    path = _write(
        tmp_path / "raw.jsonl",
        [
            {"image": "a.png", "dimension": "harmony", "ratings": [2, 3, 4]},
            {"image": "b.png", "dimension": "harmony", "ratings": {"x": 5, "y": 4}, "scene": "s1"},
        ],
    )
    ratings, _ = read_raw_ratings(path)
    assert [(r.image, r.annotator, r.rating) for r in ratings] == [
        ("a.png", None, 2.0),
        ("a.png", None, 3.0),
        ("a.png", None, 4.0),
        ("b.png", "x", 5.0),
        ("b.png", "y", 4.0),
    ]


def test_write_mos_writes_manifests_relative_to_their_folder_and_a_report(tmp_path):
    raw = [
        {"image": f"images/{i}.png", "dimension": "lighting", "annotator": f"a{j}", "rating": r, "scene": f"s{i}"}
        for i in range(10)
        for j, r in enumerate([1 + i % 5, 1 + i % 5, 1 + (i + 2) % 5])
    ]
    (tmp_path / "data").mkdir()
    paths = write_mos(_write(tmp_path / "data" / "raw.jsonl", raw), tmp_path)
    rows = [json.loads(line) for f in (paths.train, paths.test) for line in f.read_text().splitlines()]
    assert len(rows) == 10 and all(r["image"].startswith("data/images/") for r in rows)
    assert set(rows[0]) == {"image", "dimension", "mos", "std", "n_ratings", "n_outliers", "scene"}
    report = json.loads(paths.report_path.read_text())
    assert report["flagged"] == ["a2"] and report["split"]["test_scenes"] == 2
    assert report["outliers"]["groups_that_cannot_fire"] == 10  # three ratings reach |z| <= sqrt(2)
    with pytest.raises(ValueError, match="outside the output folder"):
        write_mos(tmp_path / "data" / "raw.jsonl", tmp_path / "elsewhere")


def test_write_mos_on_the_synthetic_benchmark_flags_its_unreliable_annotator(tmp_path):
    from training.procedural.synthetic import write_benchmark

    bench = write_benchmark(tmp_path, 30, size=8, seed=3)
    report = write_mos(bench.raw_ratings).report
    assert report["flagged"] == ["a4"]
    assert (report["split"]["train_scenes"], report["split"]["test_scenes"]) == (24, 6)
