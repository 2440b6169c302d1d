"""Rewards in trl's own ``GRPOTrainer`` (not our command): ``reward.trl_reward_func(reward, render)`` trains a text
policy whose completions are drawn by a diffusers pipeline and a VLM policy that sees a dataset column's image; a
dataset's ``image`` column read under the reward's registered name; a reward passed bare says how to wrap it; failed
renders give ``None``."""

from __future__ import annotations

import math

import pytest
import torch
from PIL import Image

from conftest import random_images
from reward import get_reward, images_from_column, render_from_pipeline, trl_reward_func
from reward.integrations.trl_rewards import TrlRewardFunc, message_text

TRAINER = {
    "use_cpu": True,
    "bf16": False,
    "report_to": "none",
    "max_steps": 2,
    "per_device_train_batch_size": 4,
    "num_generations": 4,
    "max_completion_length": 8,
    "learning_rate": 1e-2,
    "beta": 0.0,
    "logging_steps": 1,
    "save_strategy": "no",
    "seed": 0,
}


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad}


def _changed(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> int:
    return sum(not torch.equal(before[k], v.detach()) for k, v in model.named_parameters() if k in before)


class Recorded:
    """A render that records how many completions each call got (and what they were)."""

    def __init__(self, render):
        self.render, self.sizes, self.completions = render, [], []

    def __call__(self, prompts, completions, **columns):
        self.sizes.append(len(completions))
        self.completions.append(list(completions))
        return self.render(prompts, completions, **columns)


@pytest.fixture(scope="module")
def text_to_image_pipe(tiny_pipeline_path):
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(tiny_pipeline_path("text-to-image"))
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.mark.slow
def test_trl_grpo_trains_a_text_policy_on_images_a_pipeline_draws_scored_by_qbench(
    tmp_path, tiny_vlm_path, tiny_lm_path, text_to_image_pipe
):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    lm = tiny_lm_path
    model = AutoModelForCausalLM.from_pretrained(lm)
    tokenizer = AutoTokenizer.from_pretrained(lm)
    scorer = get_reward("qbench", model=str(tiny_vlm_path))
    draw = render_from_pipeline(text_to_image_pipe, num_inference_steps=2, height=64, width=64)

    def draw_but_fail_the_first(prompts, completions, **columns):  # a failed render: None, passed on to trl
        return [None, *draw(prompts[1:], completions[1:], **columns)]

    render = Recorded(draw_but_fail_the_first)
    reward_func = trl_reward_func(scorer, render)
    dataset = Dataset.from_dict({"prompt": ["a modern living room with a sofa", "a kitchen with warm light"] * 4})
    before = _params(model)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward_func],
        args=GRPOConfig(output_dir=str(tmp_path / "out"), **TRAINER),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()

    assert reward_func.calls == 2 and render.sizes == [4, 4]  # one batched call per step, one image per completion
    first, *scored = reward_func.last_values
    assert first is None and reward_func.last_failed == 1
    assert all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in scored)
    assert len(set(scored)) > 1  # different completions, different images, different rewards
    logged = [h for h in trainer.state.log_history if "rewards/qbench/mean" in h]
    assert len(logged) == 2 and all(0.0 <= h["rewards/qbench/mean"] <= 1.0 for h in logged)
    assert [h["qbench/failed"] for h in logged] == [1.0, 1.0]  # the failures, counted where trl logs
    assert _changed(model, before) > 0


@pytest.fixture(scope="module")
def inpaint_pipe(tiny_pipeline_path):
    from diffusers import StableDiffusionInpaintPipeline

    pipe = StableDiffusionInpaintPipeline.from_pretrained(tiny_pipeline_path("sd15-inpaint"))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _room_tasks(n: int) -> dict[str, list]:
    """Rooms to inpaint: an image, a mask (white = the region to draw) and a chat prompt for a VLM policy."""
    rooms = random_images(n, seed=3, sizes=(64,))
    rooms = [im.crop((0, 0, 64, 64)) for im in rooms]
    mask = Image.new("L", (64, 64), 0)
    mask.paste(255, (16, 16, 48, 48))
    question = [{"role": "user", "content": "Describe what to paint in the empty part of this room."}]
    return {"prompt": [question] * n, "image": rooms, "mask": [mask] * n}


