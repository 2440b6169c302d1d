"""Loading knobs (device_map, attention, the processor's pixel budget), thinking off, and scoring precision."""

from __future__ import annotations

import shutil

import pytest
import torch

from reward.rewards.scoring import expected_value
from reward.vlm import OptionQuery, load_vlm
from reward.vlm.answer_head import fp32_answer_head
from reward.vlm.loading import ModelLoading, loading_of
from tests.conftest import random_images

WORDS = ("excellent", "good", "fair", "poor", "bad")
LEVELS = OptionQuery(
    "How would you rate the lighting of this image?",
    WORDS,
    "The spatial aesthetic lighting quality level of this image is",
)
BF16_TOLERANCE = 0.02  # max |score difference| on the 1-5 scale, bf16 copy vs fp32 (measured: see the report)


def _scores(vlm, images):
    return expected_value(vlm.option_logprobs([[im] for im in images], [LEVELS]).logprobs, torch.arange(5.0, 0, -1))


def test_a_bf16_copy_scores_within_tolerance_of_fp32(tiny_vlm_path):
    images = random_images(8, seed=4, sizes=(56, 84))
    fp32 = _scores(load_vlm(tiny_vlm_path, dtype="float32", batch_size=4), images)
    bf16_vlm = load_vlm(tiny_vlm_path, dtype="bfloat16", batch_size=4)
    assert next(bf16_vlm.model.parameters()).dtype == torch.bfloat16
    bf16 = _scores(bf16_vlm, images)
    diff = (bf16 - fp32).abs().max().item()
    print(f"bf16 vs fp32: max |score diff| {diff:.4g} (score spread {(fp32.max() - fp32.min()).item():.4g})")
    assert diff < BF16_TOLERANCE
    assert bf16.dtype == torch.float32


def test_answer_logits_of_a_bf16_model_are_computed_in_fp32():
    torch.manual_seed(0)
    head = torch.nn.Linear(64, 50_000, bias=False).to(torch.bfloat16)
    head.weight.data.mul_(20)  # |logit| 16-32, where bf16 logits are 0.125 apart
    model = torch.nn.Module()
    model.lm_head = head
    model.get_output_embeddings = lambda: model.lm_head
    hidden = torch.randn(3, 1, 64).to(torch.bfloat16)
    exact = hidden.double() @ head.weight.double().T
    with fp32_answer_head(model):
        logits = model.lm_head(hidden)
    assert model.lm_head is head  # restored after the block
    assert logits.dtype == torch.float32
    assert (logits.double() - exact).abs().max() < 1e-3
    assert (head(hidden).double() - exact).abs().max() > 1e-2  # what bf16 logits would have been


def test_candidate_log_probs_are_gathered_from_the_full_distribution(tiny_vlm):
    images = [[im] for im in random_images(3, seed=2)]
    result = tiny_vlm.option_logprobs(images, [LEVELS], return_vocab=True)
    ids = tiny_vlm.candidate_ids(LEVELS)
    assert torch.allclose(result.logprobs[:, 0], result.vocab[:, 0, ids])


def test_processor_pixel_budget_sets_the_number_of_visual_tokens(tiny_vlm25_path):
    small = load_vlm(tiny_vlm25_path, batch_size=2)
    large = load_vlm(tiny_vlm25_path, batch_size=2, min_pixels=112 * 112, max_pixels=112 * 112)
    image = random_images(1, sizes=(200,))[0]

    def n_image_tokens(vlm):
        text = vlm.render(1, "Rate the quality of the image.")
        ids = vlm.processor(text=[text], images=[image], return_tensors="pt")["input_ids"][0]
        return int((ids == vlm.tokenizer.convert_tokens_to_ids("<|image_pad|>")).sum())

    assert (n_image_tokens(small), n_image_tokens(large)) == (4, 16)  # 56^2 -> 4 tokens, 112^2 -> 16 tokens
    assert large.option_logprobs([[image]], [LEVELS]).logprobs.shape == (1, 1, 5)


def test_loading_settings_are_validated_and_taken_from_a_reward_config():
    from reward.rewards.qbench import QBenchConfig

    loading = loading_of(QBenchConfig(model="m", device_map="auto", attn_implementation="eager"))
    assert (type(loading), loading.device_map, loading.attn_implementation) == (ModelLoading, "auto", "eager")
    with pytest.raises(ValueError) as info:
        ModelLoading(attn_implementation="flash", min_pixels=4000, max_pixels=1000, device="cuda:1", device_map="auto")
    message = str(info.value)
    for part in ("attn_implementation='flash'", "min_pixels=4000 is above max_pixels=1000", "set only one of them"):
        assert part in message


def test_every_vlm_reward_config_passes_the_loading_knobs(tiny_vlm_path, tiny_scorer_path, pace_protocol_path):
    from reward import get_reward

    knobs = {"attn_implementation": "eager", "min_pixels": 112 * 112, "max_pixels": 112 * 112, "dtype": "float32"}
    qbench = get_reward("qbench", {"model": str(tiny_vlm_path), **knobs})
    sa_iqa = get_reward("sa-iqa", {"model": str(tiny_scorer_path), **knobs})
    pace = get_reward("pace", {"model": str(tiny_vlm_path), "protocol": str(pace_protocol_path), **knobs})
    for vlm in (qbench.vlm, sa_iqa.vlm, pace.backend):
        assert vlm.model.config._attn_implementation == "eager"
        assert vlm.processor.image_processor.size.longest_edge == 112 * 112
    with pytest.raises(ValueError, match="attn_implementation='flash'"):
        get_reward("qbench", {"model": str(tiny_vlm_path), "attn_implementation": "flash"})


