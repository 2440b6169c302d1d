"""Every VLM family of ``reward.vlm.families.FAMILIES``, on a tiny random checkpoint built offline: scored with prefix
reuse exactly as without it and batched as one at a time, every reward run, fine-tuned (LoRA and fully), trained as a
GRPO policy, planned. A family spared a check says why in its entry (``skips``); docs/backbones.md shows the same."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from hydra import initialize_config_dir
from PIL import Image
from transformers import TrainerCallback

from conftest import next_token_logprobs, random_images
from reward import get_reward
from reward.core.cli import compose
from reward.core.config import parse
from reward.rewards.registry import reward_info
from reward.testing.models import TINY, make_tiny_vlm
from reward.vlm import OptionQuery, load_vlm
from reward.vlm.families import FAMILIES
from reward.vlm.inputs import encode

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
NAMES = list(FAMILIES)
WORDS = ("excellent", "good", "fair", "poor", "bad")
QUERIES = [
    OptionQuery("How would you rate the lighting of this image?", WORDS, "The quality level of this image is"),
    OptionQuery("Rate the quality of the image.", ("good", "poor"), "The quality of the image is"),
    OptionQuery("Is the surface smooth with minimal irregularities?", ("Yes", "No")),
]


def _spared(name: str, check: str) -> None:
    if check in FAMILIES[name].skips:
        pytest.skip(FAMILIES[name].skips[check])


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """``tiny(name)``: the tiny checkpoint of family ``name``, built once per session."""
    root = tmp_path_factory.mktemp("families")
    return lambda name: make_tiny_vlm(root / name, family=name)


def _budget(name: str) -> dict[str, int]:
    """A pixel budget that gives images of different sizes different token counts, where the family has one."""
    return {"min_pixels": 32 * 32, "max_pixels": 128 * 128} if FAMILIES[name].pixels else {}


def _images() -> list[Image.Image]:
    sizes = [(56, 56), (120, 80), (40, 90)]
    return [im.resize(size) for im, size in zip(random_images(3, seed=3), sizes, strict=True)]


def test_every_family_has_a_tiny_builder():
    assert set(TINY) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_encoding_prepared_images_equals_the_family_processor(name, tiny):
    vlm = load_vlm(tiny(name), **_budget(name))
    a, b, c = _images()
    groups = [[a], [b, c], [c]]
    texts = [vlm.render(len(g), "Rate the quality of the image.", "The quality of the image is") for g in groups]
    expected = vlm.processor(text=texts, images=groups, padding=True, return_tensors="pt")
    got = encode(vlm.processor, texts, [vlm.image_preparer()(g) for g in groups])
    assert set(got) == set(expected)
    for key, value in got.items():
        assert torch.equal(value, expected[key].to(value.dtype)), key


@pytest.mark.parametrize("name", NAMES)
def test_prefix_reuse_and_batching_give_the_scores_of_one_forward_pass_each(name, tiny):
    from pace_judge.anchored import anchored_logprobs, supports_anchor_prefix

    _spared(name, "prefix reuse exact")
    vlm = load_vlm(tiny(name), dtype="float32", batch_size=8, **_budget(name))
    a, b, c = _images()
    groups = [[a], [b], [c], [a, c]]  # sizes apart and two images in one group: every row is padded differently
    oracle = torch.full((len(groups), len(QUERIES), len(WORDS)), -torch.inf)
    for g, images in enumerate(groups):
        for q, query in enumerate(QUERIES):
            ids = vlm.candidate_ids(query)
            oracle[g, q, : len(ids)] = next_token_logprobs(vlm, images, query.question, query.response_prefix)[ids]
    finite = torch.isfinite(oracle)
    assert torch.cdist(oracle[:, 0], oracle[:, 0]).fill_diagonal_(1).min() > 1e-3  # a reordering would show
    for reuse in (True, False):
        got = vlm.option_logprobs(groups, QUERIES, reuse_prefix=reuse).logprobs
        assert (got[finite] - oracle[finite]).abs().max() <= 1e-4, reuse
    if supports_anchor_prefix(vlm):  # PACE Track 2: the anchors encoded once for every target
        targets = [b, c, a.resize((70, 90))]
        query = QUERIES[1]
        got = anchored_logprobs(vlm, [a, b], targets, query).logprobs[:, 0]
        plain = vlm.option_logprobs([[a, b, t] for t in targets], [query], reuse_prefix=False).logprobs[:, 0]
        assert (got - plain).abs().max() <= 1e-4


@pytest.mark.parametrize("name", NAMES)
def test_rating_words_are_read_as_single_tokens_in_context(name, tiny):
    vlm = load_vlm(tiny(name))
    for query in QUERIES:
        ids = vlm.candidate_ids(query)
        assert [vlm.tokenizer.decode([i]) for i in ids] == [query.separator + w for w in query.options]


@pytest.mark.parametrize("name", NAMES)
def test_plan_counts_every_parameter_and_the_visual_tokens_of_an_image(name, tiny):
    from transformers import AutoModelForImageTextToText

    from training.shared.plan import visual_tokens
    from training.shared.plan_models import model_shape

    _spared(name, "plan")
    path = tiny(name)
    shape = model_shape(str(path))
    model = AutoModelForImageTextToText.from_pretrained(path)
    assert shape.total == sum(p.numel() for p in model.parameters())
    assert shape.vision_params > 0 and shape.aligner_params > 0 and shape.llm_params > shape.vision_params
    vlm = load_vlm(path)
    tokens = vlm.processor(text=[vlm.render(1, "x")], images=[_images()[:1]], return_tensors="pt")["input_ids"][0]
    image_tokens = int((tokens == model.config.image_token_id).sum())
    if FAMILIES[name].tokens:  # a fixed resolution: the count the config gives (LLaVA-OneVision adds tiles)
        assert 0 < visual_tokens(None, shape)[0] <= image_tokens
    else:  # the pixel budget decides
        pixels = vlm.processor.image_processor.size.longest_edge // FAMILIES[name].frames
        assert visual_tokens(pixels, shape)[0] == image_tokens


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_every_reward_scores_with_each_family(name, tiny, pace_protocol_path, tmp_path):
    from training.prompts import scorer_metadata

    _spared(name, "score")
    scorer = tmp_path / "scorer"
    shutil.copytree(tiny(name), scorer)
    (scorer / "sa_iqa.json").write_text(json.dumps(scorer_metadata(["lighting"], prompt_type=1, definitions={})))
    configs = {
        "sa-iqa": {"model": str(scorer)},
        "qbench": {"model": str(tiny(name))},
        "pace": {"model": str(tiny(name)), "protocol": str(pace_protocol_path), **_budget(name)},
    }
    for reward_name, cfg in configs.items():
        scores = get_reward(reward_name, cfg).score(_images()).scores
        low, high = reward_info(reward_name).score_range
        assert scores.shape == (3,) and torch.isfinite(scores).all(), reward_name
        assert ((scores >= low) & (scores <= high)).all(), reward_name


class _Keep(TrainerCallback):
    """Keeps the model the trainer trains, the names of its trainable parameters and its vision tower's weights."""

    def __init__(self, vision: str) -> None:
        self.vision = vision

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.model = model
        self.trained = {n for n, p in model.named_parameters() if p.requires_grad}
        self.tower = {n: p.detach().clone() for n, p in model.named_parameters() if f".{self.vision}." in f".{n}"}