@pytest.mark.slow
def test_trl_grpo_trains_a_vlm_policy_that_sees_a_column_image_with_a_column_reward_beside(
    tmp_path, tiny_vlm_path, tiny_scorer_path, inpaint_pipe
):
    from datasets import Dataset
    from transformers import AutoModelForImageTextToText
    from trl import GRPOConfig, GRPOTrainer

    from reward.vlm import load_processor

    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_path, dtype=torch.float32)
    processor = load_processor(tiny_vlm_path)  # no torchvision here: the processor without its video part
    qbench = get_reward("qbench", model=str(tiny_vlm_path))
    render = Recorded(
        render_from_pipeline(
            inpaint_pipe, image_column="image", mask_column="mask", num_inference_steps=2, height=64, width=64
        )
    )
    inpainted = trl_reward_func(qbench, render)  # the policy's completion is the inpainting prompt
    sa_iqa = trl_reward_func(get_reward("sa-iqa", model=str(tiny_scorer_path)), images_from_column("image"))
    before = _params(model)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[inpainted, sa_iqa],
        args=GRPOConfig(output_dir=str(tmp_path / "out"), **TRAINER),
        train_dataset=Dataset.from_dict(_room_tasks(4)),
        processing_class=processor,
    )
    trainer.train()

    assert trainer.reward_func_names == ["qbench", "sa-iqa"]
    assert inpainted.calls == 2 and render.sizes == [4, 4]
    assert all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in inpainted.last_values)
    assert all(isinstance(c, str) for c in render.completions[-1])  # conversational completions reach render as text
    logged = [h for h in trainer.state.log_history if "rewards/sa-iqa/mean" in h]
    assert len(logged) == 2 and all(1.0 <= h["rewards/sa-iqa/mean"] <= 5.0 for h in logged)
    assert _changed(model, before) > 0


# --- the reward function as trl calls it, without a trainer --------------------------------------------------------


@pytest.fixture(scope="module")
def qbench(tiny_vlm_path):
    return get_reward("qbench", model=str(tiny_vlm_path))


class CountingScore:
    """Wraps ``reward.score`` to count its calls and the images of each."""

    def __init__(self, reward):
        self.inner, self.batches = reward.score, []

    def __call__(self, images, prompts=None):
        self.batches.append(len(images))
        return self.inner(images, prompts)


def test_a_failed_render_gives_none_and_the_rest_are_scored_in_one_batch(qbench, monkeypatch):
    counting = CountingScore(qbench)
    monkeypatch.setattr(qbench, "score", counting)
    images = random_images(4, seed=1)
    render = Recorded(
        lambda prompts, completions, **columns: [
            None if c == "broken" else images[i] for i, c in enumerate(completions)
        ]
    )
    f = trl_reward_func(qbench, render)
    out = f(prompts=["p"] * 4, completions=["a", "broken", "c", "d"], completion_ids=[[1]] * 4, task=[0, 0, 0, 0])
    assert out[1] is None and all(isinstance(out[i], float) for i in (0, 2, 3))
    assert counting.batches == [3]  # one Reward.score call for the batch
    assert f.last_failed == 1
    assert out[0] == pytest.approx(float(counting.inner([images[0]]).scores[0]), abs=1e-4)


def test_a_nan_score_is_none_and_trl_metrics_count_the_failures():
    class HalfFailing:
        def score(self, images, prompts=None):
            from reward import RewardOutput

            return RewardOutput(scores=torch.tensor([math.nan if i % 2 else 1.0 + i for i in range(len(images))]))

    logged: dict[str, float] = {}
    f = trl_reward_func(HalfFailing(), images_from_column("image"), name="half", higher_is_better=True)
    out = f(["p"] * 4, ["c"] * 4, image=random_images(4), log_metric=lambda k, v: logged.__setitem__(k, v))
    assert out == [1.0, None, 3.0, None]
    assert set(logged) == {"half/failed", "half/raw", "time/reward_s"}
    assert logged["half/failed"] == 2.0 and logged["half/raw"] == 2.0  # the mean of the scored items, 1 and 3
    assert f.__name__ == "half"


def test_conversational_prompts_and_completions_reach_render_as_text(qbench):
    seen = {}

    def render(prompts, completions, **columns):
        seen.update(prompts=prompts, completions=completions, columns=sorted(columns))
        return columns["image"]

    f = trl_reward_func(qbench, render)
    prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What should go here?"}]}]
    completion = [{"role": "assistant", "content": "a green armchair"}]
    f(prompts=[prompt], completions=[completion], completion_ids=[[3, 4]], image=random_images(1), trainer_state=None)
    assert seen == {
        "prompts": ["What should go here?"],
        "completions": ["a green armchair"],
        "columns": ["image", "trainer_state"],
    }


def test_message_text_reads_plain_and_conversational_completions():
    assert message_text("a b") == "a b"
    assert message_text([{"role": "assistant", "content": "bright room"}]) == "bright room"
    assert message_text([{"role": "assistant", "content": [{"type": "text", "text": "x"}]}]) == "x"


