"""A run is known by the content of what it read, not by names or paths: images of a table keyed by their bytes (two
images sharing a file name are two images), a rerun after any input changed in place (an image, a dataset re-saved,
weights changed by one byte with their size and time kept) is refused naming the input, never "already complete",
and a split a dataset does not have is refused."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import datasets
import numpy as np
import pytest
from hydra import initialize_config_dir
from iqa_fixtures import koniq_sets
from PIL import Image

from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.core.cli import compose
from reward.core.config import parse
from reward.core.errors import UserError
from reward.core.outputs import RunComplete, check_output, prepare_output
from reward.data import ManifestError, load_ratings

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _evaluate_cfg(**overrides):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("evaluate", overrides=[f"{k}={v}" for k, v in overrides.items()], schema=EvaluateSettings)


def _png(path: Path, value: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((56, 56, 3), value, np.uint8)).save(path)
    return path


def _replace_keeping_size_and_time(path: Path, edit) -> None:
    """Change a file's bytes in place and put back its modification time (its size is the caller's business)."""
    before = path.stat()
    edit(path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_mtime_ns == before.st_mtime_ns


def _live_like(tmp_path: Path, extra_row: bool = False) -> Path:
    """LIVE's layout as a table: pristine images in jpg/ and blurred ones in gblur/ under the same file names;
    ``save_to_disk`` keeps only the base names (``img0.bmp`` twice). With ``extra_row``, jpg/img0.bmp is rated on a
    second dimension as well."""
    paths, mos, dims = [], [], []
    for folder, offset, score in (("jpg", 0, 4.0), ("gblur", 120, 1.5)):
        for i in range(3):
            paths.append(str(_png(tmp_path / "live" / folder / f"img{i}.bmp", 30 * i + offset)))
            mos.append(score + 0.2 * i)
            dims.append("quality")
    if extra_row:
        paths.append(paths[0])
        mos.append(3.0)
        dims.append("sharpness")
    ds = datasets.Dataset.from_dict({"image": paths, "mos": mos, "dimension": dims})
    ds = ds.cast_column("image", datasets.Image())
    ds.save_to_disk(str(tmp_path / "saved"))
    return tmp_path / "saved"


# ---------------------------------------------------------------------------------------------- images by content


def test_images_sharing_a_stored_file_name_are_different_images_and_one_image_on_two_rows_is_one(tmp_path):
    saved = _live_like(tmp_path, extra_row=True)
    rows = load_ratings(f"hf:{saved}", check_images=False).rows
    keys = [r.key for r in rows]
    assert [k.split("#")[0] for k in keys[:6]] == [f"image:img{i}.bmp" for i in range(3)] * 2  # a readable name
    assert len(set(keys[:6])) == 6  # jpg/img0.bmp and gblur/img0.bmp are two images
    assert keys[6] == keys[0]  # the same bytes on a second row (another dimension): the same image


def test_evaluate_scores_each_of_the_images_that_share_file_names(tmp_path, tiny_vlm_path):
    saved = _live_like(tmp_path)
    out = tmp_path / "out"
    metrics = run_evaluate(
        parse(
            EvaluateSettings,
            _evaluate_cfg(**{"reward": "qbench", "reward.model": tiny_vlm_path, "data": f"hf:{saved}", "out": out}),
        )
    )
    scores = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == 6 and len({s["image"] for s in scores}) == 6  # 6 images, 6 scored (not 3, silently)
    assert len({round(s["score"], 6) for s in scores}) == 6  # pristine and blurred never share a score
    assert metrics["quality"]["n"] == 6


# ---------------------------------------------------------------------------------------------- reruns by content


def _ratings(folder: Path) -> Path:
    rows = []
    for i in range(3):
        _png(folder / "img" / f"{i}.png", 60 * i)
        rows.append({"image": f"./img/{i}.png" if i == 0 else f"img/{i}.png", "dimension": "lighting", "mos": 1 + i})
    rows.append({"image": "img/0.png", "dimension": "harmony", "mos": 2})  # the same file, spelled another way
    path = folder / "ratings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _complete(out: Path, settings: dict, inputs: dict | None = None) -> None:
    run = prepare_output(out, "evaluate", settings, inputs)
    (out / "metrics.json").write_text("{}")
    run.finish()
    del run


def test_a_manifest_is_known_by_the_files_its_rows_name(tmp_path):
    data = _ratings(tmp_path / "data")
    out = tmp_path / "out"
    _complete(out, {"data": str(data)}, {"data": data})
    with pytest.raises(RunComplete):  # the identical rerun: nothing to do
        check_output(out, "evaluate", {"data": str(data)}, {"data": data})
    recorded = json.loads((out / "run.json").read_text())["inputs"]["data"]
    assert recorded["named"]["files"] == 3  # ./img/0.png and img/0.png: one file
    image = tmp_path / "data" / "img" / "1.png"
    _replace_keeping_size_and_time(image, lambda p: _png(p, 61))  # same name, size and time: other pixels
    with pytest.raises(UserError, match=r"holds another run \(1 difference\(s\)\):\n  - inputs.data.named"):
        check_output(out, "evaluate", {"data": str(data)}, {"data": data})


def test_weights_changed_by_one_byte_with_size_and_time_kept_are_another_model(tmp_path, tiny_vlm_path):
    model = Path(shutil.copytree(tiny_vlm_path, tmp_path / "model"))
    settings = {"reward": {"name": "qbench", "model": str(model)}, "data": "x.jsonl"}
    out = tmp_path / "out"
    _complete(out, settings)  # the model is found among the settings: no list of inputs needed
    assert json.loads((out / "run.json").read_text())["inputs"]["reward.model"]["files"] >= 3

    def flip_last_byte(path: Path) -> None:
        data = bytearray(path.read_bytes())
        data[-1] ^= 1
        path.write_bytes(bytes(data))

    _replace_keeping_size_and_time(model / "model.safetensors", flip_last_byte)
    with pytest.raises(UserError, match=r"inputs.reward.model.sha256: '[0-9a-f]+' -> '[0-9a-f]+'"):
        check_output(out, "evaluate", settings)


def test_a_dataset_folder_re_saved_with_other_mos_is_another_input(tmp_path):
    saved = _live_like(tmp_path)
    out = tmp_path / "out"
    settings = {"data": f"hf:{saved}"}
    _complete(out, settings, {"data": f"hf:{saved}"})
    with pytest.raises(RunComplete):
        check_output(out, "evaluate", settings, {"data": f"hf:{saved}"})
    table = datasets.load_from_disk(str(saved))
    table.map(lambda row: {"mos": 6.0 - row["mos"]}).save_to_disk(str(tmp_path / "resaved"))
    shutil.rmtree(saved)
    shutil.move(tmp_path / "resaved", saved)  # the same folder, the same images, other MOS
    with pytest.raises(UserError, match=r"inputs.data.sha256"):
        check_output(out, "evaluate", settings, {"data": f"hf:{saved}"})


def test_a_public_dataset_by_name_is_known_by_its_folder(tmp_path):
    folder = tmp_path / "koniq"
    koniq_sets(folder, n=10)
    source = f"koniq10k:{folder}:test"
    out = tmp_path / "out"
    _complete(out, {"data": source})
    assert json.loads((out / "run.json").read_text())["inputs"]["data"]["files"] == 11  # 10 images and the CSV
    _replace_keeping_size_and_time(folder / "1024x768" / "1009.jpg", lambda p: p.write_bytes(p.read_bytes()[::-1]))
    with pytest.raises(UserError, match=r"inputs.data.sha256"):
        check_output(out, "evaluate", {"data": source})


def test_every_setting_naming_a_file_is_an_input_and_a_protocol_names_its_anchors(tmp_path):
    anchors = [_png(tmp_path / "pace" / "anchors" / f"{n}.png", v) for n, v in (("high", 200), ("low", 20))]
    protocol = tmp_path / "pace" / "protocol.json"
    protocol.write_text(
        json.dumps({"anchors": {"high": {"image": "anchors/high.png"}, "low": {"image": "anchors/low.png"}}})
    )
    test_data = _ratings(tmp_path / "test")
    settings = {"data": {"train": "synthetic", "test": str(test_data)}, "reward": {"protocol": str(protocol)}}
    out = tmp_path / "out"
    _complete(out, settings)  # settings only: what they name is read and fingerprinted
    inputs = json.loads((out / "run.json").read_text())["inputs"]
    assert set(inputs) == {"data.test", "reward.protocol"} and inputs["reward.protocol"]["named"]["files"] == 2
    _replace_keeping_size_and_time(anchors[0], lambda p: _png(p, 201))
    with pytest.raises(UserError, match=r"inputs.reward.protocol.named.sha256"):
        check_output(out, "evaluate", settings)


def test_the_output_folder_is_never_one_of_the_inputs(tmp_path):
    out = tmp_path / "out"
    logs = tmp_path / "tensorboard"  # a log folder elsewhere: written by the run, not read
    logs.mkdir()
    settings = {"out": str(out), "trainer": {"logging_dir": str(logs)}, "model": {"cache_dir": str(tmp_path)}}
    first = prepare_output(out, "grpo", settings)
    (logs / "events").write_text("grows as the run goes")
    first.finish()
    del first
    assert json.loads((out / "run.json").read_text())["inputs"] == {}
    with pytest.raises(RunComplete):
        check_output(out, "grpo", settings)


def test_an_output_inside_an_input_folder_and_its_old_runs_moved_aside_are_not_that_input(tmp_path):
    images = tmp_path / "images"  # the judged folder, with the run's output inside it
    images.mkdir()
    (images / "a.png").write_bytes(b"an image")
    out, settings = images / "scores", {"images": str(images)}
    for _ in range(2):  # the second run: overwrite=true moves the first aside, to images/scores.old-<time>
        run = prepare_output(out, "judge", settings, overwrite=True)
        (out / "scores.jsonl").write_text("{}")
        run.finish()
        del run
    assert [p.name.startswith("scores.old-") for p in images.iterdir() if p.is_dir()].count(True) == 1
    with pytest.raises(RunComplete):  # the identical rerun: complete, not "inputs changed"
        check_output(out, "judge", settings)
    (images / "a.png").write_bytes(b"another image")
    with pytest.raises(UserError, match="inputs.images"):
        check_output(out, "judge", settings)


@pytest.mark.slow
def test_evaluate_reruns_after_an_image_or_the_weights_changed_are_refused_naming_them(tmp_path, tiny_vlm_path):
    data = _ratings(tmp_path / "data")
    model = Path(shutil.copytree(tiny_vlm_path, tmp_path / "model"))
    cfg = _evaluate_cfg(**{"reward": "qbench", "reward.model": model, "data": data, "out": tmp_path / "out"})
    run_evaluate(parse(EvaluateSettings, cfg))
    with pytest.raises(RunComplete):
        run_evaluate(parse(EvaluateSettings, cfg))
    _replace_keeping_size_and_time(tmp_path / "data" / "img" / "2.png", lambda p: _png(p, 121))
    with pytest.raises(UserError, match=r"holds another run \(1 difference\(s\)\):\n  - inputs.data.named"):
        run_evaluate(parse(EvaluateSettings, cfg))
    _png(tmp_path / "data" / "img" / "2.png", 120)  # back as it was: the run is complete again
    with pytest.raises(RunComplete):
        run_evaluate(parse(EvaluateSettings, cfg))
    config = json.loads((model / "config.json").read_text())
    config["text_config"]["rms_norm_eps"] = 2e-6  # one hyperparameter changed, file size kept
    text = json.dumps(config)
    _replace_keeping_size_and_time(model / "config.json", lambda p: p.write_text(text))
    with pytest.raises(UserError, match=r"inputs.reward.model.sha256"):
        run_evaluate(parse(EvaluateSettings, cfg))


# ---------------------------------------------------------------------------------------------- splits


def test_a_split_a_single_table_does_not_have_is_refused_naming_what_it_has(tmp_path):
    saved = _live_like(tmp_path)
    with pytest.raises(ManifestError, match=r"hf:.*saved:test: no split 'test'; it has one table without splits"):
        load_ratings(f"hf:{saved}:test")
    table = datasets.load_from_disk(str(saved))
    train = datasets.Dataset(table.data, info=table.info, split=datasets.Split.TRAIN)  # as load_dataset(...)["train"]
    train.save_to_disk(str(tmp_path / "train-only"))
    assert len(load_ratings(f"hf:{tmp_path / 'train-only'}:train")) == 6
    with pytest.raises(ManifestError, match=r"no split 'validation'; it has one table, saved from split 'train'"):
        load_ratings(f"hf:{tmp_path / 'train-only'}:validation")
    assert load_ratings(f"hf:{saved}").info["split"] == "all"


def test_a_lora_adapter_is_known_with_the_base_model_it_names(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    adapter = tmp_path / "scorer"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"\x01" * 512)
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base), "r": 8}))
    settings = {"reward": {"name": "sa-iqa", "model": str(adapter)}}
    out = tmp_path / "out"
    _complete(out, settings)
    assert json.loads((out / "run.json").read_text())["inputs"]["reward.model"]["base_model"]["files"] == 1
    _replace_keeping_size_and_time(base / "model.safetensors", lambda p: p.write_bytes(bytes(range(255, -1, -1)) * 64))
    with pytest.raises(UserError, match=r"inputs.reward.model.base_model.sha256"):
        check_output(out, "evaluate", settings)


def test_a_manifest_is_known_by_what_it_names_whatever_its_file_name_or_format(tmp_path):
    data = _ratings(tmp_path / "data")
    as_text = data.with_name("ratings.txt")  # JSON lines under another name
    as_text.write_text(data.read_text())
    table = tmp_path / "data" / "scores.csv"  # a table naming its images
    table.write_text("image,score\nimg/1.png,0.5\nimg/2.png,0.7\n")
    outside = _png(tmp_path / "elsewhere" / "x.png", 9)  # named by a table of a datasets folder, outside it
    saved = tmp_path / "hfjson"
    saved.mkdir()
    (saved / "train.jsonl").write_text(json.dumps({"image": str(outside), "mos": 3.0}) + "\n")
    settings = {"data": str(as_text), "scores": str(table), "more": f"hf:{saved}"}
    out = tmp_path / "out"
    _complete(out, settings)
    inputs = json.loads((out / "run.json").read_text())["inputs"]
    assert (inputs["data"]["named"]["files"], inputs["scores"]["named"]["files"]) == (3, 2)
    assert inputs["more"]["named"]["files"] == 1
    _replace_keeping_size_and_time(tmp_path / "data" / "img" / "2.png", lambda p: _png(p, 121))
    _replace_keeping_size_and_time(outside, lambda p: _png(p, 10))
    with pytest.raises(UserError) as refused:
        check_output(out, "evaluate", settings)
    assert "(3 difference(s))" in str(refused.value)
    for key in ("inputs.data.named.sha256", "inputs.scores.named.sha256", "inputs.more.named.sha256"):
        assert key in str(refused.value)


def test_a_hub_model_the_run_downloaded_is_the_same_input_on_rerun_and_known_by_its_revision(tmp_path, monkeypatch):
    from reward.core import fingerprints

    snapshot = tmp_path / "hub" / "snapshots" / ("a" * 40)
    monkeypatch.setattr(fingerprints, "hub_snapshot", lambda value: None)  # not in the cache when the run starts
    settings = {"reward": {"model": "example-org/tiny-scorer"}}
    inputs = {"model": "example-org/tiny-scorer"}
    out = tmp_path / "out"
    run = prepare_output(out, "evaluate", settings, inputs)
    (out / "scores.jsonl").write_text("{}")
    snapshot.mkdir(parents=True)  # the run downloads it
    (snapshot / "model.safetensors").write_bytes(b"\x00" * 512)
    monkeypatch.setattr(
        fingerprints, "hub_snapshot", lambda value: snapshot if value == "example-org/tiny-scorer" else None
    )
    run.finish()
    del run
    recorded = json.loads((out / "run.json").read_text())["inputs"]["model"]
    assert recorded == {"repo": "example-org/tiny-scorer", "revision": "a" * 40}
    with pytest.raises(RunComplete):  # the identical rerun, the model now in the cache: nothing to do
        check_output(out, "evaluate", settings, inputs)
    newer = snapshot.with_name("b" * 40)
    monkeypatch.setattr(
        fingerprints, "hub_snapshot", lambda value: newer if value == "example-org/tiny-scorer" else None
    )
    with pytest.raises(UserError, match=r"inputs.model.revision"):  # another revision in the cache
        check_output(out, "evaluate", settings, inputs)


def test_calibration_and_test_splits_sharing_an_image_by_content_are_refused(tmp_path, capsys):
    from pace_doubles import write_example_protocol

    from conftest import run_cli
    from pace_judge.commands.calibrate import CalibrateSettings
    from pace_judge.commands.calibrate import run as run_calibrate
    from pace_judge.protocol import load_protocol

    protocol = write_example_protocol(tmp_path / "proto", anchors=False)
    calib = tmp_path / "data" / "calib.jsonl"
    rows = [{"image": f"img/{i}.png", "dimension": "sharpness", "mos": 1.0 + i} for i in range(3)]
    for i in range(3):
        _png(tmp_path / "data" / "img" / f"{i}.png", 70 * i)
    calib.write_text("".join(json.dumps(r) + "\n" for r in rows))
    test = tmp_path / "data" / "test.jsonl"
    (tmp_path / "data" / "img" / "x").mkdir()
    shutil.copy(tmp_path / "data" / "img" / "2.png", tmp_path / "data" / "copy.png")
    for named in ("img/x/../1.png", "copy.png"):  # the same file spelled another way; a copy under another name
        test.write_text(json.dumps({"image": named, "dimension": "sharpness", "mos": 2.0}) + "\n")
        argv = [f"protocol={protocol}", f"benchmark={calib}", f"test={test}"]
        assert run_cli("calibrate", run_calibrate, argv, schema=CalibrateSettings) == 2
        assert "shares 1 image(s) with the test split" in capsys.readouterr().err
    _png(tmp_path / "data" / "other.png", 33)
    test.write_text(json.dumps({"image": "other.png", "dimension": "sharpness", "mos": 2.0}) + "\n")
    argv = [f"protocol={protocol}", f"benchmark={calib}", f"test={test}"]
    assert run_cli("calibrate", run_calibrate, argv, schema=CalibrateSettings) == 0
    record = load_protocol(protocol).provenance["calibration"]
    assert record["inputs"]["benchmark"]["named"]["files"] == 3 and record["inputs"]["test"]["named"]["files"] == 1


def test_calibration_splits_of_tables_are_compared_by_content_never_by_file_name(tmp_path):
    from pace_doubles import example_protocol

    from pace_judge.calibration import CalibrationSource, calibrate_benchmark
    from reward.core.errors import UserError

    table = datasets.load_from_disk(str(_live_like(tmp_path)))  # jpg/imgN.bmp, gblur/imgN.bmp: both stored imgN.bmp
    for name, test_rows in (("blurred", [3, 4, 5]), ("leaky", [3, 0])):  # ... and jpg/img0.bmp in both splits
        splits = datasets.DatasetDict({"train": table.select([0, 1, 2]), "test": table.select(test_rows)})
        splits.save_to_disk(str(tmp_path / name))
    cfg = {"dimension": "quality", "mos_range": [1, 5]}
    blurred = {**cfg, "benchmark": f"hf:{tmp_path / 'blurred'}:train", "test": f"hf:{tmp_path / 'blurred'}:test"}
    record = calibrate_benchmark(
        CalibrationSource(**blurred), example_protocol(), tmp_path / "proto"
    )  # same names, other images
    assert record["high"].startswith("image:img") and record["high"] != record["low"]  # the cell's name and digest
    leaky = {**cfg, "benchmark": f"hf:{tmp_path / 'leaky'}:train", "test": f"hf:{tmp_path / 'leaky'}:test"}
    with pytest.raises(UserError, match=r"shares 1 image\(s\) with the test split"):
        calibrate_benchmark(CalibrationSource(**leaky), example_protocol(), tmp_path / "proto2")


def test_a_datasets_table_naming_image_files_outside_its_folder_is_known_by_them(tmp_path):
    images = [_png(tmp_path / "photos" / f"{i}.png", 40 * i) for i in range(3)]
    table = datasets.Dataset.from_dict({"img_path": [str(p) for p in images], "mos": [1.0, 2.0, 3.0]})
    table.save_to_disk(str(tmp_path / "table"))  # the table holds the paths, not the images
    settings = {"data": f"hf:{tmp_path / 'table'}"}
    out = tmp_path / "out"
    _complete(out, settings)
    assert json.loads((out / "run.json").read_text())["inputs"]["data"]["named"]["files"] == 3
    _replace_keeping_size_and_time(images[1], lambda p: _png(p, 41))
    with pytest.raises(UserError, match=r"inputs.data.named.sha256"):
        check_output(out, "evaluate", settings)


def test_an_unchanged_manifest_is_not_read_again_and_an_image_rewritten_with_its_time_kept_is_seen(
    tmp_path, monkeypatch
):
    """The digest cache (DVC's rule): a rerun whose manifest and images keep their stat reads neither again; an image
    rewritten in place with its size and modification time put back has another change time, so it is hashed anew."""
    from reward.core import fingerprints

    monkeypatch.setenv("PERCEPTUAL_REWARDS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "img").mkdir()
    for i in range(3):
        (tmp_path / f"img/{i}.png").write_bytes(bytes([i]) * 64)
    manifest = tmp_path / "r.jsonl"
    manifest.write_text("".join(json.dumps({"image": f"img/{i}.png", "mos": 3}) + "\n" for i in range(3)))
    first = fingerprints.fingerprint(manifest)
    read = []
    monkeypatch.setattr(fingerprints, "named_files", lambda *a: read.append(a) or {})
    monkeypatch.setattr(fingerprints, "_hash", lambda p: read.append(p) or "")
    assert fingerprints.fingerprint(manifest) == first and read == []  # from the cache: nothing read
    monkeypatch.undo()
    monkeypatch.setenv("PERCEPTUAL_REWARDS_CACHE", str(tmp_path / "cache"))
    _replace_keeping_size_and_time(tmp_path / "img/1.png", lambda p: p.write_bytes(b"\xff" * 64))
    again = fingerprints.fingerprint(manifest)
    assert again["named"]["sha256"] != first["named"]["sha256"] and again["sha256"] == first["sha256"]