THINKING_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}"
)  # Qwen3-style: thinking unless enable_thinking=false


def test_qwen3_vl_thinking_is_switched_off_so_the_answer_follows_the_prefix(tiny_vlm3_path, tmp_path):
    ckpt = tmp_path / "thinking"
    shutil.copytree(tiny_vlm3_path, ckpt)
    (ckpt / "chat_template.jinja").write_text(THINKING_TEMPLATE)
    tok_cfg = ckpt / "tokenizer_config.json"
    tok_cfg.write_text(tok_cfg.read_text().replace('"chat_template"', '"_unused_chat_template"'))
    vlm = load_vlm(ckpt, batch_size=2)
    text = vlm.render(1, LEVELS.question, LEVELS.response_prefix)
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n" + LEVELS.response_prefix)
    plain = vlm.option_logprobs([[im] for im in random_images(2)], [LEVELS, LEVELS], reuse_prefix=False).logprobs
    cached = vlm.option_logprobs([[im] for im in random_images(2)], [LEVELS, LEVELS], reuse_prefix=True).logprobs
    assert torch.allclose(plain, cached, atol=1e-4)


def test_training_renders_a_thinking_template_with_thinking_off(tiny_vlm3_path):
    from reward.vlm import load_processor, thinking_off

    processor = load_processor(tiny_vlm3_path)
    processor.chat_template = processor.tokenizer.chat_template = THINKING_TEMPLATE
    messages = [{"role": "user", "content": [{"type": "text", "text": "Rate it."}]}]
    assert processor.apply_chat_template(messages, add_generation_prompt=True).endswith("<think>\n")
    assert thinking_off(processor) and not thinking_off(processor)  # applied once
    assert processor.apply_chat_template(messages, add_generation_prompt=True).endswith("<think>\n\n</think>\n\n")


@pytest.fixture(scope="module")
def lora_adapter(tiny_vlm_path, tmp_path_factory):
    """A LoRA adapter (r=8 on every attention and MLP projection of the language model) with random B, large enough
    to move the scores; saved in fp32 like a trained one."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(0)
    base = AutoModelForImageTextToText.from_pretrained(tiny_vlm_path, dtype=torch.float32)
    targets = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=targets))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.05)
    folder = tmp_path_factory.mktemp("lora")
    model.save_pretrained(folder)
    return folder


def _unmerged_fp32(tiny_vlm_path, adapter):
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    from reward.vlm import VLM, load_processor

    base = AutoModelForImageTextToText.from_pretrained(tiny_vlm_path, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(adapter)).eval()
    return VLM(model, load_processor(tiny_vlm_path), batch_size=4)


def test_a_lora_scorer_scores_as_trained_merged_in_bf16_or_kept_unmerged(tiny_vlm_path, lora_adapter):
    from peft.tuners.lora import LoraLayer

    images = random_images(8, seed=4, sizes=(56, 84))
    trained = _scores(_unmerged_fp32(tiny_vlm_path, lora_adapter), images)
    base = _scores(load_vlm(tiny_vlm_path, dtype="float32", batch_size=4), images)
    assert (trained - base).abs().max() > 5 * BF16_TOLERANCE  # the adapter matters: a test that can fail
    merged_bf16 = _scores(load_vlm(tiny_vlm_path, dtype="bfloat16", batch_size=4, adapter=lora_adapter), images)
    assert (merged_bf16 - trained).abs().max() < BF16_TOLERANCE  # merged in fp32, rounded once to bf16
    kept = load_vlm(tiny_vlm_path, dtype="bfloat16", batch_size=4, adapter=lora_adapter, merge_adapter=False)
    layers = [m for m in kept.model.modules() if isinstance(m, LoraLayer)]
    assert layers and all(m.lora_A["default"].weight.dtype == torch.float32 for m in layers)  # fp32 adapters
    assert next(kept.model.parameters()).dtype == torch.bfloat16
    assert (_scores(kept, images) - trained).abs().max() < BF16_TOLERANCE
    exact = load_vlm(tiny_vlm_path, dtype="float32", batch_size=4, adapter=lora_adapter, merge_adapter=False)
    assert torch.allclose(_scores(exact, images), trained, atol=1e-6)  # unmerged fp32: the training computation


def test_a_bf16_adapter_is_merged_with_one_rounding(tiny_vlm_path, lora_adapter):
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer
    from transformers import AutoModelForImageTextToText

    from reward.vlm.loading import merge_lora

    def bf16_peft():
        base = AutoModelForImageTextToText.from_pretrained(tiny_vlm_path, dtype=torch.bfloat16)
        return PeftModel.from_pretrained(base, str(lora_adapter), autocast_adapter_dtype=False)  # bf16 adapter

    model = bf16_peft()
    layer = next(m for m in model.modules() if isinstance(m, LoraLayer))
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    assert a.dtype == torch.bfloat16
    w = layer.get_base_layer().weight.data.clone()
    expected = (w.float() + (b.float() @ a.float()) * layer.scaling["default"]).to(torch.bfloat16)
    assert merge_lora(model) == sum(isinstance(m, LoraLayer) for m in model.modules())
    assert torch.equal(layer.get_base_layer().weight.data, expected)
    peft_merged = bf16_peft().merge_and_unload()  # peft with a bf16 adapter: the delta is rounded, then the sum
    name = next(n for n, m in bf16_peft().named_modules() if isinstance(m, LoraLayer))
    double = peft_merged.get_submodule(name.removeprefix("base_model.model.")).weight.data
    assert not torch.equal(double, expected)  # what the explicit fp32 merge avoids
