"""Manifests (JSONL and Hugging Face datasets), image loading and their error messages."""

from __future__ import annotations

import json
import logging
import re
import struct
import zlib
from pathlib import Path

import datasets
import numpy as np
import pytest
from PIL import Image

from reward.data import InpaintRow, PairRow, RatingRow, load_inpainting, load_pairs, load_ratings
from reward.data.images import ImageError, load_image, to_rgb
from reward.data.manifest import ManifestError, iter_jsonl, resolve_image_path

# ---------------------------------------------------------------------------------------------- helpers


def _png(path: Path, size: tuple[int, int] = (8, 6), color: tuple[int, int, int] = (10, 20, 30)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path)
    return path


def _png_header_only(path: Path, width: int, height: int) -> Path:
    """A PNG with a valid IHDR claiming width x height and no pixel data: opening works, decoding cannot."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1-bit grayscale
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b""))
    return path


def _manifest(folder: Path, rows: list, name: str = "m.jsonl") -> Path:
    path = folder / name
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def imgdir(tmp_path: Path) -> Path:
    _png(tmp_path / "img" / "a.png")
    _png(tmp_path / "img" / "b.png", color=(200, 100, 0))
    _png(tmp_path / "mask" / "a.png")
    return tmp_path


# ---------------------------------------------------------------------------------------------- manifest.py


def test_iter_jsonl_numbers_lines_from_one_and_skips_blank_lines(tmp_path):
    path = _manifest(tmp_path, [{"x": 1}, "", "   ", {"x": 2}])
    assert list(iter_jsonl(path)) == [(1, {"x": 1}), (4, {"x": 2})]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (["", '{"x": 2,'], r"m\.jsonl:2: invalid JSON.*complete JSON object"),
        (["", "[1, 2]"], r"m\.jsonl:2: expected a JSON object, got list"),
    ],
)
def test_a_bad_line_is_named_by_file_and_line_and_reading_goes_on(tmp_path, rows, message):
    path = _manifest(tmp_path, [*rows, {"x": 3}])
    (line, error), (after, row) = list(iter_jsonl(path))
    assert (line, after, row) == (2, 3, {"x": 3}) and isinstance(error, ManifestError)
    assert re.search(message, str(error))


def test_iter_jsonl_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"missing\.jsonl.*does not exist"):
        list(iter_jsonl(tmp_path / "missing.jsonl"))


def test_resolve_image_path_accepts_inner_paths(tmp_path):
    assert resolve_image_path(tmp_path, "img/../img/a.png", where="m:1") == (tmp_path / "img" / "a.png").resolve()


@pytest.mark.parametrize("rel", ["../outside.png", "img/../../outside.png"])
def test_resolve_image_path_refuses_dotdot_escape(tmp_path, rel):
    with pytest.raises(ManifestError, match=r"m\.jsonl:3: .*climbs out of the images' folder .* image_root=DIR"):
        resolve_image_path(tmp_path / "data", rel, where="m.jsonl:3")


def test_resolve_image_path_refuses_absolute(tmp_path):
    with pytest.raises(ManifestError, match=r"m\.jsonl:1: .*is absolute"):
        resolve_image_path(tmp_path, str(tmp_path / "a.png"), where="m.jsonl:1")


def test_resolve_image_path_follows_a_symlinked_image_folder_for_reading(tmp_path):
    shared = tmp_path / "mnt" / "shared"  # e.g. a read-only mount, linked into the data folder
    _png(shared / "a.png")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "images").symlink_to(shared, target_is_directory=True)
    assert resolve_image_path(tmp_path / "data", "images/a.png", where="m.jsonl:1") == (shared / "a.png").resolve()


# ---------------------------------------------------------------------------------------------- images.py


def test_grayscale_becomes_rgb(tmp_path):
    Image.new("L", (4, 4), 77).save(tmp_path / "g.png")
    im = load_image(tmp_path / "g.png")
    assert (im.mode, im.getpixel((0, 0))) == ("RGB", (77, 77, 77))


def test_rgba_is_composited_on_white(tmp_path):
    Image.new("RGBA", (2, 1), (0, 0, 0, 0)).save(tmp_path / "t.png")
    assert load_image(tmp_path / "t.png").getpixel((0, 0)) == (255, 255, 255)
    # half-transparent red on white: (255, 0, 0) * 128/255 + 255 * 127/255 -> (255, 127, 127)
    Image.new("RGBA", (2, 1), (255, 0, 0, 128)).save(tmp_path / "h.png")
    assert load_image(tmp_path / "h.png").getpixel((0, 0)) == pytest.approx((255, 127, 127), abs=1)


def test_sixteen_bit_png_is_scaled_to_eight_bit(tmp_path):
    # 65535 / 257 = 255, 25700 / 257 = 100, 0 -> 0
    Image.fromarray(np.array([[0, 25700, 65535]], dtype=np.uint16)).save(tmp_path / "d.png")
    assert Image.open(tmp_path / "d.png").mode.startswith("I")
    im = load_image(tmp_path / "d.png")
    assert [im.getpixel((x, 0)) for x in range(3)] == [(0, 0, 0), (100, 100, 100), (255, 255, 255)]


def test_float_and_int32_images_are_scaled(tmp_path):
    # F in [0, 1]: 0.5 * 255 = 127.5 -> 128; I in 0..65535: 51400 / 257 = 200
    Image.fromarray(np.array([[0.0, 0.5, 1.0]], dtype=np.float32)).save(tmp_path / "f.tiff")
    Image.fromarray(np.array([[0, 51400, 65535]], dtype=np.int32)).save(tmp_path / "i.tiff")
    f, i = load_image(tmp_path / "f.tiff"), load_image(tmp_path / "i.tiff")
    assert [f.getpixel((x, 0))[0] for x in range(3)] == [0, 128, 255]
    assert [i.getpixel((x, 0))[0] for x in range(3)] == [0, 200, 255]


def test_palette_images_with_and_without_transparency(tmp_path):
    pal = Image.new("P", (2, 1))
    pal.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    pal.putpixel((1, 0), 1)
    pal.save(tmp_path / "p.png")
    im = load_image(tmp_path / "p.png")
    assert [im.getpixel((0, 0)), im.getpixel((1, 0))] == [(255, 0, 0), (0, 0, 255)]
    pal.save(tmp_path / "pt.png", transparency=0)  # index 0 (red) transparent -> white
    im = load_image(tmp_path / "pt.png")
    assert [im.getpixel((0, 0)), im.getpixel((1, 0))] == [(255, 255, 255), (0, 0, 255)]


def test_cmyk_is_converted(tmp_path):
    Image.new("CMYK", (2, 2), (0, 255, 255, 0)).save(tmp_path / "c.tiff")  # no cyan/black, full M+Y -> red
    im = load_image(tmp_path / "c.tiff")
    assert (im.mode, im.getpixel((0, 0))) == ("RGB", (255, 0, 0))


def test_exif_orientation_is_applied(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    Image.new("RGB", (4, 2)).save(tmp_path / "o.jpg", exif=exif)
    assert load_image(tmp_path / "o.jpg").size == (2, 4)


def test_to_rgb_returns_a_copy_for_rgb():
    src = Image.new("RGB", (1, 1))
    assert to_rgb(src) is not src


def test_pixel_limit_refuses_before_decoding(tmp_path):
    path = _png_header_only(tmp_path / "huge.png", 8000, 8000)  # 64M pixels claimed, no pixel data
    with pytest.raises(ImageError, match=r"huge\.png: image is 8000x8000.*not decoded.*max_pixels") as info:
        load_image(path, max_pixels=1_000_000)
    assert "corrupt" not in str(info.value)  # decoding was never attempted
    with pytest.raises(ImageError, match="above max_pixels=36,000,000"):
        load_image(path)  # the default limit


def test_decompression_bomb_becomes_a_clear_error(tmp_path):
    path = _png_header_only(tmp_path / "bomb.png", 20000, 20000)  # above 2x PIL's MAX_IMAGE_PIXELS
    with pytest.raises(ImageError, match=r"bomb\.png: PIL refused.*MAX_IMAGE_PIXELS"):
        load_image(path, max_pixels=None)


def test_corrupt_and_truncated_files_name_the_file(tmp_path):
    (tmp_path / "junk.png").write_bytes(b"not an image at all")
    with pytest.raises(ImageError, match=r"junk\.png: cannot read the image"):
        load_image(tmp_path / "junk.png")
    Image.effect_noise((64, 64), 50).save(tmp_path / "full.png")
    data = (tmp_path / "full.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageError, match=r"cut\.png: cannot read the image"):
        load_image(tmp_path / "cut.png")


def test_missing_image_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.png"):
        load_image(tmp_path / "nope.png")


# ---------------------------------------------------------------------------------------------- ratings


def test_load_ratings_reads_mos_and_averages_raw_ratings(imgdir):
    path = _manifest(
        imgdir,
        [
            {"image": "img/a.png", "dimension": "layout", "mos": 3.5, "prompt": "p"},
            "",
            {"image": "img/b.png", "dimension": "lighting", "ratings": [1, 2, 4]},  # (1 + 2 + 4) / 3
        ],
    )
    result = load_ratings(path)
    assert len(result) == 2 and result.skipped == [] and result.source == str(path)
    first, second = result.rows
    assert first == RatingRow((imgdir / "img/a.png").resolve(), "layout", 3.5, 1, {"prompt": "p"})
    assert (second.line, second.mos, second.extra) == (3, pytest.approx(7 / 3), {"ratings": [1, 2, 4]})


BAD_RATING_ROWS = [
    ('{"image": "img/a.png", "dimension": "x", "mos": 3', "invalid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ({"image": "img/a.png", "dimension": "x"}, "missing field 'mos' \\(or 'ratings'\\)"),
    ({"dimension": "x", "mos": 3}, "missing field\\(s\\) 'image'"),
    ({"image": "img/a.png", "mos": 3}, "missing field\\(s\\) 'dimension'"),
    ({"image": "img/a.png", "dimension": "", "mos": 3}, "'dimension' must be a non-empty string"),
    ({"image": "img/a.png", "dimension": "x", "mos": "3.5"}, "'mos' must be a finite number, got '3.5'.*unquoted"),
    ({"image": "img/a.png", "dimension": "x", "mos": True}, "'mos' must be a finite number"),
    ({"image": "img/a.png", "dimension": "x", "ratings": [3, "four"]}, "each rating must be a finite number"),
    ({"image": "img/a.png", "dimension": "x", "ratings": []}, "'ratings' must be a non-empty list"),
    ({"image": "img/a.png", "dimension": "x", "mos": 7.0}, "mos 7 is outside mos_range \\(1.0, 5.0\\)"),
    ({"image": "img/a.png", "dimension": "x", "ratings": [5, 6]}, "rating 6 is outside mos_range"),
    ({"image": "img/zzz.png", "dimension": "x", "mos": 3}, "'image' image 'img/zzz.png' not found.*fix the path"),
    ({"image": "bad.png", "dimension": "x", "mos": 3}, "'image' image unusable: .*bad\\.png: cannot read"),
    (
        {"image": "../a.png", "dimension": "x", "mos": 3},
        "image path '../a.png' climbs out of the images' folder",
    ),
    ({"image": "/etc/hosts", "dimension": "x", "mos": 3}, "image path '/etc/hosts' is absolute"),
    ({"image": 5, "dimension": "x", "mos": 3}, "'image' must be an image path"),
]


@pytest.mark.parametrize(("row", "message"), BAD_RATING_ROWS)
def test_bad_rating_row_names_file_and_line(imgdir, row, message):
    (imgdir / "bad.png").write_bytes(b"\x89PNG garbage")
    path = _manifest(imgdir, [{"image": "img/a.png", "dimension": "x", "mos": 3}, "", row])
    with pytest.raises(ManifestError, match=r"m\.jsonl:3: " + message):
        load_ratings(path, mos_range=(1.0, 5.0))


def test_empty_manifest_is_an_error(tmp_path):
    path = _manifest(tmp_path, ["", "  "])
    with pytest.raises(ManifestError, match=r"m\.jsonl: empty manifest"):
        load_ratings(path)


def test_missing_manifest_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"ratings\.jsonl"):
        load_ratings(tmp_path / "ratings.jsonl")


def test_oversized_image_in_manifest(imgdir):
    path = _manifest(imgdir, [{"image": "img/a.png", "dimension": "x", "mos": 3}])
    with pytest.raises(ManifestError, match=r"m\.jsonl:1: 'image' image unusable: .*8x6 = 48 pixels.*max_pixels=10"):
        load_ratings(path, max_pixels=10)


def test_skip_bad_skips_logs_and_counts(imgdir, caplog):
    rows = [
        {"image": "img/a.png", "dimension": "x", "mos": 3},
        {"image": "img/a.png", "dimension": "x", "mos": "high"},
        "{oops",
        {"image": "img/missing.png", "dimension": "x", "mos": 2},
        {"image": "img/b.png", "dimension": "y", "ratings": [4, 5]},
    ]
    path = _manifest(imgdir, rows)
    with caplog.at_level(logging.WARNING, logger="reward.data"):
        result = load_ratings(path, skip_bad=True)
    assert [r.line for r in result.rows] == [1, 5]
    assert [s.line for s in result.skipped] == [2, 3, 4]
    assert "m.jsonl:4" in result.skipped[2].reason
    assert "skipped 3 of 5 rows" in caplog.text


def test_skip_bad_with_every_row_bad_still_fails(imgdir):
    path = _manifest(imgdir, [{"image": "img/a.png"}, {"mos": 1}])
    with pytest.raises(ManifestError, match=r"all 2 rows are bad.*m\.jsonl:1"):
        load_ratings(path, skip_bad=True)


def test_check_images_false_does_not_open_files_but_still_refuses_escapes(imgdir):
    path = _manifest(imgdir, [{"image": "img/not-yet.png", "dimension": "x", "mos": 3}])
    assert load_ratings(path, check_images=False).rows[0].image == (imgdir / "img/not-yet.png").resolve()
    path = _manifest(imgdir, [{"image": "../x.png", "dimension": "x", "mos": 3}])
    with pytest.raises(ManifestError, match="climbs out"):
        load_ratings(path, check_images=False)


# ---------------------------------------------------------------------------------------------- pairs, inpainting


def test_load_pairs_normalises_labels(imgdir):
    path = _manifest(
        imgdir,
        [
            {"a": "img/a.png", "b": "img/b.png", "label": "A", "dimension": "x"},
            {"a": "img/b.png", "b": "img/a.png", "label": " tie "},
        ],
    )
    rows = load_pairs(path).rows
    assert rows[0] == PairRow(
        (imgdir / "img/a.png").resolve(), (imgdir / "img/b.png").resolve(), "a", 1, {"dimension": "x"}
    )
    assert rows[1].label == "tie"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"a": "img/a.png", "b": "img/b.png", "label": "left"}, "'label' must be 'a', 'b' or 'tie', got 'left'"),
        ({"a": "img/a.png", "label": "a"}, "missing field\\(s\\) 'b'"),
        ({"a": "img/a.png", "b": "img/nope.png", "label": "a"}, "'b' image 'img/nope.png' not found"),
    ],
)
def test_bad_pair_row_names_file_and_line(imgdir, row, message):
    with pytest.raises(ManifestError, match=r"p\.jsonl:1: " + message):
        load_pairs(_manifest(imgdir, [row], name="p.jsonl"))


def test_load_inpainting_rows_and_empty_prompt(imgdir):
    path = _manifest(imgdir, [{"image": "img/a.png", "mask": "mask/a.png", "prompt": ""}])
    (row,) = load_inpainting(path).rows
    assert row == InpaintRow((imgdir / "img/a.png").resolve(), (imgdir / "mask/a.png").resolve(), "", 1, {})


def test_inpainting_mask_must_match_image_size(imgdir):
    _png(imgdir / "mask" / "small.png", size=(4, 4))
    path = _manifest(imgdir, [{"image": "img/a.png", "mask": "mask/small.png", "prompt": "door"}], name="t.jsonl")
    with pytest.raises(ManifestError, match=r"t\.jsonl:1: mask is \(4, 4\) but image is \(8, 6\)"):
        load_inpainting(path)


def test_inpainting_prompt_must_be_text(imgdir):
    path = _manifest(imgdir, [{"image": "img/a.png", "mask": "mask/a.png", "prompt": 3}])
    with pytest.raises(ManifestError, match=r"m\.jsonl:1: 'prompt' must be a string, got 3"):
        load_inpainting(path)


# ---------------------------------------------------------------------------------------------- datasets


def test_dataset_with_pil_images_is_accepted():
    ds = datasets.Dataset.from_dict(
        {
            "image": [Image.new("L", (3, 2), 9), Image.new("RGBA", (3, 2), (0, 0, 0, 0))],
            "dimension": ["x", "y"],
            "mos": [2.0, 4.5],
        }
    ).cast_column("image", datasets.Image())
    rows = load_ratings(ds).rows
    assert [r.mos for r in rows] == [2.0, 4.5]
    assert all(load_image(r.image).mode == "RGB" for r in rows)
    assert load_image(rows[1].image).getpixel((0, 0)) == (255, 255, 255)


def test_dataset_with_paths_and_bad_row_names_the_row(imgdir):
    ds = datasets.Dataset.from_dict(
        {"image": [str(imgdir / "img/a.png"), str(imgdir / "img/gone.png")], "dimension": ["x", "x"], "mos": [1, 2]}
    )
    with pytest.raises(ManifestError, match=r"dataset .* row 2: 'image' image .*gone\.png' not found"):
        load_ratings(ds)
    result = load_ratings(ds, skip_bad=True)
    assert [r.image for r in result.rows] == [imgdir / "img/a.png"] and [s.line for s in result.skipped] == [2]


def test_dataset_saved_to_disk_resolves_paths_in_its_folder(imgdir):
    ds = datasets.Dataset.from_dict({"a": ["../img/a.png"], "b": ["../img/b.png"], "label": ["b"]})
    ds.save_to_disk(str(imgdir / "pairs_ds"))
    # paths inside a saved dataset are relative to its folder and may not leave it
    with pytest.raises(ManifestError, match=r"pairs_ds row 1: .*climbs out"):
        load_pairs(imgdir / "pairs_ds")
    ds = datasets.Dataset.from_dict({"a": ["a.png"], "b": ["a.png"], "label": ["b"]})
    ds.save_to_disk(str(imgdir / "ok_ds"))
    _png(imgdir / "ok_ds" / "a.png")
    (row,) = load_pairs(imgdir / "ok_ds").rows
    assert (row.a, row.label) == ((imgdir / "ok_ds" / "a.png").resolve(), "b")


def test_dataset_dict_needs_a_split(tmp_path):
    dd = datasets.DatasetDict({"test": datasets.Dataset.from_dict({"image": ["a.png"]})})
    with pytest.raises(ManifestError, match="pass one split"):
        load_ratings(dd)
    dd.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ManifestError, match=r"holds splits \['test'\]"):
        load_ratings(tmp_path / "dd")


def test_folder_that_is_not_a_dataset(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(ManifestError, match="not a dataset saved with save_to_disk"):
        load_ratings(tmp_path / "plain")


def test_unsupported_source_type():
    with pytest.raises(TypeError, match="pass a JSONL path"):
        load_ratings([{"image": "a.png"}])