@pytest.fixture(scope="module")
def ratings(tmp_path_factory):
    from training.procedural.synthetic import write_benchmark

    return write_benchmark(tmp_path_factory.mktemp("bench"), 4, size=56, seed=5).ratings


@pytest.mark.slow
@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
@pytest.mark.parametrize("name", NAMES)
def test_sft_trains_each_family_and_its_scorer_reloads_to_the_same_scores(name, lora, tiny, ratings, tmp_path):
    from reward.rewards.sa_iqa import read_metadata
    from reward.vlm.model import VLM
    from training.commands.sft import SftSettings
    from training.commands.sft import run as run_sft

    _spared(name, "SFT LoRA" if lora else "SFT full")
    overrides = [
        f"model.path={tiny(name)}",
        f"data.train={ratings}",
        f"out={tmp_path / 'run'}",
        "trainer.max_steps=2",
        "trainer.per_device_train_batch_size=2",
        "trainer.gradient_accumulation_steps=1",
        "trainer.learning_rate=1e-2",
        "prompt.type=1",
        "prompt.dimensions=[lighting]",
        *(["lora.enabled=true", "lora.r=4"] if lora else []),
    ]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("sft", overrides=overrides, schema=SftSettings)
    keep = _Keep(FAMILIES[name].vision)
    result = run_sft(parse(SftSettings, cfg), callbacks=[keep])
    assert result["global_step"] == 2
    assert keep.trained and keep.tower and not any(f".{keep.vision}." in f".{n}" for n in keep.trained)
    now = dict(keep.model.named_parameters())
    assert all(torch.equal(now[n], w) for n, w in keep.tower.items())  # the vision tower stayed as it was
    scorer = Path(result["scorer"])
    images = _images()
    reloaded = get_reward("sa-iqa", {"model": str(scorer), "dtype": "float32"}).score(images).scores
    in_memory = get_reward("sa-iqa", {"model": str(scorer)})  # its queries and words, the trained weights
    model = keep.model.get_base_model() if lora else keep.model  # LoRA: merged into it when the scorer was saved
    in_memory.vlm = VLM(model.float().eval(), in_memory.vlm.processor)
    assert read_metadata(scorer)["level_words"] == list(WORDS)
    assert (in_memory.score(images).scores - reloaded).abs().max() <= 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_each_family_trains_as_a_grpo_policy_that_sees_the_task_image(name, tiny, tmp_path):
    from rl.commands.grpo import run as run_grpo
    from rl.commands.grpo_settings import GrpoSettings
    from training.procedural.synthetic import write_inpainting_tasks

    _spared(name, "GRPO policy")
    tasks = write_inpainting_tasks(tmp_path / "tasks", 4, size=64, seed=0, mask_fraction=0.8)
    overrides = [
        f"policy.path={tiny(name)}",
        f"data={tasks}",
        f"out={tmp_path / 'run'}",
        "reward=scene-proxy",
        "lora.enabled=true",
        "trainer.max_steps=1",
        "trainer.num_generations=2",
        "trainer.per_device_train_batch_size=2",
        "trainer.gradient_accumulation_steps=1",
        "trainer.max_completion_length=8",
        "trainer.temperature=1.5",
        "eval.every=0",
    ]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = parse(GrpoSettings, compose("grpo", overrides=overrides, schema=GrpoSettings))
    seen: list[set[str]] = []

    class Watch(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            model.register_forward_pre_hook(lambda m, a, kw: seen.append(set(kw)), with_kwargs=True)

    assert run_grpo(cfg, callbacks=[Watch()])["global_step"] == 1
    assert any("pixel_values" in keys for keys in seen)  # the policy was given the task image


def test_the_support_table_of_the_docs_is_made_from_the_families():
    page = (CONFIGS.parent / "docs" / "backbones.md").read_text()
    assert page.count("<!-- families -->") == 1  # filled by python docs/settings.py, checked by tests/test_docs.py
    assert all(f"| `{name}` |" in page for name in NAMES)
