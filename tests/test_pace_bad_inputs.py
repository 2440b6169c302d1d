"""PACE given hostile or careless inputs: nothing a protocol names is read outside its folder, anchors are
decoded and re-encoded, numbers are checked to a sane range, typos name the close match, unreadable files are named,
the judge refuses a bad out= before any work, and no NaN reaches a scores file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from pace_doubles import example_protocol, write_example_protocol
from PIL import Image, PngImagePlugin

from conftest import run_cli
from pace_judge.commands import memory as memory_command
from pace_judge.commands.calibrate import CalibrateSettings
from pace_judge.commands.judge import JudgeSettings
from pace_judge.commands.judge import run as run_judge
from pace_judge.commands.memory import MemorySettings
from pace_judge.protocol import load_protocol, protocol_from_dict, protocol_to_dict
from reward.core.config import parse
from reward.core.errors import UserError


def memory_cli(argv: list[str]) -> int:
    return run_cli("memory", memory_command.run, argv, memory_command.SUBCOMMANDS, schema=MemorySettings)


def _with_anchor(folder: Path, high_image: str) -> Path:
    """A calibrated protocol in ``folder`` whose high anchor is ``high_image`` (as written in the file)."""
    path = write_example_protocol(folder)
    raw = json.loads(path.read_text())
    raw["anchors"]["high"]["image"] = high_image
    path.write_text(json.dumps(raw))
    return path


HOSTILE = {
    "absolute": lambda folder: "/etc/passwd",
    "relative": lambda folder: "../../../../../../../../etc/passwd",
    "symlink": lambda folder: (folder / "anchors" / "link.png").symlink_to("/etc/passwd") or "anchors/link.png",
    "text named .png": lambda folder: (
        (folder / "anchors" / "fake.png").write_text("root:x:0:0\n") and "anchors/fake.png"
    ),
}
EXPECTED = {
    "absolute": "is an absolute path; anchor paths are relative to the protocol's folder (pass allow_absolute_paths",
    "relative": "leaves the protocol's folder",
    "symlink": "leaves the protocol's folder",
    "text named .png": "anchors.high.image = 'anchors/fake.png' is not a readable image",
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_memory_import_refuses_an_anchor_that_is_not_an_image_inside_the_protocol_folder(tmp_path, case, capsys):
    folder = tmp_path / "proto"
    write_example_protocol(folder)
    protocol = _with_anchor(folder, HOSTILE[case](folder))
    bank = tmp_path / "mem"
    assert memory_cli(["import", f"memory={bank}", f"protocol={protocol}"]) == 2
    err = capsys.readouterr().err
    assert EXPECTED[case] in err and str(protocol) in err and "Traceback" not in err
    assert not bank.exists() or not list(bank.rglob("*.png"))  # nothing was copied into the bank
    with pytest.raises(UserError, match=EXPECTED[case].split(" (")[0].replace("(", r"\(")):
        load_protocol(protocol)


def test_absolute_anchor_paths_need_allow_absolute_paths_and_the_bank_reencodes_the_image(tmp_path, capsys):
    outside = tmp_path / "elsewhere" / "high.png"
    outside.parent.mkdir()
    info = PngImagePlugin.PngInfo()
    info.add_text("payload", "bytes that must not travel into the bank")
    pixels = np.random.default_rng(0).integers(0, 256, (24, 32, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(outside, pnginfo=info)
    protocol = _with_anchor(tmp_path / "proto", str(outside))
    bank = tmp_path / "mem"
    assert memory_cli(["import", f"memory={bank}", f"protocol={protocol}"]) == 2
    assert "allow_absolute_paths=true" in capsys.readouterr().err
    assert memory_cli(["import", f"memory={bank}", f"protocol={protocol}", "allow_absolute_paths=true"]) == 0
    stored = bank / "sharpness" / "anchors" / "high.png"
    assert np.array_equal(np.asarray(Image.open(stored)), pixels)  # the same image ...
    assert b"payload" not in stored.read_bytes() and stored.read_bytes() != outside.read_bytes()  # ... re-encoded
    assert json.loads((bank / "sharpness" / "protocol.json").read_text())["anchors"]["high"]["image"] == (
        "anchors/high.png"
    )


def test_the_memory_index_cannot_point_outside_the_bank(tmp_path, capsys):
    bank = tmp_path / "mem"
    bank.mkdir()
    protocol = write_example_protocol(tmp_path / "proto")
    index = {
        "schema": "pace-memory/1",
        "embedder": None,
        "entries": {"sharpness": {"dimension": "sharpness", "protocol": str(protocol), "embedding": [0.0]}},
    }
    (bank / "index.json").write_text(json.dumps(index))
    assert memory_cli(["show", f"memory={bank}", "dimension=sharpness"]) == 2
    assert "index.json" in (err := capsys.readouterr().err) and "is an absolute path" in err


@pytest.mark.parametrize("weight", [1e300, 1e-300, math.inf])
def test_probe_weights_outside_a_sane_range_are_refused(weight):
    raw = protocol_to_dict(example_protocol())
    raw["probes"][0]["weight"] = weight
    with pytest.raises(UserError, match=r"probes\[0\]\.weight") as err:
        protocol_from_dict(raw, source="p.json")
    assert "outside 0.001-1000" in str(err.value) or "must be a finite number" in str(err.value)


def test_unknown_protocol_keys_are_errors_naming_the_close_match():
    raw = protocol_to_dict(example_protocol())
    raw["probes"][1]["wieght"] = raw["probes"][1].pop("weight")
    raw["anchor"] = {"high": {"image": "h.png", "score": 4}, "low": {"image": "l.png", "score": 2}}
    raw["probes"][0]["options"][0]["scroe"] = 5
    with pytest.raises(UserError) as err:
        protocol_from_dict(raw, source="p.json")
    msg = str(err.value)
    assert "unknown key probes[1].wieght (did you mean 'weight'?)" in msg
    assert "unknown key anchor (did you mean 'anchors'?)" in msg
    assert "unknown key probes[0].options[0].scroe (did you mean 'score'?)" in msg


def test_a_latin1_protocol_and_a_corrupt_memory_index_are_named(tmp_path, capsys):
    path = tmp_path / "p.json"
    text = json.dumps(protocol_to_dict(example_protocol("netteté")), ensure_ascii=False)
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(UserError, match=rf"{path}: not UTF-8 text \(byte 0xe9 at offset \d+\)"):
        load_protocol(path)
    bank = tmp_path / "mem"
    bank.mkdir()
    (bank / "index.json").write_text('{"schema": "pace-memory/1", "entries": {')
    assert memory_cli(["list", f"memory={bank}"]) == 2
    err = capsys.readouterr().err
    assert f"{bank / 'index.json'}:1:" in err and "not valid JSON" in err and "Traceback" not in err


def _images(folder: Path, n: int, size: tuple[int, int] = (40, 32)) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(folder / f"im{i}.png")


def test_judge_refuses_an_out_that_is_a_file_before_loading_anything(tmp_path, pace_protocol_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # offline, the uncached Hub id is refused first
    _images(tmp_path / "imgs", 2)
    (tmp_path / "out.txt").write_text("precious")
    settings = {
        "protocol": str(pace_protocol_path),
        "images": str(tmp_path / "imgs"),
        "out": str(tmp_path / "out.txt"),
        "model": "no-such-org/no-such-model",  # would fail if the model were loaded first
    }
    with pytest.raises(ValueError, match=r"out=.*out.txt is a file"):
        run_judge(parse(JudgeSettings, settings))
    assert (tmp_path / "out.txt").read_text() == "precious"


def test_judge_decode_guard_names_the_judge_key(tmp_path, tiny_vlm_path, pace_protocol_path):
    _images(tmp_path / "imgs", 1, size=(64, 48))
    base = {
        "protocol": str(pace_protocol_path),
        "images": str(tmp_path / "imgs"),
        "model": str(tiny_vlm_path),
        "max_decode_pixels": 1000,
    }
    with pytest.raises(UserError, match=r"64x48 = 3,072 pixels, above max_decode_pixels=1,000") as err:
        run_judge(parse(JudgeSettings, {**base, "out": str(tmp_path / "o1")}))
    assert "pass a larger max_decode_pixels" in str(err.value) and "max_pixels is the model" in str(err.value)


def test_a_model_giving_nan_writes_null_scores_never_nan(tmp_path, tiny_vlm_path, pace_protocol_path):
    import shutil

    import torch
    from transformers import AutoModelForImageTextToText

    broken = tmp_path / "nan-vlm"
    shutil.copytree(tiny_vlm_path, broken)
    model = AutoModelForImageTextToText.from_pretrained(broken)
    with torch.no_grad():
        model.lm_head.weight[0, 0] = math.nan  # every logit NaN after the softmax's max
    model.save_pretrained(broken)
    _images(tmp_path / "imgs", 2)
    settings = {
        "protocol": str(pace_protocol_path),
        "images": str(tmp_path / "imgs"),
        "out": str(tmp_path / "out"),
        "model": str(broken),
    }
    rows = run_judge(parse(JudgeSettings, settings))
    assert [r["score"] for r in rows] == [None, None]

    def refuse(constant: str) -> float:
        raise AssertionError(f"{constant} in a scores file")

    lines = (tmp_path / "out" / "scores.jsonl").read_text().splitlines()
    assert [json.loads(line, parse_constant=refuse)["score"] for line in lines] == [None, None]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(), parse_constant=refuse)
    assert summary["failed"] == 2 and summary["scored"] == 0


def test_calibrate_refuses_a_candidates_folder_it_did_not_write(tmp_path, capsys):
    from pace_judge.commands.calibrate import run as run_calibrate

    protocol = write_example_protocol(tmp_path / "proto", anchors=False)
    (tmp_path / "proto" / "calibration").mkdir()
    (tmp_path / "proto" / "calibration" / "notes.txt").write_text("mine")
    argv = [f"protocol={protocol}", f"pipeline={tmp_path / 'no-sd'}", "prompts.positive=[a]", "prompts.negative=[b]"]
    assert run_cli("calibrate", run_calibrate, argv, schema=CalibrateSettings) == 2
    assert "already holds files that this command did not write" in capsys.readouterr().err
    assert (tmp_path / "proto" / "calibration" / "notes.txt").read_text() == "mine"
