"""SFT at scale: training precision, saving, the effective batch, any dimension, and fail-at-start validation."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hydra import initialize_config_dir

from reward.core.cli import compose
from reward.core.config import parse
from training.commands.sft import SftSettings
from training.commands.sft import run as run_sft
from training.commands.sft_setup import checked_inputs
from training.shared.trainable import load_dtype

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("sft", overrides=overrides, schema=SftSettings)


def _quality_manifest(tmp: Path, n: int = 8, dimension: str = "quality") -> Path:
    """KADID-style rows: brightness levels rated on a dimension SA-BENCH does not have."""
    import numpy as np
    from PIL import Image

    (tmp / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        Image.fromarray(np.full((56, 56, 3), 25 * i, np.uint8)).save(tmp / f"img/{i}.png")
        rows.append({"image": f"img/{i}.png", "dimension": dimension, "mos": 1 + 4 * i / (n - 1)})
    path = tmp / "ratings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _base(model: Path, train: Path, out: Path, *extra: str) -> list[str]:
    return [
        f"model.path={model}",
        f"data.train={train}",
        f"out={out}",
        "trainer.max_steps=2",
        "trainer.save_steps=100",
        "trainer.per_device_train_batch_size=4",
        "trainer.gradient_accumulation_steps=1",
        "trainer.learning_rate=1e-3",
        "eval_batch_size=8",
        *extra,
    ]


def test_full_fine_tuning_keeps_fp32_master_weights_unless_deepspeed_or_lora():
    assert load_dtype("auto", lora=False, bf16=True, deepspeed=False) == torch.float32  # bf16 autocast does the rest
    assert load_dtype("auto", lora=True, bf16=True, deepspeed=False) == torch.bfloat16  # frozen base
    assert load_dtype("auto", lora=False, bf16=True, deepspeed=True) == torch.bfloat16  # DeepSpeed keeps fp32 itself
    assert load_dtype("auto", lora=False, bf16=False, deepspeed=False) == torch.float32
    assert load_dtype("bfloat16", lora=False, bf16=True, deepspeed=False) == torch.bfloat16  # explicit: obeyed


def test_a_dimension_the_prompt_type_cannot_define_is_asked_in_plain_words_and_a_definition_is_used(
    tiny_vlm_path, tmp_path
):
    from training.commands.sft_setup import scorer_meta

    train = _quality_manifest(tmp_path / "data")
    settings = checked_inputs(parse(SftSettings, _cfg(_base(tiny_vlm_path, train, tmp_path / "out"))))  # type 4
    assert settings.prompt.type == 4 and settings.prompt.dimensions == ["quality"]  # the data's own dimension
    meta = scorer_meta(settings)
    assert meta["queries"]["quality"] == {
        "question": "Please evaluate the quality of this image.",
        "response_prefix": "The quality of this image is",
    }
    assert meta["generic"] == ["quality"]
    defined = _cfg(
        _base(
            tiny_vlm_path,
            train,
            tmp_path / "out",
            "+prompt.definitions.quality='How clean and sharp the photo is.'",
        )
    )
    meta = scorer_meta(checked_inputs(parse(SftSettings, defined)))
    assert meta["queries"]["quality"]["question"].endswith(
        "quality level of this image. How clean and sharp the photo is."
    )
    assert meta["generic"] == []


@pytest.mark.slow
def test_a_new_dimension_trains_and_unknown_dimensions_fail_in_one_line(tiny_vlm_path, tmp_path, caplog):
    train = _quality_manifest(tmp_path / "data")
    with pytest.raises(ValueError) as info:  # every row skipped: one clear error before the trainer starts
        run_sft(
            parse(
                SftSettings,
                _cfg(_base(tiny_vlm_path, train, tmp_path / "bad", "prompt.type=1", "prompt.dimensions=[lighting]")),
            )
        )
    message = str(info.value)
    assert "all 8 training rows were skipped" in message and "{'quality': 8}" in message
    assert "prompt.dimensions=['quality']" in message and "\n" not in message.split("set prompt")[0]
    assert not (tmp_path / "bad" / "scorer").exists()

    mixed = tmp_path / "mixed.jsonl"  # 8 quality rows + 8 lighting rows: the quality rows in one warning
    rows = train.read_text() + train.read_text().replace('"quality"', '"lighting"')
    mixed.write_text(rows.replace('"img/', '"data/img/'))
    with caplog.at_level(logging.WARNING, logger="training.sft_data"):
        run_sft(
            parse(
                SftSettings,
                _cfg(
                    _base(
                        tiny_vlm_path,
                        mixed,
                        tmp_path / "mixed",
                        "prompt.type=1",
                        "prompt.dimensions=[lighting]",
                        "trainer.max_steps=1",
                    )
                ),
            )
        )
    lines = [r.getMessage() for r in caplog.records if "not in prompt.dimensions" in r.getMessage()]
    assert len(lines) == 1 and "8 rows (first: line 1)" in lines[0]

    out = tmp_path / "quality"
    result = run_sft(
        parse(
            SftSettings,
            _cfg(
                _base(tiny_vlm_path, train, out, "prompt.type=1", "prompt.dimensions=[quality]", f"data.test={train}")
            ),
        )
    )
    meta = json.loads((out / "scorer" / "sa_iqa.json").read_text())
    assert list(meta["queries"]) == ["quality"]
    assert result["metrics"]["quality"]["n"] == 8


def test_an_adapter_scorer_trained_from_a_hub_id_records_the_id(tiny_vlm_path, tmp_path):
    from peft import get_peft_model
    from transformers import AutoModelForImageTextToText

    from reward.vlm import load_processor
    from training.commands.sft_scorer import save_scorer
    from training.prompts import scorer_metadata
    from training.shared.trainable import LoraSettings, lora_config

    model = get_peft_model(AutoModelForImageTextToText.from_pretrained(tiny_vlm_path), lora_config(LoraSettings()))
    settings = parse(
        SftSettings,
        _cfg(
            _base(
                Path("Qwen/Qwen2.5-VL-7B-Instruct"),
                tmp_path / "m.jsonl",
                tmp_path / "o",
                "lora.enabled=true",
                "merge_lora=false",
                "prompt.type=1",
            )
        ),
    )
    meta = scorer_metadata(["lighting"], prompt_type=1, definitions={})
    setup = SimpleNamespace(settings=settings, out=tmp_path, meta=meta, processor=load_processor(tiny_vlm_path))
    scorer = save_scorer(setup, model, None)
    assert json.loads((scorer / "sa_iqa.json").read_text())["base_model"] == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert (scorer / "adapter_model.safetensors").is_file()
