"""Names from data (dimensions, datasets, protocols) become file names that stay in their folder and never collide."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hydra import initialize_config_dir
from PIL import Image

from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.core.cli import compose
from reward.core.config import parse
from reward.data.files import safe_name

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TRICKY = [
    "../../../../victim/photo",
    "/etc/passwd",
    "..",
    ".",
    "",
    ".hidden",
    "a/b",
    "a:b",
    "a-b",
    "a b",
    "a\\b",
    "a\x00b",
    "lighting",
    "Lighting",
    "清晰度",
    "色彩",
    "噪点",
    "x" * 400,
    "x" * 401,
    "颜" * 200,
    "victim-photo-f090072e",
]


@pytest.mark.parametrize("name", TRICKY)
def test_a_safe_name_is_one_plain_file_name_inside_its_folder(name, tmp_path):
    safe = safe_name(name)
    assert safe and "/" not in safe and "\\" not in safe and "\x00" not in safe
    assert not safe.startswith(".") and len(safe.encode("utf-8")) < 120
    target = tmp_path / f"scatter_{safe}.png"
    target.write_bytes(b"x")
    assert target.resolve().parent == tmp_path.resolve()


def test_different_names_never_share_a_file_and_plain_names_stay_readable():
    assert len({safe_name(n) for n in TRICKY}) == len(TRICKY)
    assert [safe_name(n) for n in ("lighting", "清晰度", "text_legibility", "kadid10k-test")] == [
        "lighting",
        "清晰度",
        "text_legibility",
        "kadid10k-test",
    ]
    assert safe_name("a/b").startswith("a-b-") and safe_name("a:b").startswith("a-b-")


def _cfg(**overrides):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("evaluate", overrides=[f"{k}={v}" for k, v in overrides.items()], schema=EvaluateSettings)


def test_a_dimension_naming_a_path_writes_inside_out_and_leaves_the_victim_untouched(tmp_path, tiny_vlm_path):
    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    rows = []
    for i in range(4):
        Image.fromarray(np.full((56, 56, 3), 40 * i, np.uint8)).save(data / f"images/{i}.png")
        for dim in ("../../../../victim/photo", "a/b", "a:b"):
            rows.append({"image": f"images/{i}.png", "dimension": dim, "mos": 1 + i})
    (data / "ratings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "a" / "b" / "out"
    # where out / "scatter_../../../../victim/photo.png" lands
    victim = Path(os.path.normpath(out / "scatter_.." / ".." / ".." / ".." / "victim" / "photo.png"))
    victim.parent.mkdir(parents=True)
    victim.write_bytes(b"the user's photo")
    run_evaluate(
        parse(EvaluateSettings, _cfg(**{"reward.model": tiny_vlm_path, "data": data / "ratings.jsonl", "out": out}))
    )
    assert victim.read_bytes() == b"the user's photo"
    plots = sorted(p.name for p in out.rglob("scatter_*"))
    assert len(plots) == 3  # one per dimension: a/b and a:b do not share a file
    assert all((out / name).is_file() for name in plots)  # every plot directly inside out/
    assert not [p for p in out.iterdir() if p.is_dir()]
