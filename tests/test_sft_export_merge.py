"""SFT's scorer export merges a LoRA adapter as the loader does: W + B A s in fp32, rounded once to W's dtype."""

from __future__ import annotations

from types import SimpleNamespace

import torch


def test_the_exported_scorer_holds_the_fp32_merge_of_bf16_training_weights(tiny_vlm_path, tmp_path):
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer
    from safetensors.torch import load_file
    from transformers import AutoModelForImageTextToText

    from reward.vlm import load_processor
    from training.commands.sft_scorer import save_scorer

    def bf16_training_model():  # the whole model in bf16, its LoRA layers too (as under a bf16 DeepSpeed run)
        torch.manual_seed(0)
        base = AutoModelForImageTextToText.from_pretrained(tiny_vlm_path, dtype=torch.bfloat16)
        targets = r".*language_model.*\.(q_proj|v_proj|gate_proj|down_proj)"
        model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=targets))
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.data = (p.data.float().normal_(0, 0.05)).to(torch.bfloat16)
        return model

    model = bf16_training_model()
    expected = {}
    for name, m in model.named_modules():
        if isinstance(m, LoraLayer):
            a, b, w = m.lora_A["default"].weight, m.lora_B["default"].weight, m.get_base_layer().weight.data
            key = name.removeprefix("base_model.model.") + ".weight"
            expected[key] = (w.float() + (b.float() @ a.float()) * m.scaling["default"]).to(torch.bfloat16)
    assert expected and all(v.dtype == torch.bfloat16 for v in expected.values())
    peft_merged = dict(bf16_training_model().merge_and_unload().named_parameters())  # peft merges in bf16

    settings = SimpleNamespace(lora=SimpleNamespace(enabled=True), merge_lora=True, model=SimpleNamespace(path="x"))
    from training.prompts import scorer_metadata

    meta = scorer_metadata(["quality"], prompt_type=1, definitions={})
    setup = SimpleNamespace(settings=settings, out=tmp_path, meta=meta, processor=load_processor(tiny_vlm_path))
    out = save_scorer(setup, model, None)
    assert not any("lora_" in k for k in load_file(out / "model.safetensors"))
    saved = dict(AutoModelForImageTextToText.from_pretrained(out, dtype=torch.bfloat16).named_parameters())
    differ = 0
    for key, want in expected.items():
        got = saved[key]
        assert got.dtype == torch.bfloat16 and torch.equal(got, want), key  # one rounding: the fp32 merge
        differ += not torch.equal(peft_merged[key], want)
    assert differ > 0  # the bf16 merge rounds twice: the test can tell them apart
