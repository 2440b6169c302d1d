"""training/sft.py end to end on the tiny VLM: trains, checkpoints, resumes, writes a scorer that loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra import initialize_config_dir
from safetensors.torch import load_file
from transformers import TrainerCallback

from reward import get_reward
from reward.core.cli import compose
from reward.core.config import parse
from reward.data import ManifestError
from reward.rewards.scoring import LEVEL_VALUES, LEVEL_WORDS
from reward.vlm.tokens import CandidateTokenError
from training.commands.sft import SftSettings
from training.commands.sft import run as run_sft
from training.procedural.synthetic import write_benchmark

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
pytestmark = pytest.mark.slow


def _cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("sft", overrides=overrides, schema=SftSettings)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return write_benchmark(tmp_path_factory.mktemp("bench"), 12, size=56, seed=5)


def _base(model: Path, bench, out: Path, steps: int = 4, extra: tuple[str, ...] = ()) -> list[str]:
    return [
        f"model.path={model}",
        f"data.train={bench.ratings}",
        f"data.test={bench.ratings}",
        f"out={out}",
        f"trainer.max_steps={steps}",
        "trainer.save_steps=2",
        "trainer.per_device_train_batch_size=4",
        "trainer.gradient_accumulation_steps=1",
        "trainer.learning_rate=1e-3",
        "trainer.logging_steps=1",
        "prompt.type=1",
        "eval_batch_size=8",
        *extra,
    ]


def test_sft_trains_the_language_model_only_and_writes_a_loadable_scorer(tiny_vlm_path, bench, tmp_path):
    from transformers import AutoModelForImageTextToText

    out = tmp_path / "run"
    result = run_sft(parse(SftSettings, _cfg(_base(tiny_vlm_path, bench, out))))
    assert result["global_step"] == 4
    scorer = out / "scorer"
    meta = json.loads((scorer / "sa_iqa.json").read_text())
    assert meta["level_words"] == ["excellent", "good", "fair", "poor", "bad"] and meta["format"] == "sa-iqa-scorer/1"
    assert set(meta["queries"]) == {"layout", "harmony", "lighting", "distortion"}
    before = AutoModelForImageTextToText.from_pretrained(tiny_vlm_path).state_dict()
    after = AutoModelForImageTextToText.from_pretrained(scorer).state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert any("language_model" in k for k in changed) and any("lm_head" in k for k in changed)
    assert not any(".visual." in k or k.startswith("model.visual") for k in changed)  # ViT and aligner frozen
    metrics = json.loads((out / "metrics.json").read_text())
    assert {"layout", "harmony", "lighting", "distortion", "overall"} <= set(metrics)
    assert (out / "scatter_lighting.png").exists()
    r = get_reward("sa-iqa", {"model": str(scorer)})
    from PIL import Image

    img = Image.open(bench.root / "images" / sorted(p.name for p in (bench.root / "images").iterdir())[0])
    scored = r.score([img.convert("RGB")])
    assert set(scored.dimensions) == {"layout", "harmony", "lighting", "distortion"}


class _Crash(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 3:
            raise KeyboardInterrupt("simulated crash at step 3")


def test_a_crashed_run_resumes_from_its_last_checkpoint_and_ends_at_the_same_step(tiny_vlm_path, bench, tmp_path):
    out = tmp_path / "run"
    cfg = _cfg(_base(tiny_vlm_path, bench, out, steps=4))
    with pytest.raises(KeyboardInterrupt):
        run_sft(parse(SftSettings, cfg), callbacks=[_Crash()])
    assert (out / "checkpoint-2").is_dir() and not (out / "scorer").exists()
    result = run_sft(parse(SftSettings, cfg))
    assert result["global_step"] == 4
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    logged_steps = [e["step"] for e in state["log_history"] if "loss" in e]
    assert logged_steps[-2:] == [3, 4]  # steps 3 and 4 were run after the resume
    # the resumed steps started from checkpoint-2's weights: the scorer equals an uninterrupted run's
    straight = run_sft(parse(SftSettings, _cfg(_base(tiny_vlm_path, bench, tmp_path / "straight", steps=4))))
    resumed_w = load_file(out / "scorer" / "model.safetensors")
    straight_w = load_file(Path(straight["scorer"]) / "model.safetensors")
    assert max((resumed_w[k] - straight_w[k]).abs().max().item() for k in straight_w) < 1e-5


def test_resuming_is_refused_when_any_setting_that_shapes_training_differs(tiny_vlm_path, bench, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_sft(parse(SftSettings, _cfg(_base(tiny_vlm_path, bench, out))), callbacks=[_Crash()])
    for changed, named in (
        ("prompt.type=2", "prompt.type: 1 -> 2"),
        ("data.mos_range=[0,10]", "data.mos_range"),  # another MOS-to-word mapping
        ("loss.rating_weight=3", "loss.rating_weight: 1.0 -> 3.0"),
    ):
        with pytest.raises(ValueError, match="holds another run") as refused:
            run_sft(parse(SftSettings, _cfg(_base(tiny_vlm_path, bench, out, extra=(changed,)))))
        assert named in str(refused.value)
    with pytest.raises(ValueError, match="holds this same run already"):  # resume=never never writes into it
        run_sft(parse(SftSettings, _cfg(_base(tiny_vlm_path, bench, out, extra=("resume=never",)))))
    assert (out / "checkpoint-2").is_dir()  # nothing was deleted


def test_a_missing_test_manifest_fails_before_training(tiny_vlm_path, bench, tmp_path):
    overrides = _base(tiny_vlm_path, bench, tmp_path / "run") + [f"data.test={tmp_path / 'nope.jsonl'}"]
    with pytest.raises(ValueError, match=r"data.test=.*nope.jsonl: no such file"):
        run_sft(parse(SftSettings, _cfg(overrides)))
    assert not (tmp_path / "run").exists()


def test_multi_token_rating_word_fails_before_training_with_a_suggestion(tiny_vlm_path, bench, tmp_path):
    overrides = _base(tiny_vlm_path, bench, tmp_path / "run", extra=("levels.words=[superb,good,fair,poor,bad]",))
    with pytest.raises(CandidateTokenError, match="' superb'.*not one token"):
        run_sft(parse(SftSettings, _cfg(overrides)))
    assert not (tmp_path / "run").exists()


def test_bad_rows_are_skipped_and_counted_not_trained_on(tiny_vlm_path, bench, tmp_path):
    rows = [json.loads(x) for x in bench.ratings.read_text().splitlines()]
    rows.append({"image": "images/missing.png", "dimension": "lighting", "mos": 3.0})
    rows.append({"image": rows[0]["image"], "dimension": "lighting", "mos": 7.5})
    manifest = bench.root / "with_bad_rows.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = _base(tiny_vlm_path, bench, tmp_path / "run", steps=2) + [f"data.train={manifest}", "data.test=null"]
    with pytest.raises(ManifestError, match=r"with_bad_rows.jsonl:\d+: .*missing.png.*data.skip_bad=true"):
        run_sft(
            parse(SftSettings, _cfg(overrides))
        )  # refused by default, naming the row and the setting that skips it
    result = run_sft(parse(SftSettings, _cfg([*overrides, "data.skip_bad=true"])))
    assert result["skipped_train_rows"] == 2


def test_lora_adapter_scorer_records_its_base_model_and_loads(tiny_vlm_path, bench, tmp_path):
    out = tmp_path / "run"
    extra = ("lora.enabled=true", "lora.r=4", "merge_lora=false", "lora.modules_to_save=[lm_head]", "data.test=null")
    run_sft(parse(SftSettings, _cfg(_base(tiny_vlm_path, bench, out, steps=2, extra=extra))))
    meta = json.loads((out / "scorer" / "sa_iqa.json").read_text())
    assert meta["base_model"] == str(Path(tiny_vlm_path).resolve())
    assert (out / "scorer" / "adapter_config.json").exists()
    from conftest import random_images

    scores = get_reward("sa-iqa", {"model": str(out / "scorer")}).score(random_images(2)).scores
    assert scores.shape == (2,) and torch.isfinite(scores).all()


def test_config_problems_are_reported_together(tmp_path):
    with pytest.raises(ValueError) as err:
        parse(
            SftSettings, _cfg(["model.path=m", "data.train=synthetic", f"out={tmp_path}", "prompt.dimensions=[a,a]"])
        )
    assert "prompt.dimensions=['a', 'a']" in str(err.value) and "trainer.max_steps" in str(err.value)


def test_soft_targets_draw_words_whose_mean_value_is_the_mos(tiny_vlm_path):
    """Unit check of the data path (no training): mean drawn level over many reads = the MOS."""
    import numpy as np

    from training.sft_data import answer, stream_rule

    words = list(LEVEL_WORDS)  # best first
    rng = np.random.default_rng(0)
    soft, hard = stream_rule(words, (1.0, 5.0), 0.5), stream_rule(words, (1.0, 5.0), None)
    drawn = [answer(soft, "The level is", 3.3, rng).split()[-1][:-1] for _ in range(4000)]
    mean_level = np.mean([LEVEL_VALUES[words.index(w)] for w in drawn])
    assert mean_level == pytest.approx(3.3, abs=0.05)
    assert answer(hard, "The level is", 3.3) == "The level is fair."  # hard target: the bin


def test_soft_target_training_runs_from_a_manifest(tiny_vlm_path, bench, tmp_path):
    extra = ("data.soft_targets=true", "data.test=null")
    result = run_sft(parse(SftSettings, _cfg(_base(tiny_vlm_path, bench, tmp_path / "run", steps=2, extra=extra))))
    assert result["global_step"] == 2 and (tmp_path / "run" / "scorer" / "sa_iqa.json").exists()
