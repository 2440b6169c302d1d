"""Rewards by name (reward.integrations.reward_set.RewardSet): normalisation from registry metadata, failures and NaN
as None with counts; GRPO's inpainting render (rl/inpaint_render.py) through the public trl adapter: any registered
reward, one generation shared by all rewards, common seeds within a group."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import tiny_reward_config
from reward import RewardOutput, declare_reward, list_rewards, reward_info
from reward.integrations.reward_set import RewardSet
from reward.integrations.trl_rewards import TrlRewards
from reward.rewards.registry import REWARDS, register_reward
from rl.generators import build_generator
from rl.inpaint_render import InpaintingRender
from rl.inpaint_tasks import Task


class ConstantReward:
    """A custom reward (dotted-path factory): scores are given per call; NaN where asked."""

    def __init__(self, cfg: dict) -> None:
        self.values = list(cfg.get("values", [1.0]))

    def score(self, images, prompts=None) -> RewardOutput:
        vals = [self.values[i % len(self.values)] for i in range(len(images))]
        return RewardOutput(scores=torch.tensor(vals, dtype=torch.float32))


@declare_reward(higher_is_better=True, score_range=(0.0, 10.0), description="constant scores (test only)")
def build_constant(cfg: dict) -> ConstantReward:
    return ConstantReward(cfg)


@pytest.fixture
def lower_is_better():
    register_reward(
        "test-lower",
        f"{__name__}:build_constant",
        higher_is_better=False,
        score_range=(0.0, 10.0),
        description="test only",
    )
    yield "test-lower"
    REWARDS.unregister("test-lower")


def _tasks(n: int = 2) -> dict[str, Task]:
    rng = np.random.default_rng(0)
    out = {}
    for i in range(n):
        image = Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8))
        mask = Image.new("L", (64, 64), 0)
        mask.paste(255, (4, 4, 60, 60))
        out[f"t{i}"] = Task(f"t{i}", image, mask, "a room")
    return out


def test_normalisation_reads_direction_and_range_from_the_registry(lower_is_better):
    rs = RewardSet([{"name": lower_is_better, "values": [2.5, 10.0]}, "scene-proxy"])
    low = rs.rewards[0]
    assert rs.to_unit(low, 2.5) == 0.75 and rs.to_unit(low, 10.0) == 0.0  # 1 - (x - 0) / 10
    assert rs.to_unit(rs.rewards[1], 4.0) == 0.75  # (4 - 1) / 4
    raw = RewardSet([{"name": lower_is_better}], normalize=False)
    assert raw.to_unit(raw.rewards[0], 2.5) == -2.5  # not normalised: still "higher = better" for trl


def test_nan_scores_and_missing_images_become_none_and_are_counted():
    rs = RewardSet([{"name": f"{__name__}:build_constant", "values": [1.0, float("nan"), 3.0]}], normalize=False)
    img = Image.new("RGB", (8, 8))
    res = rs.score([img, img, None, img])[rs.labels[0]]
    assert res.raw == [1.0, None, None, 3.0] and res.failed == 1  # the None image is a generation failure


def test_unknown_reward_fails_before_anything_runs():
    with pytest.raises(ValueError, match=r"reward 'sa-iqq': unknown reward 'sa-iqq'\. Did you mean 'sa-iqa'\?"):
        RewardSet(["sa-iqq"])


def _call(scoring: TrlRewards, completions: list[str], task_ids: list[str], step: int = 0):
    metrics: dict[str, list[float]] = {}
    extra: dict[str, list] = {}
    kwargs = {
        "trainer_state": SimpleNamespace(global_step=step),
        "log_metric": lambda k, v: metrics.setdefault(k, []).append(v),
        "log_extra": lambda k, v: extra.setdefault(k, []).extend(v),
    }
    values = [
        fn(prompts=["a room"] * len(completions), completions=completions, task_id=task_ids, **kwargs)
        for fn in scoring.functions()
    ]
    return values, metrics, extra


def test_group_shares_the_generator_seed_so_only_the_prompt_changes_the_reward(tmp_path):
    render = InpaintingRender(
        build_generator({"name": "procedural"}), _tasks(), seed=1, samples_dir=tmp_path, samples_per_step=2
    )
    scoring = TrlRewards(RewardSet(["scene-proxy"]), render)
    completions = ["a room", "a room", "a bright sunlit warm glowing room", "a room"]
    (values,), metrics, extra = _call(scoring, completions, ["t0", "t0", "t0", "t1"])
    assert values[0] == values[1]  # same task, same step, same words: same image
    assert values[2] > values[0]  # lighting words raise the scene-proxy reward
    assert values[3] != values[0]  # another task
    assert set(metrics) >= {"scene-proxy/lighting", "scene-proxy/failed", "inpaint/empty", "time/inpaint_s"}
    assert extra["expanded_prompt"] == completions and extra["sample_image"][2] is None
    assert (tmp_path / "step000001_0.png").exists()  # drawn after 0 updates: trains step 1, as the console counts
    later, _, _ = _call(scoring, completions, ["t0", "t0", "t0", "t1"], step=1)
    assert later[0][0] != values[0]  # a new step draws new scenes


def test_one_generation_is_shared_by_several_rewards_and_empty_or_long_prompts_are_counted():
    gen = build_generator({"name": "procedural", "max_prompt_tokens": 2})
    rs = RewardSet(["scene-proxy", {"name": "scene-proxy", "weights": {"lighting": 1.0}}])
    scoring = TrlRewards(rs, InpaintingRender(gen, _tasks()))
    values, metrics, _ = _call(scoring, ["", "bright sunlit dark dark"], ["t0", "t1"])
    assert rs.labels == ["scene-proxy", "scene-proxy-1"] and len(values) == 2
    assert scoring.batches == 1  # the second reward reused the images
    assert metrics["inpaint/empty"] == [1.0] and metrics["inpaint/truncated"] == [1.0]


@pytest.mark.parametrize("name", list_rewards())
def test_every_registered_reward_works_through_the_adapter(name, request):
    scoring = TrlRewards(
        RewardSet([{"name": name, **tiny_reward_config(name, request)}]),
        InpaintingRender(build_generator({"name": "procedural"}), _tasks()),
    )
    (values,), metrics, _ = _call(scoring, ["a bright room", "a dark room"], ["t0", "t1"])
    assert all(v is not None and 0.0 <= v <= 1.0 for v in values)  # normalised by the registered score_range
    assert metrics[f"{name}/failed"] == [0.0]
    assert reward_info(name).score_range[0] <= metrics[f"{name}/raw"][0] <= reward_info(name).score_range[1]


def test_a_task_folder_moved_elsewhere_draws_the_same_images(tmp_path):
    """A task's generator seeds come from its content, not from where its manifest lies: the same tasks read from a
    copy of their folder under another name give the same images (before, the manifest's path was in the seed)."""
    import shutil

    from rl.inpaint_tasks import load_tasks
    from training.procedural.synthetic import write_inpainting_tasks

    first = write_inpainting_tasks(tmp_path / "a", 3, size=32)
    moved = Path(shutil.copytree(first.parent, tmp_path / "elsewhere" / "b")) / first.name
    drawn = []
    for manifest in (first, moved):
        tasks = load_tasks(manifest)[0]
        render = InpaintingRender(build_generator({"name": "procedural"}), {t.id: t for t in tasks}, seed=3)
        images, _, _ = render.draw(["a bright room"] * len(tasks), [t.id for t in tasks], step=2)
        drawn.append([np.asarray(im) for im in images])
    assert [t.id for t in load_tasks(first)[0]] != [t.id for t in load_tasks(moved)[0]]  # the ids name the path
    assert all(np.array_equal(a, b) for a, b in zip(*drawn, strict=True))
    other = InpaintingRender(build_generator({"name": "procedural"}), {t.id: t for t in load_tasks(first)[0]}, seed=4)
    assert not np.array_equal(
        np.asarray(other.draw(["a bright room"], [load_tasks(first)[0][0].id], 2)[0][0]), drawn[0][0]
    )