def test_the_image_column_is_read_under_the_reward_s_registered_name(qbench):
    images = random_images(2, seed=5)
    assert qbench.__name__ == "qbench"
    f = trl_reward_func(qbench, images_from_column())
    out = f(prompts=["p", "p"], completions=["a", "b"], completion_ids=None, image=images)
    assert f.__name__ == "qbench" and out == pytest.approx(qbench.score(images).scores.tolist(), abs=1e-4)
    nested = trl_reward_func(qbench, images_from_column("images"))  # trl's "images": a list per row
    assert nested(prompts=["p"], completions=["a"], images=[[images[1]]]) == pytest.approx([out[1]], abs=1e-4)


def test_a_bare_reward_called_by_trl_says_how_to_wrap_it(qbench):
    wrap = r"wrap it with a render .*reward\.trl_reward_func\(scorer, render\)"
    with pytest.raises(TypeError, match=wrap):
        qbench(prompts=["p"], completions=["a sunny room"], completion_ids=[[1]], task_id=[0])
    with pytest.raises(TypeError, match=wrap):  # an image column too: the adapter reads it, not the bare reward
        qbench(["p"], ["a sunny room"], image=random_images(1))
    assert qbench(random_images(2)).shape == (2,)  # called with images, as pyiqa's scorers are


def test_a_lower_is_better_reward_is_negated_for_trl_and_flipped_when_normalised():
    from reward import RewardOutput, register_reward
    from reward.rewards.registry import REWARDS

    class Distance:
        def score(self, images, prompts=None):
            return RewardOutput(scores=torch.tensor([2.0, 8.0])[: len(images)])

    register_reward(
        "test-distance",
        lambda cfg: Distance(),
        higher_is_better=False,
        score_range=(0, 10),
        description="a lower-is-better reward for this test",
    )
    try:
        reward = get_reward("test-distance")
        images = random_images(2)
        assert trl_reward_func(reward, images_from_column())(["p"] * 2, ["c"] * 2, image=images) == [-2.0, -8.0]
        unit = trl_reward_func(reward, images_from_column(), normalize=True)
        assert unit(["p"] * 2, ["c"] * 2, image=images) == pytest.approx([0.8, 0.2])
    finally:
        REWARDS.unregister("test-distance")


def test_wrong_uses_are_refused_with_the_fix():
    class Plain:
        def score(self, images, prompts=None): ...

    with pytest.raises(ValueError, match=r"pass trl_reward_func\(\.\.\., name='my-reward', higher_is_better=True\)"):
        trl_reward_func(Plain(), images_from_column())
    f = trl_reward_func(Plain(), lambda p, c, **k: [None], name="plain", higher_is_better=True)
    with pytest.raises(ValueError, match=r"render returned 1 images for 2 completions"):
        f(["p", "q"], ["a", "b"])
    with pytest.raises(KeyError, match=r"no dataset column 'image' .* its columns are \['mask', 'task_id'\]"):
        images_from_column("image")(["p"], ["c"], mask=[1], task_id=[0], trainer_state=None)


class FakePipe:
    """A diffusers-like pipeline that records each call's prompts and seeds and fails on prompts with "fail"."""

    def __init__(self):
        self.calls = []

    def __call__(self, prompt, generator, **kwargs):
        self.calls.append((list(prompt), [g.initial_seed() for g in generator], sorted(kwargs)))
        if any("fail" in p for p in prompt):
            raise RuntimeError("the pipeline broke")
        return type("Out", (), {"images": [Image.new("RGB", (8, 8), (len(p), 0, 0)) for p in prompt]})()


def test_a_pipeline_render_retries_a_failed_batch_one_by_one_and_shares_a_seed_per_prompt():
    pipe = FakePipe()
    render = render_from_pipeline(pipe, image_column="room", mask_column="mask", num_inference_steps=2)
    out = render(["kitchen", "kitchen", "bath"], ["red", "fail", "blue"], room=[1, 1, 2], mask=[0, 0, 0])
    assert out[1] is None and out[0].getpixel((0, 0))[0] == 3 and out[2].getpixel((0, 0))[0] == 4
    first, *retries = pipe.calls
    assert first[2] == ["image", "mask_image", "num_inference_steps"]
    assert len(retries) == 3  # the batch failed, then each completion alone
    seeds = first[1]
    assert seeds[0] == seeds[1] != seeds[2]  # completions of one prompt share their noise
    step = type("State", (), {"global_step": 1})()
    render(["kitchen"], ["red"], room=[1], mask=[0], trainer_state=step)
    assert pipe.calls[-1][1][0] != seeds[0]  # a new step draws new noise


def test_trl_reward_func_is_exported_with_its_renderers():
    import reward

    assert reward.trl_reward_func is trl_reward_func and isinstance(
        trl_reward_func(get_reward("scene-proxy", calibration_scenes=1), images_from_column()), TrlRewardFunc
    )
