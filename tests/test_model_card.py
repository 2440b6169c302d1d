"""The scorer's model card (scorer/README.md): base model, data, dimensions, words, metrics, the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from huggingface_hub import ModelCard
from hydra import initialize_config_dir

from reward.core.cli import compose
from reward.core.config import parse
from training.commands.sft import SftSettings
from training.procedural.synthetic import write_benchmark
from training.shared.cards import command_line, scorer_card

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_the_front_matter_names_a_hub_base_model_and_hub_datasets_only():
    given = dict(
        base_model="Qwen/Qwen2.5-VL-7B-Instruct",
        dimensions={"lighting": "light and shadow"},
        level_words=["good", "poor"],
        level_values=[4.0, 2.0],
        train_data="hf:example-org/ratings:train",
        test_data="hf:/local/folder:test",
        command="python training/sft.py model.path=Qwen/Qwen2.5-VL-7B-Instruct",
        metrics={"lighting": {"srcc": 0.5, "plcc": 0.25, "krcc": 0.125, "hor": 0.0, "n": 10}},
        adapter=True,
    )
    text = str(scorer_card(**given))
    front = text.split("---")[1]
    assert "base_model: Qwen/Qwen2.5-VL-7B-Instruct" in front and "library_name: peft" in front
    assert "datasets:\n- example-org/ratings" in front and "/local/folder" not in front
    assert "| lighting | 0.500 | 0.250 | 0.125 | 0.000 | 10 |" in text
    assert "On hf:folder:test, not trained on." in text and "/local/folder" not in text  # no path of this machine
    assert "model-index" not in front  # held-out numbers on a folder: in the body only
    on_the_hub = ModelCard(str(scorer_card(**{**given, "test_data": "hf:example-org/ratings:test"}))).data
    held_out = {(r.dataset_type, r.dataset_split, r.metric_name, r.metric_value) for r in on_the_hub.eval_results}
    assert held_out == {
        ("example-org/ratings", "test", "lighting SRCC", 0.5),
        ("example-org/ratings", "test", "lighting PLCC", 0.25),
        ("example-org/ratings", "test", "lighting KRCC", 0.125),
    }


def test_the_command_lists_exactly_the_settings_that_differ_from_the_defaults():
    defaults = {"model": {"path": "???"}, "trainer": {"max_steps": -1, "seed": 42}, "out": "???"}
    given = {"model": {"path": "m dir"}, "trainer": {"max_steps": 4, "seed": 42, "extra": [1, 2]}, "out": "o"}
    assert command_line("training/sft.py", given, defaults) == (
        "python training/sft.py model.path='m dir' trainer.max_steps=4 +trainer.extra='[1,2]' out=o"
    )


@pytest.mark.slow
def test_a_tiny_sft_run_writes_a_card_with_its_base_model_words_metrics_and_command_and_a_loss_curve(
    tiny_vlm_path, tmp_path
):
    from training.commands.sft import run as run_sft

    bench = write_benchmark(tmp_path / "bench", 12, size=56, seed=5)
    out = tmp_path / "run"
    overrides = [
        f"model.path={tiny_vlm_path}",
        f"data.train={bench.ratings}",
        f"data.test={bench.ratings}",
        f"out={out}",
        "trainer.max_steps=4",
        "trainer.logging_steps=1",
        "trainer.save_steps=2",
        "trainer.per_device_train_batch_size=4",
        "trainer.gradient_accumulation_steps=1",
        "prompt.type=1",
        "prompt.dimensions=[lighting,harmony]",
        "levels.words=[good,fair,poor]",
        "levels.values=[5,3,1]",
    ]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        result = run_sft(parse(SftSettings, compose("sft", overrides=overrides, schema=SftSettings)))
    card = (out / "scorer" / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\n") and "[None]" not in card
    name = Path(tiny_vlm_path).name  # a local base model by its folder's name and architecture, never its path
    assert f"A fine-tune of the local Qwen2VLForConditionalGeneration checkpoint `{name}` that rates" in card
    assert str(tiny_vlm_path) not in card and str(tmp_path) not in card
    assert "| lighting |" in card and "| harmony |" in card and "| layout |" not in card
    assert "| good | 5 |" in card and "| fair | 3 |" in card and "| poor | 1 |" in card
    srcc = result["metrics"]["lighting"]["srcc"]
    assert f"| lighting | {srcc:.3f} |" in card and "not held out" in card  # test data = training data
    assert "model-index" not in card  # numbers on the training data are no held-out result
    command = card.split("## How it was made")[1]
    assert all(o.split("=")[0] + "=" in command for o in overrides)
    assert f"model.path={name}" in command and "levels.words='[good,fair,poor]'" in command
    assert "[None]" not in (out / "README.md").read_text()  # trl's template is replaced in the run folder too
    series = json.loads((out / "train_curve.json").read_text())
    assert [step for step, _ in series["loss"]] == [1, 2, 3, 4] and len(series["learning_rate"]) == 4
    assert (out / "train_curve.png").stat().st_size > 5000 and result["train_curve"] == str(out / "train_curve.png")
