"""``plan=true`` reads the visual tokens from data.train's own images where it can (headers only), and says which
numbers it assumed (the image size, the GPU's memory) and the setting that gives each."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from reward.core.cli import compose
from reward.core.config import parse
from training.commands.sft import SftSettings
from training.commands.sft_plan import sft_plan
from training.shared.plan import format_plan

MODEL = "model.path=Qwen/Qwen2.5-VL-7B-Instruct"


def _plan(*overrides: str) -> str:
    return format_plan(sft_plan(parse(SftSettings, compose("sft", [MODEL, "out=o", *overrides], schema=SftSettings))))


def test_the_plan_reads_the_visual_tokens_from_the_datas_images(tmp_path: Path):
    rows = []
    for i, side in enumerate((224, 112, 168)):  # 224 x 224 = 64 tokens of 28 x 28 pixels: the largest counts
        Image.new("RGB", (side, side)).save(tmp_path / f"{i}.png")
        rows.append({"image": f"{i}.png", "dimension": "quality", "mos": 2.0 + i})
    manifest = tmp_path / "train.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = _plan(f"data.train={manifest}", "plan_for.gpu_memory_gib=80")
    assert "64 visual tokens per image (the largest of 3 images of data.train read: 224x224)" in text
    assert "1024x768" not in text and "assumed" not in text and "of 80 GiB per GPU" in text


def test_the_plan_names_what_it_assumed_and_how_to_set_it():
    text = _plan("data.train=nowhere.jsonl")
    why = "assumed: a 1024x768 image; data.train's images not read here; model.max_pixels=N bounds them"
    assert f"1003 visual tokens per image ({why})" in text
    assert "GiB of 139 GiB per GPU (assumed: one H200; plan_for.gpu_memory_gib=GIB sets yours)" in text
    synthetic = _plan("data.train=synthetic", "trainer.max_steps=1", "data.synthetic_size=56")
    assert "4 visual tokens per image (data.synthetic_size=56: 56x56)" in synthetic


def test_rows_are_counted_where_the_images_are_not_here(tmp_path: Path):
    rows = [{"image": f"{i}.png", "dimension": "quality", "mos": 3.0} for i in range(5)]  # no image written
    manifest = tmp_path / "train.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = _plan(f"data.train={manifest}", "trainer.per_device_train_batch_size=1", "trainer.global_batch_size=1")
    assert "3 epochs of 5 rows" in text and "1003 visual tokens per image (assumed: a 1024x768 image;" in text
