"""An image the Qwen-VL image processor would refuse (aspect ratio above 200:1) is refused with the data, or skipped
and counted under skip_bad=true, in every command: never a crash in the middle of a batch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hydra import initialize_config_dir
from PIL import Image

from pace_judge.commands.judge import JudgeSettings
from pace_judge.commands.judge import run as run_judge
from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.core.cli import compose
from reward.core.config import parse
from reward.core.errors import UserError
from reward.data import ManifestError, load_ratings
from reward.data.images import ImageError
from reward.vlm import load_processor
from reward.vlm.inputs import ImagePreparer

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
STRIP = (4000, 12)  # decodes fine; aspect ratio 333:1


def _folder(folder: Path, n: int = 3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        Image.fromarray(np.full((56, 56, 3), 60 * i, np.uint8)).save(folder / f"img{i}.png")
        rows.append({"image": f"img{i}.png", "dimension": "lighting", "mos": 1 + i})
    Image.new("RGB", STRIP, (90, 90, 90)).save(folder / "strip.png")
    rows.append({"image": "strip.png", "dimension": "lighting", "mos": 3})
    (folder / "ratings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder / "ratings.jsonl"


def test_the_processor_really_refuses_such_an_image(tiny_vlm_path):
    preparer = ImagePreparer(load_processor(tiny_vlm_path).image_processor)
    with pytest.raises(ImageError, match=r"image 1 of the batch: image is 4000x12, an aspect ratio of 333:1"):
        preparer([Image.new("RGB", (56, 56)), Image.new("RGB", STRIP)])


def test_the_data_check_refuses_it_naming_the_line_and_skip_bad_counts_it(tmp_path):
    manifest = _folder(tmp_path)
    with pytest.raises(ManifestError, match=r"ratings.jsonl:4: 'image' image unusable: .*aspect ratio of 333:1"):
        load_ratings(manifest, check_images=True)
    kept = load_ratings(manifest, check_images=True, skip_bad=True)
    assert len(kept.rows) == 3 and [s.line for s in kept.skipped] == [4]


def _evaluate_cfg(**overrides):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("evaluate", overrides=[f"{k}={v}" for k, v in overrides.items()], schema=EvaluateSettings)


def test_evaluate_skips_and_counts_it_under_skip_bad(tmp_path, tiny_vlm_path):
    manifest = _folder(tmp_path / "data")
    common = {"reward.model": tiny_vlm_path, "data": manifest, "num_workers": 0, "batch_size": 4}
    with pytest.raises(UserError, match=r"ratings.jsonl:4: .*aspect ratio of 333:1.*skip_bad=true"):
        run_evaluate(
            parse(EvaluateSettings, _evaluate_cfg(**common, out=tmp_path / "refused"))
        )  # found before the model loads
    metrics = run_evaluate(parse(EvaluateSettings, _evaluate_cfg(**common, out=tmp_path / "out", skip_bad=True)))
    assert metrics["skipped"] == 1 and metrics["lighting"]["n"] == 3  # the other three of the batch were scored
    skipped = [json.loads(line) for line in (tmp_path / "out" / "skipped.jsonl").read_text().splitlines()]
    assert [s["line"] for s in skipped] == [4] and "aspect ratio" in skipped[0]["reason"]


def test_the_pace_judge_skips_it_and_keeps_the_rest_of_its_batch(tmp_path, tiny_vlm_path, pace_protocol_path):
    _folder(tmp_path / "imgs")
    base = {"out": str(tmp_path / "o"), "model": str(tiny_vlm_path), "protocol": str(pace_protocol_path)}
    with pytest.raises(UserError, match=r"strip.png: .*aspect ratio of 333:1"):
        run_judge(parse(JudgeSettings, {**base, "images": str(tmp_path / "imgs"), "images_per_call": 4}))
    rows = run_judge(
        parse(JudgeSettings, {**base, "images": str(tmp_path / "imgs"), "images_per_call": 4, "skip_bad": True})
    )
    assert [r["image"] for r in rows] == ["img0.png", "img1.png", "img2.png"]
