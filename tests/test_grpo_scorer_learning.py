"""Learning proof of GRPO on the scorer (``training/grpo_scorer.py``): the tiny VLM, first taught only the answer
format with digits drawn at random (so it knows how to answer, not what), is trained by the command on procedural
lighting scenes, and its held-out SRCC read in one forward pass (``mode=expected``) rises across 0.7.

Sampled answers (``mode=sample``) do not show it: the ranking reward pays 0.71 for a pair answered alike whatever
their order, and the policy settles on near-constant answers whose digit probabilities still rank the images."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
import torch

from reward.commands.evaluate import run as run_evaluate
from reward.core.cli import compose
from reward.rewards.reasoning_iqa import PROMPTS, scorer_meta
from reward.rewards.scorer_folder import write_metadata
from training.commands.grpo_scorer import GrpoScorerSettings, held_out_srcc, parse_settings, run
from training.procedural.synthetic import example_at, write_benchmark


def format_warm_start(model_dir: Path, out: Path, steps: int = 120, seed: int = 0) -> Path:
    """``model_dir`` taught ``<answer>d</answer>`` after the no-thinking prompt, ``d`` uniform in 1-5 whatever the
    image: the answer format, no quality."""
    from transformers import AutoModelForImageTextToText

    from reward.vlm import load_processor

    processor = load_processor(str(model_dir))
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    question = {"type": "text", "text": PROMPTS["visualquality-r1-fast"]}
    turn = [{"role": "user", "content": [{"type": "image"}, question]}]
    head = processor.apply_chat_template(turn, add_generation_prompt=True, tokenize=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    answer = len(processor.tokenizer("<answer>1</answer><|im_end|>", add_special_tokens=False)["input_ids"])
    rng = random.Random(seed)
    torch.manual_seed(seed)
    for step in range(steps):
        images = [example_at(seed + 77, step * 8 + k, 32).image for k in range(8)]
        texts = [f"{head}<answer>{rng.randint(1, 5)}</answer><|im_end|>" for _ in images]
        batch = processor(text=texts, images=images, return_tensors="pt", padding=True)
        labels = batch["input_ids"].clone()
        labels[:, :-answer] = -100  # left padding: the answer is each row's tail
        model(**batch, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(out)
    for f in model_dir.iterdir():
        if not (out / f.name).exists():
            shutil.copy2(f, out / f.name)
    write_metadata(out, scorer_meta("visualquality-r1-fast"))
    return out


@pytest.mark.slow
def test_grpo_on_the_scorer_lifts_heldout_lighting_srcc_above_0_7(tiny_vlm_path, tmp_path):
    warm = format_warm_start(tiny_vlm_path, tmp_path / "warm")
    overrides = [
        f"model.path={warm}",
        f"out={tmp_path / 'run'}",
        "prompt=visualquality-r1-fast",
        "data.train=synthetic",
        "data.test=synthetic",
        "data.dimension=lighting",
        "data.test_rows=64",
        "data.synthetic_size=32",
        "model.dtype=float32",
        "trainer.max_steps=200",  # 4 images x 4 answers a step; beta (0.04) and the rewards as the recipes'
        "trainer.per_device_train_batch_size=16",
        "trainer.num_generations=4",
        "trainer.max_completion_length=16",  # '<answer>3</answer>' and the end token: 15 tokens of the tiny tokenizer
        "trainer.learning_rate=1e-3",
        "trainer.save_strategy=no",
    ]
    cfg = compose("grpo_scorer", overrides, schema=GrpoScorerSettings)
    before = held_out_srcc(parse_settings(cfg), warm, "expected")
    result = run(cfg)
    after = result["test_srcc"]
    # measured: 0.621 -> 0.818 (the start is not 0: the random network's answer already leans on brightness)
    assert before < 0.7 <= after, f"held-out lighting SRCC (one forward) {before:.3f} -> {after:.3f}"
    bench = write_benchmark(tmp_path / "heldout", 8, size=32, seed=4242)
    for mode in ("expected", "sample"):  # reward/evaluate.py reads the trained scorer both ways
        reward = [f"reward.model={tmp_path / 'run' / 'scorer'}", f"reward.mode={mode}", "reward.max_new_tokens=16"]
        cfg = compose("evaluate", ["reward=reasoning-iqa", *reward, f"data={bench.ratings}", f"out={tmp_path / mode}"])
        metrics = run_evaluate(cfg)
        assert metrics["lighting"]["n"] == 8 and -1 <= metrics["lighting"]["srcc"] <= 1, mode
