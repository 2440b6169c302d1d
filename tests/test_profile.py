"""The scoring-loop profiler: every part of a batch is timed once, and the parts add up to the measured total."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from reward.eval.parallel import score_images
from reward.rewards.qbench import QBenchConfig, QBenchReward
from reward.rewards.sa_iqa import SaIqaReward, read_metadata
from reward.vlm import load_vlm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the profiler is the bench's
from scoring_profile import PARTS, ScoringProfile, profile_scoring, section  # noqa: E402


def _items(sizes: list[int], seed: int = 0) -> list[tuple[str, Image.Image, int]]:
    rng = np.random.default_rng(seed)
    return [
        (f"img{i}", Image.fromarray(rng.integers(0, 256, (s, 56, 3), dtype=np.uint8)), i + 1)
        for i, s in enumerate(sizes)
    ]


def _check_consistent(prof: ScoringProfile, expected_parts: tuple[str, ...]) -> dict[str, float]:
    parts = dict(prof.parts())
    for name in expected_parts:
        assert parts.get(name, 0) > 0, f"part {name!r} missing: {parts}"
    named = sum(s for n, s in parts.items() if n != "other")
    assert named <= prof.total * (1 + 1e-9)  # no time counted twice
    assert named >= 0.5 * prof.total  # the parts, not the gaps between them, are the loop
    assert sum(parts.values()) == pytest.approx(prof.total)
    return parts


@pytest.fixture(scope="module")
def vlm(tiny_vlm_path):
    return load_vlm(tiny_vlm_path, min_pixels=28 * 28, max_pixels=112 * 112, batch_size=4)


def test_profile_of_the_scoring_loop_has_every_part_and_adds_up(vlm):
    reward = QBenchReward(QBenchConfig(model="unused"), vlm=vlm)
    items = _items([28, 56, 84, 112, 56, 28, 112, 84])  # 2, 4, 6 and 8 visual tokens: padded batches
    with profile_scoring(vlm.model) as prof:
        done = score_images(reward, items, batch_size=4, num_workers=0)
    assert len(done.scores) == len(items)
    _check_consistent(prof, PARTS)
    # 8 images in 2 batches of 4 sequences; grouped by tokens, each batch pads only its shorter rows
    assert prof.counts["tokens"] > prof.counts["padding tokens"] > 0
    assert prof.padding_share() == prof.counts["padding tokens"] / prof.counts["tokens"]
    table = prof.table()
    assert all(p in table for p in (*PARTS, "other", "total (wall)", "padding share"))


def test_equal_images_need_no_padding_and_workers_take_the_image_processor_off_the_loop(vlm):
    reward = QBenchReward(QBenchConfig(model="unused"), vlm=vlm)
    with profile_scoring(vlm.model) as prof:
        score_images(reward, _items([56] * 6), batch_size=3, num_workers=1)
    parts = _check_consistent(prof, tuple(p for p in PARTS if p != "image processor"))
    assert "image processor" not in parts  # it ran in the worker, inside "data loading"
    assert prof.counts["padding tokens"] == 0


def test_the_shared_prefix_path_is_profiled_too(tiny_scorer_path):
    meta = read_metadata(tiny_scorer_path)
    reward = SaIqaReward(load_vlm(tiny_scorer_path, batch_size=8), meta)
    images = [im for _, im, _ in _items([56, 84, 56])]
    with profile_scoring(reward.vlm.model) as prof:
        out = reward.score(images)
    assert set(out.dimensions) == {"lighting", "harmony"}
    _check_consistent(prof, tuple(p for p in PARTS if p != "data loading"))


def test_a_section_within_another_is_carved_out_of_it(monkeypatch):
    clock = iter([0.0, 1.0, 3.0, 10.0, 14.0, 15.0, 16.0])  # a scripted clock: each boundary reads the next time
    prof = ScoringProfile()
    monkeypatch.setattr(prof, "_now", lambda: next(clock))
    with prof.active():  # starts at 0
        with section("data loading"):  # 1
            with section("image processor"):  # 3 .. 10
                pass
        # data loading resumes 10 .. 14; the block ends at 16 (outside any section: "other")
    assert dict(prof.parts()) == {"data loading": 2.0 + 4.0, "image processor": 7.0, "other": 3.0}
    assert prof.total == 16.0


def test_no_profile_no_timing():
    with section("tokenizer"):
        pass  # nothing active: a no-op, nothing recorded anywhere
    prof = ScoringProfile()
    assert prof.parts() == [("other", 0.0)]
