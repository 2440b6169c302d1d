"""Real photos with synthetic distortions: discovery, held-out split, native-scale crops, distortion levels,
calibrated MOS, the training stream, the held-out manifest and the classical peer (BRISQUE)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from reward.rewards.scoring import LEVEL_WORDS
from training.procedural.photos import (
    CALIBRATION,
    DISTORTIONS,
    PRISTINE_MOS,
    PhotoStream,
    calibration_from_kadid,
    discover_photos,
    distort,
    evaluate_brisque,
    load_calibration,
    random_crop,
    shard_seed,
    split_photos,
    training_photos,
    write_heldout,
)
from training.sft_data import distorted_photos_stream

CROP = 112


def _psnr(a: Image.Image, b: Image.Image) -> float:
    diff = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    return float(10 * np.log10(255.0**2 / max(np.mean(diff**2), 1e-12)))


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    paths = discover_photos(min_side=CROP)
    chelsea = next(p for p in paths if p.name == "chelsea.png")  # a real textured photo (scikit-image)
    with Image.open(chelsea) as im:
        return random_crop(im.convert("RGB"), CROP, np.random.default_rng(0))


def test_package_photos_are_found_and_a_quarter_is_held_out_whatever_the_order():
    paths = discover_photos(min_side=CROP)
    assert len(paths) >= 8 and {"astronaut.png", "coffee.png"} <= {p.name for p in paths}
    train, held = split_photos(paths)
    assert len(held) == round(0.25 * len(paths)) and not set(train) & set(held)
    assert split_photos(list(reversed(paths))) == (train, held)


@pytest.mark.parametrize("kind", DISTORTIONS)
def test_every_distortion_moves_further_from_the_photo_at_each_level(photo, kind):
    psnr = [_psnr(photo, distort(photo, kind, level, np.random.default_rng(1))) for level in range(1, 6)]
    assert all(a > b for a, b in zip(psnr, psnr[1:], strict=False)), f"{kind}: PSNR by level {np.round(psnr, 2)}"
    assert distort(photo, kind, 3, np.random.default_rng(1)).size == photo.size


def test_calibration_falls_with_the_level_and_pristine_is_best_and_bad_tables_are_refused(tmp_path):
    for kind, mos in CALIBRATION.items():
        assert all(a > b for a, b in zip(mos, mos[1:], strict=False)) and PRISTINE_MOS > mos[0], kind
    bad = tmp_path / "cal.json"
    bad.write_text(json.dumps({"blur": [2.0, 3.0, 3.0, 2.0, 1.0], "fog": [5, 4, 3, 2, 1]}))
    with pytest.raises(ValueError, match=r"fog: not a distortion.*blur: need 5 MOS values falling"):
        load_calibration(bad)


def test_kadid_dmos_csv_gives_per_type_per_level_means(tmp_path):
    rows = ["dist_img,ref_img,dmos,var"]
    for ref, offset in (("I01", 0.0), ("I02", 0.2)):
        for lvl, base in enumerate([4.5, 4.0, 3.0, 2.0, 1.5], start=1):
            rows.append(f"{ref}_01_{lvl:02d}.png,{ref}.png,{base + offset},0.1")  # type 1: Gaussian blur
        rows.append(f"{ref}_05_01.png,{ref}.png,3.3,0.1")  # a type not used here
    (tmp_path / "dmos.csv").write_text("\n".join(rows) + "\n")
    assert calibration_from_kadid(tmp_path / "dmos.csv") == {"blur": [4.6, 4.1, 3.1, 2.1, 1.6]}


def test_crops_are_at_native_scale():
    ramp = np.arange(300 * 200, dtype=np.int64).reshape(200, 300)  # every pixel unique: its own coordinates
    image = Image.fromarray(np.stack([ramp % 256, (ramp // 256) % 256, ramp // 65536], -1).astype(np.uint8))
    crop = np.asarray(random_crop(image, 64, np.random.default_rng(3))).astype(np.int64)
    index = crop[..., 0] + 256 * crop[..., 1] + 65536 * crop[..., 2]
    assert np.all(np.diff(index, axis=1) == 1) and np.all(np.diff(index, axis=0) == 300)  # no resampling


def test_user_photo_folder_skips_small_photos_and_needs_two(tmp_path):
    with pytest.raises(FileNotFoundError, match="data.photos="):
        discover_photos(tmp_path / "missing")
    Image.new("RGB", (200, 150)).save(tmp_path / "a.png")
    Image.new("RGB", (60, 60)).save(tmp_path / "tiny.jpg")
    with pytest.raises(ValueError, match=r"found 1 usable photo.*need 2 or more"):
        discover_photos(tmp_path, min_side=CROP)
    Image.new("L", (300, 300)).save(tmp_path / "b.jpg")
    assert [p.name for p in discover_photos(tmp_path, min_side=CROP)] == ["a.png", "b.jpg"]


def test_the_stream_is_fresh_never_shows_a_heldout_photo_and_mos_follows_the_calibration():
    paths = discover_photos(min_side=CROP)
    held = {p.name for p in split_photos(paths)[1]}
    stream = PhotoStream(training_photos(None, CROP), CROP, seed=0)
    examples = [stream.example_at(i) for i in range(300)]
    assert not held & {e.photo for e in examples}
    assert {e.kind for e in examples} == {*DISTORTIONS, "pristine"}
    for e in examples:
        assert e.image.size == (CROP, CROP)
        assert e.mos == (PRISTINE_MOS if e.kind == "pristine" else CALIBRATION[e.kind][e.level - 1])
    pixels = {np.asarray(e.image).tobytes() for e in examples}
    assert len(pixels) == len(examples)  # no image repeats
    again = PhotoStream(training_photos(None, CROP), CROP, seed=0).example_at(17)
    assert np.array_equal(np.asarray(again.image), np.asarray(examples[17].image))  # reproducible from the seed


def test_sft_rows_of_the_stream_carry_the_rating_word_of_the_mos():
    queries = {"quality": {"question": "Rate it.", "response_prefix": "It is"}}
    words = list(LEVEL_WORDS)  # best first
    ds = distorted_photos_stream(queries, words, crop=CROP, seed=0)
    stream = PhotoStream(training_photos(None, CROP), CROP, seed=0)
    for index, row in zip(range(12), ds, strict=False):
        ex = stream.example_at(index)
        word = words[4 - min(4, int((ex.mos - 1.0) / 0.8))]  # the bin of the MOS, words best first
        assert row["completion"][0]["content"][0]["text"] == f"It is {word}."
        assert np.array_equal(np.asarray(row["images"][0].convert("RGB")), np.asarray(ex.image))
    with pytest.raises(ValueError, match=r"prompt.dimensions=\[quality\]"):
        distorted_photos_stream({"lighting": queries["quality"]}, words, crop=CROP)
    with pytest.raises(ValueError, match="photos_side=100 is smaller than data.photos_crop=112"):
        distorted_photos_stream(queries, words, crop=CROP, side=100)


def test_dataloader_workers_draw_independent_shards_of_the_stream():
    """A GPU run reads the stream with many DataLoader workers: each draws its own shard (worker 0 the stream of
    the seed itself), so the workers neither repeat one another nor wait for one generator."""
    import torch

    queries = {"quality": {"question": "Rate it.", "response_prefix": "It is"}}
    ds = distorted_photos_stream(queries, list(LEVEL_WORDS), crop=CROP, seed=5)
    assert ds.num_shards >= 16
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    rows = [np.asarray(r["images"][0].convert("RGB")) for _, r in zip(range(6), loader, strict=False)]
    streams = [PhotoStream(training_photos(None, CROP), CROP, seed=shard_seed(5, k)) for k in (0, 1)]
    # the workers take turns: rows 0, 2, 4 from shard 0 and rows 1, 3, 5 from shard 1, each from its start
    for i, row in enumerate(rows):
        expected = streams[i % 2].example_at(i // 2).image
        assert np.array_equal(row, np.asarray(expected)), i
    assert not np.array_equal(rows[0], rows[1])  # example 0 of two shards: two streams, not one twice


@pytest.fixture(scope="module")
def heldout(tmp_path_factory) -> Path:
    return write_heldout(tmp_path_factory.mktemp("heldout"), crop=CROP, crops_per_photo=1)


def test_heldout_manifest_has_every_type_and_level_of_each_heldout_photo(heldout):
    rows = [json.loads(line) for line in heldout.read_text().splitlines()]
    held = {p.name for p in split_photos(discover_photos(min_side=CROP))[1]}
    assert {r["photo"] for r in rows} == held and len(rows) == len(held) * (1 + 5 * len(DISTORTIONS))
    for r in rows:
        expected = PRISTINE_MOS if r["distortion"] == "pristine" else CALIBRATION[r["distortion"]][r["level"] - 1]
        assert r["dimension"] == "quality" and r["mos"] == expected
        with Image.open(heldout.parent / r["image"]) as im:
            assert im.size == (CROP, CROP)


def test_brisque_ranks_the_heldout_set_with_positive_correlation(heldout, tmp_path):
    metrics = evaluate_brisque(heldout, tmp_path)
    assert metrics["n"] == len(heldout.read_text().splitlines())
    assert 0.2 < metrics["srcc"] < 0.95  # a real classical peer: informative, far from perfect
    assert json.loads((tmp_path / "brisque_metrics.json").read_text())["srcc"] == metrics["srcc"]
