"""One dimension, one try: a manifest of real photos rated on a single dimension the paper's prompts do not define
trains with the default settings, in one run, with that dimension asked in plain words; nothing is said about fusing
the one dimension."""

from __future__ import annotations

import json
import logging

import pytest

from conftest import photo_mos, real_photos
from reward.core.cli import compose
from reward.core.config import parse
from training.commands.sft import SftSettings
from training.commands.sft import run as run_sft


@pytest.mark.slow
def test_a_quality_manifest_of_real_photos_trains_with_the_defaults_in_one_run(tiny_vlm_path, tmp_path, caplog):
    photos = real_photos(tmp_path / "data" / "photos", n=6, size=56)
    rows = [{"image": f"photos/{p.name}", "dimension": "quality", "mos": photo_mos(i)} for i, p in enumerate(photos)]
    manifest = tmp_path / "data" / "ratings.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = [
        f"model.path={tiny_vlm_path}",
        f"data.train={manifest}",
        f"data.test={manifest}",
        f"out={tmp_path / 'out'}",
        "trainer.max_steps=1",
        "trainer.per_device_train_batch_size=2",
        "trainer.gradient_accumulation_steps=1",
    ]
    with caplog.at_level(logging.INFO):
        result = run_sft(
            parse(SftSettings, compose("sft", overrides, schema=SftSettings))
        )  # no prompt.* setting: the defaults
    meta = json.loads((tmp_path / "out" / "scorer" / "sa_iqa.json").read_text())
    assert meta["prompt_type"] == 4 and list(meta["queries"]) == ["quality"]
    assert meta["queries"]["quality"]["question"] == "Please evaluate the quality of this image."
    assert result["metrics"]["quality"]["n"] == 6
    said = [r.getMessage() for r in caplog.records]
    assert not any("plain mean" in m for m in said)  # one dimension: nothing to fuse, nothing to warn about
    assert any("has no definition of 'quality': it is asked" in m for m in said)
