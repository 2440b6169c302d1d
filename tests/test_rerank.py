"""``reward.rerank``: the k best of any pipeline's images by a reward's registered direction, all scores kept, ties
to the image given first, unscored images last; and the diffusers and trl snippets of docs/rewards-in-your-code.md run
as written (on the tiny offline models; trl's bf16 picked by the snippet itself)."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from reward import RewardOutput, get_reward, register_reward, rerank
from reward.rewards.registry import REWARDS

PAGE = (Path(__file__).resolve().parents[1] / "docs" / "rewards-in-your-code.md").read_text()


def greys(*levels: int) -> list[Image.Image]:
    return [Image.new("RGB", (64, 64), (v, v, v)) for v in levels]


@pytest.fixture(scope="module")
def proxy():
    """scene-proxy: measured grey levels 20 -> 4.2, 60 -> 4.48, 128 and 200 -> 5.0 (clipped: a tie)."""
    return get_reward("scene-proxy", calibration_scenes=1)


def test_rerank_keeps_the_k_best_best_first_with_every_score_and_ties_to_the_earlier_image(proxy):
    images = greys(20, 128, 60, 200)
    expected = proxy.score(images).scores.tolist()
    assert expected[1] == expected[3] > expected[2] > expected[0]  # the tie this test is about
    best = rerank(images, proxy, k=3)
    assert best.indices == [1, 3, 2]
    assert best.scores == [expected[1], expected[3], expected[2]]
    assert best.all_scores == expected
    assert [im.getpixel((0, 0)) for im in best.images] == [(128,) * 3, (200,) * 3, (60,) * 3]
    assert best.best is best.images[0] and best.higher_is_better


class Fixed:
    """A reward with given scores (NaN: could not score)."""

    def __init__(self, scores):
        self.scores = scores

    def score(self, images, prompts=None):
        return RewardOutput(scores=torch.tensor(self.scores[: len(images)], dtype=torch.float32))


@pytest.fixture
def lower_is_better():
    register_reward(
        "test-lower",
        lambda cfg: Fixed(cfg["scores"]),
        higher_is_better=False,
        score_range=(0, 10),
        description="a lower-is-better reward for this test",
    )
    yield
    REWARDS.unregister("test-lower")


def test_a_lower_is_better_reward_ranks_its_lowest_first_by_the_registry_not_the_name(lower_is_better):
    reward = get_reward("test-lower", scores=[3.0, 1.0, 7.0, 1.0])
    best = rerank(greys(1, 2, 3, 4), reward, k=2)
    assert best.indices == [1, 3] and best.scores == [1.0, 1.0] and not best.higher_is_better


def test_unscored_images_rank_last(lower_is_better):
    reward = get_reward("test-lower", scores=[math.nan, 5.0, math.nan])
    assert rerank(greys(1, 2, 3), reward, k=3).indices == [1, 0, 2]


def test_rerank_takes_a_pipeline_batch_as_tensors_or_arrays(proxy):
    batch = torch.stack([torch.full((3, 64, 64), v / 255) for v in (20, 128, 60)])  # diffusers output_type="pt"
    assert rerank(batch, proxy).indices == [1]
    assert rerank(batch.permute(0, 2, 3, 1).numpy().astype(np.float32), proxy).indices == [1]  # output_type="np"


def test_rerank_refusals_name_the_fix(proxy):
    with pytest.raises(ValueError, match=r"k=5 must be between 1 and the number of images \(2\)"):
        rerank(greys(1, 2), proxy, k=5)
    with pytest.raises(ValueError, match=r"3 prompts for 2 images"):
        rerank(greys(1, 2), proxy, prompts=["a", "b", "c"])
    with pytest.raises(ValueError, match=r"pass rerank\(\.\.\., higher_is_better=True\)"):
        rerank(greys(1, 2), Fixed([1.0, 2.0]))
    assert rerank(greys(1, 2), Fixed([1.0, 2.0]), higher_is_better=True).indices == [1]


def readme_block(marker: str) -> str:
    blocks = [b for b in re.findall(r"```python\n(.*?)```", PAGE, flags=re.S) if marker in b]
    assert len(blocks) == 1, f"docs/rewards-in-your-code.md should show one python block with {marker!r}"
    return blocks[0]


def on_tiny_models(code: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert old in code, f"the snippet no longer contains {old!r}"
        code = code.replace(old, new)
    return code


@pytest.mark.slow
def test_the_readme_diffusers_and_trl_snippets_run_as_written(
    tmp_path, tiny_vlm_path, tiny_scorer_path, tiny_lm_path, tiny_pipeline_path, monkeypatch
):
    t2i, lm = tiny_pipeline_path("text-to-image"), tiny_lm_path
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    rerank_code = on_tiny_models(
        readme_block("reward.rerank("),
        {
            "stabilityai/stable-diffusion-2-1-base": str(t2i),
            "Qwen/Qwen2-VL-2B-Instruct": str(tiny_vlm_path),
            "num_inference_steps=25": "num_inference_steps=2",
            'output_type="pt")': 'output_type="pt", num_inference_steps=2)',  # (the pipeline's default: 50)
        },
    )
    exec(compile(rerank_code, "rewards-in-your-code.md (diffusers)", "exec"), namespace)
    best = namespace["best"]
    assert len(best.indices) == 2 and len(best.all_scores) == 8
    assert best.scores == sorted(best.all_scores, reverse=True)[:2]

    trl_code = on_tiny_models(
        readme_block("trl_reward_func("),
        {
            "Qwen/Qwen2.5-0.5B-Instruct": str(lm),
            "max_steps=100": (
                "max_steps=2, use_cpu=True, report_to='none', per_device_train_batch_size=4, "
                "num_generations=4, max_completion_length=8, save_strategy='no', logging_steps=1"
            ),
            "num_inference_steps=4": "num_inference_steps=2",
        },
    )
    exec(compile(trl_code, "rewards-in-your-code.md (trl)", "exec"), namespace)
    history = namespace["trainer"].state.log_history
    means = [h["rewards/qbench/mean"] for h in history if "rewards/qbench/mean" in h]
    assert len(means) == 2 and all(0.0 <= m <= 1.0 for m in means)
    assert os.path.isdir(tmp_path / "grpo-out")

    mixed_code = on_tiny_models(
        readme_block("trl_reward_funcs("),
        {
            "ORG/SCORER": str(tiny_scorer_path),
            "Qwen/Qwen2.5-0.5B-Instruct": str(lm),
            "max_steps=100": (
                "max_steps=1, use_cpu=True, report_to='none', per_device_train_batch_size=4, "
                "num_generations=4, max_completion_length=8, save_strategy='no', logging_steps=1"
            ),
        },
    )
    exec(compile(mixed_code, "rewards-in-your-code.md (trl, several rewards)", "exec"), namespace)
    (logged,) = [h for h in namespace["trainer"].state.log_history if "rewards/sa-iqa/mean" in h]
    assert 0.0 <= logged["rewards/qbench/mean"] <= 1.0 and 0.0 <= logged["rewards/sa-iqa/mean"] <= 1.0
    assert namespace["funcs"][0].calls == 1  # one drawing of the batch, scored by both rewards
