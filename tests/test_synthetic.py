"""The procedural benchmark: deterministic scenes, monotone level effects, files in the manifest formats."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy.stats import spearmanr

from training.procedural.scenes import (
    DIMENSIONS,
    balanced_slots,
    make_colour,
    object_mask,
    place_furniture,
    proxy_scores,
    render,
    sample_scene,
)
from training.procedural.synthetic import (
    DEFAULT_WEIGHTS,
    AnnotatorPanel,
    example_at,
    pair_label,
    preference,
    sample_levels,
    write_benchmark,
)

ALL_GOOD = {d: 5 for d in DIMENSIONS}


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_rendering_is_deterministic_for_a_seed_and_differs_across_seeds():
    levels = {"layout": 2, "harmony": 3, "lighting": 4, "distortion": 1}
    a, b, c = (render(sample_scene(np.random.default_rng(s)), levels, 56) for s in (7, 7, 8))
    assert a.tobytes() == b.tobytes()
    assert a.tobytes() != c.tobytes()


@pytest.mark.parametrize("size", [8, 33, 64, 100])
def test_any_size_renders_an_rgb_square(size):
    image = render(sample_scene(np.random.default_rng(0)), ALL_GOOD, size)
    assert image.mode == "RGB" and image.size == (size, size)


def test_levels_outside_one_to_five_are_rejected_with_the_name():
    spec = sample_scene(np.random.default_rng(0))
    with pytest.raises(ValueError, match="lighting"):
        render(spec, {**ALL_GOOD, "lighting": 6})
    with pytest.raises(ValueError, match="harmony"):
        render(spec, {"layout": 1, "lighting": 1, "distortion": 1})


@pytest.fixture(scope="module")
def random_scenes() -> tuple[list[dict[str, int]], list[dict[str, float]]]:
    """120 scenes at 56 px (the tiny VLM's input size), every level drawn independently."""
    rng = np.random.default_rng(2024)
    levels, scores = [], []
    for _ in range(120):
        spec = sample_scene(rng)
        lv = sample_levels(rng)
        levels.append(lv)
        scores.append(proxy_scores(render(spec, lv, 56)))
    return levels, scores


@pytest.mark.parametrize("dimension", DIMENSIONS)
def test_each_level_moves_its_statistic_monotonically_across_random_scenes(random_scenes, dimension):
    # pooled over scenes whose other three levels vary at random; 0.98 is the ceiling with five tied levels
    levels, scores = random_scenes
    rho = spearmanr([lv[dimension] for lv in levels], [s[dimension] for s in scores])[0]
    assert rho >= 0.9, f"{dimension}: Spearman {rho:.3f}"


@pytest.mark.parametrize("dimension", DIMENSIONS)
def test_a_statistic_hardly_reacts_to_the_other_dimensions(random_scenes, dimension):
    levels, scores = random_scenes
    for other in DIMENSIONS:
        if other != dimension:
            rho = spearmanr([lv[other] for lv in levels], [s[dimension] for s in scores])[0]
            assert abs(rho) < 0.4, f"{dimension} statistic follows {other}: Spearman {rho:.3f}"


def test_mean_luminance_rises_with_every_lighting_step_in_every_scene():
    rng = np.random.default_rng(5)
    for _ in range(6):
        spec, others = sample_scene(rng), sample_levels(rng)
        lum = [proxy_scores(render(spec, {**others, "lighting": k}, 56))["lighting"] for k in range(1, 6)]
        assert np.all(np.diff(lum) > 0.02), lum


def test_colours_keep_their_luma_whatever_the_chroma():
    weights = np.array([0.299, 0.587, 0.114])
    for hue in range(0, 360, 30):
        for chroma in (0.0, 0.1, 0.32):
            colour = make_colour(0.55, hue, chroma)
            assert colour @ weights == pytest.approx(0.55, abs=1e-9)
            assert colour.min() >= 0.0 and colour.max() <= 1.0


def test_layout_level_sets_the_number_of_boxes_and_good_layouts_are_symmetric_and_grounded():
    spec = sample_scene(np.random.default_rng(1))
    counts = [len(place_furniture(spec, {**ALL_GOOD, "layout": k})) for k in range(1, 6)]
    assert counts == sorted(counts, reverse=True) and counts[0] > 3 * counts[-1]
    assert balanced_slots(3) == [0.0, -0.6, 0.6]
    for p in place_furniture(spec, ALL_GOOD):
        assert p.y1 == pytest.approx(p.floor_y)  # resting on the floor


def test_levels_are_sampled_independently_and_uniformly():
    rng = np.random.default_rng(0)
    table = np.array([[lv[d] for d in DIMENSIONS] for lv in (sample_levels(rng) for _ in range(3000))])
    corr = np.corrcoef(table.T)
    assert np.abs(corr[np.triu_indices(4, 1)]).max() < 0.06
    for column in table.T:
        assert np.bincount(column, minlength=6)[1:].min() > 500  # each level ~600 times


def test_pair_labels_follow_the_true_preference_well_above_chance():
    rng = np.random.default_rng(0)
    agree = ties = decided = 0
    for _ in range(2000):
        a, b = sample_levels(rng), sample_levels(rng)
        label = pair_label(a, b, rng)
        diff = preference(a) - preference(b)
        if label == "tie":
            ties += 1
        elif diff != 0:
            decided += 1
            agree += (label == "a") == (diff > 0)
    assert agree / decided > 0.85
    assert 0 < ties < 400
    assert preference({"layout": 1, "harmony": 1, "lighting": 1, "distortion": 5}) == pytest.approx(1.4)


def test_stream_is_fresh_and_reproducible():
    first = [example_at(3, i, 24) for i in range(3)]
    assert len({ex.image.tobytes() for ex in first}) == 3
    again = example_at(3, 1, 24)
    assert again.image.tobytes() == first[1].image.tobytes() and again.levels == first[1].levels
    assert set(again.mos) == set(DIMENSIONS) and all(1 <= m <= 5 for m in again.mos.values())


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    return write_benchmark(root, 6, size=32, seed=1, variants_per_scene=2, n_pairs=30)


def test_benchmark_manifests_have_the_documented_rows_and_relative_paths(bench):
    n_images = 12
    ratings = _read(bench.ratings)
    assert len(ratings) == n_images * 4
    assert all(set(r) == {"image", "dimension", "mos", "scene"} and 1 <= r["mos"] <= 5 for r in ratings)
    raw = _read(bench.raw_ratings)
    assert len(raw) == n_images * 4 * 5
    assert all(isinstance(r["rating"], int) and 1 <= r["rating"] <= 5 for r in raw)
    assert {r["annotator"] for r in raw} == {"a0", "a1", "a2", "a3", "a4"}
    pairs = _read(bench.pairs)
    assert len(pairs) == 30 and {p["label"] for p in pairs} <= {"a", "b", "tie"}
    tasks = _read(bench.inpainting)
    assert len(tasks) == n_images and all(t["prompt"].startswith("A ") for t in tasks)
    for rel in [r["image"] for r in ratings] + [p["a"] for p in pairs] + [t["mask"] for t in tasks]:
        assert not Path(rel).is_absolute() and (bench.root / rel).is_file()
    image = Image.open(bench.root / ratings[0]["image"])
    assert image.size == (32, 32) and image.mode == "RGB"
    mask = np.asarray(Image.open(bench.root / tasks[0]["mask"]))
    assert set(np.unique(mask)) <= {0, 255} and 0 < (mask == 255).mean() < 0.9
    scenes = {r["scene"] for r in ratings}
    assert len(scenes) == 6 and all(sum(r["scene"] == s for r in ratings) == 8 for s in scenes)


def test_benchmark_metadata_records_the_true_preference(bench):
    meta = json.loads(bench.metadata.read_text())
    assert meta["preference"]["weights"] == DEFAULT_WEIGHTS
    assert meta["annotators"]["unreliable_names"] == ["a4"]
    assert meta["n_images"] == 12 and meta["dimensions"] == list(DIMENSIONS)
    levels = {row["image"]: row["levels"] for row in _read(bench.levels)}
    mos = {(r["image"], r["dimension"]): r["mos"] for r in _read(bench.ratings)}
    assert all(abs(mos[(img, d)] - lv[d]) < 1.5 for img, lv in levels.items() for d in DIMENSIONS)


def test_benchmark_loads_with_the_reward_manifest_readers(bench):
    from reward.data import load_inpainting, load_pairs, load_ratings

    assert len(load_ratings(bench.ratings, mos_range=(1, 5))) == 48
    assert len(load_pairs(bench.pairs)) == 30
    assert len(load_inpainting(bench.inpainting)) == 12


def test_benchmark_is_reproducible_from_its_seed(tmp_path):
    a = write_benchmark(tmp_path / "a", 2, size=16, seed=4)
    b = write_benchmark(tmp_path / "b", 2, size=16, seed=4)
    for name in ("ratings", "raw_ratings", "pairs", "inpainting"):
        assert getattr(a, name).read_text() == getattr(b, name).read_text()
    assert (a.images / "s0001_v0.png").read_bytes() == (b.images / "s0001_v0.png").read_bytes()


def test_object_mask_covers_the_box_and_refuses_boxes_not_drawn():
    spec = sample_scene(np.random.default_rng(2))
    mask = np.asarray(object_mask(spec, ALL_GOOD, 0, 64)) > 0
    box = next(p for p in place_furniture(spec, ALL_GOOD) if p.index == 0)
    centre = (int((box.y0 + box.y1) / 2 * 64), int((box.x0 + box.x1) / 2 * 64))
    assert mask[centre] and mask.mean() < 0.3
    with pytest.raises(ValueError, match="not drawn"):
        object_mask(spec, ALL_GOOD, 10)


def test_annotator_panel_needs_a_reliable_annotator():
    with pytest.raises(ValueError, match="unreliable"):
        AnnotatorPanel(n_annotators=2, unreliable=2)


def test_clashing_palettes_shift_the_mean_colour_towards_the_clash_hue():
    # the first-order cue that lets a tiny VLM learn harmony: the mean chroma leans to CLASH_HUE at low levels
    from training.procedural.scenes import CLASH_HUE

    clash = make_colour(0.5, CLASH_HUE, 0.3) - 0.5
    rng = np.random.default_rng(11)
    for _ in range(8):
        spec, others = sample_scene(rng), {**sample_levels(rng), "lighting": 5}
        lean = []
        for level in (1, 5):
            rgb = np.asarray(render(spec, {**others, "harmony": level}, 56), dtype=np.float64) / 255
            lean.append(float((rgb.reshape(-1, 3).mean(0) - rgb.mean()) @ clash))
        assert lean[0] > lean[1] + 0.01, lean
