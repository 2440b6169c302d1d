"""Tiny, randomly initialised checkpoints of the real architectures, built offline.

Tests and the demo cannot download a model, so they build one here. The checkpoints are ordinary
``from_pretrained`` directories (model, tokenizer, image processor, processor, chat template) that load
through exactly the code path real Qwen-VL checkpoints take (:func:`reward.vlm.load_vlm`).

Example:
    >>> from reward.testing import make_tiny_vlm  # doctest: +SKIP
    >>> path = make_tiny_vlm("/tmp/tiny-qwen2-vl")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Literal

import torch

logger = logging.getLogger(__name__)

Family = Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]
FAMILIES: tuple[str, ...] = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
PATCH = {"qwen2_vl": 14, "qwen2_5_vl": 14, "qwen3_vl": 16}  # vision patch size of each family

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<|pad|>",
]

# Words every scorer in the toolkit reads at the answer position; each must be one token, with and
# without a leading space, in the tiny vocabulary.
ANSWER_WORDS = [
    "excellent",
    "good",
    "fair",
    "poor",
    "bad",
    "high",
    "fine",
    "low",
    "Yes",
    "No",
    "Medium",
    "yes",
    "no",
    "medium",
    "A",
    "B",
    "C",
    "D",
    "E",
    "Excellent",
    "Good",
    "Fair",
    "Poor",
    "Bad",
]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_SENTENCE_PARTS = [
    "Rate the quality of the image.",
    "The quality of the image is",
    "How would you rate the lighting of this image?",
    "The spatial aesthetic layout quality level of this image is",
    "The spatial aesthetic harmony quality level of this image is",
    "The spatial aesthetic lighting quality level of this image is",
    "The spatial aesthetic distortion quality level of this image is",
    "Answer with the option's letter from the given choices directly.",
    "Is the surface smooth with minimal irregularities?",
    "Which image is closer to the high quality anchor?",
    "Describe the image in detail. Expand the prompt for an interior design photo.",
    "a modern living room with a sofa, a lamp, a window and warm light",
    "Please evaluate the image and reply with one word.",
]


def _corpus(n: int = 400) -> list[str]:
    import random

    rnd = random.Random(0)
    lines = []
    for i in range(n):
        words = rnd.sample(ANSWER_WORDS, 4)
        part = _SENTENCE_PARTS[i % len(_SENTENCE_PARTS)]
        lines.append(f"{part} {' '.join(words)}. {words[0]}{rnd.choice(['.', ',', '!', ''])}")
        lines.append(" ".join(f"{w} {w.lower()}" for w in words))
    for w in ANSWER_WORDS:  # each word, with and without a leading space, many times over
        lines.extend([f"{w} {w} {w}", f"{w}.{w}:{w}"] * 20)
    return lines


def make_tokenizer(vocab_size: int = 1024):
    """Byte-level BPE tokenizer trained on a generated corpus; answer words are single tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        bos_token=None,
        unk_token=None,
        padding_side="left",
        extra_special_tokens={
            "image_token": "<|image_pad|>",
            "video_token": "<|video_pad|>",
            "vision_start_token": "<|vision_start|>",
            "vision_end_token": "<|vision_end|>",
        },
    )
    fast.chat_template = CHAT_TEMPLATE
    for w in ANSWER_WORDS:
        for text in (w, " " + w):
            ids = fast.encode(text, add_special_tokens=False)
            if len(ids) != 1:  # pragma: no cover - guards the corpus above
                raise RuntimeError(f"tiny tokenizer: {text!r} is {len(ids)} tokens; enlarge the corpus")
    return fast


def _text_config(tokenizer, seed: int, hidden: int, layers: int) -> dict:
    head_dim = hidden // 4
    return {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden,
        "intermediate_size": hidden * 2,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1e4,
            "mrope_section": _mrope_section(head_dim),
        },
        "tie_word_embeddings": False,
        "initializer_range": 0.08,  # peakier than the default 0.02, so position or cache bugs show in tests
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    }


def _mrope_section(head_dim: int) -> list[int]:
    half = head_dim // 2
    t = half // 4
    h = (half - t) // 2
    return [t, h, half - t - h]


def _vlm_config(family: str, tokenizer, hidden: int, layers: int, vision_embed: int, vision_depth: int = 2):
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig, Qwen3VLConfig

    ids = {
        "image_token_id": tokenizer.convert_tokens_to_ids("<|image_pad|>"),
        "video_token_id": tokenizer.convert_tokens_to_ids("<|video_pad|>"),
        "vision_start_token_id": tokenizer.convert_tokens_to_ids("<|vision_start|>"),
        "vision_end_token_id": tokenizer.convert_tokens_to_ids("<|vision_end|>"),
    }
    text = _text_config(tokenizer, 0, hidden, layers)
    if family == "qwen2_vl":
        vision = {
            "depth": vision_depth,
            "embed_dim": vision_embed,
            "hidden_size": hidden,
            "num_heads": 2,
            "mlp_ratio": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        }
        return Qwen2VLConfig(text_config=text, vision_config=vision, **ids)
    if family == "qwen2_5_vl":
        vision = {
            "depth": vision_depth,
            "hidden_size": vision_embed,
            "intermediate_size": vision_embed * 2,
            "num_heads": 2,
            "out_hidden_size": hidden,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,
            "fullatt_block_indexes": [1],
        }
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **ids)
    if family == "qwen3_vl":
        text["head_dim"] = hidden // 4
        text["rope_parameters"]["mrope_interleaved"] = True
        vision = {
            "depth": vision_depth,
            "hidden_size": vision_embed,
            "intermediate_size": vision_embed * 2,
            "num_heads": 2,
            "out_hidden_size": hidden,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "num_position_embeddings": 64,
            "deepstack_visual_indexes": [0],
        }
        return Qwen3VLConfig(text_config=text, vision_config=vision, **ids)
    raise ValueError(f"unknown tiny VLM family {family!r}; choose one of {', '.join(FAMILIES)}")


PRESETS: dict[str, dict[str, int]] = {
    # 4 image tokens: fast, enough for the procedural scenes' global effects (lighting, harmony)
    "default": {"hidden": 64, "layers": 2, "vision_embed": 32, "vision_depth": 2, "image_side": 4},
    # sees local distortions of real photos (blur, noise, JPEG, pixelation): 112x112 crops at native scale,
    # 8x8 patches -> 16 image tokens; train its ViT (recipe tiny-real-photos)
    "small": {"hidden": 64, "layers": 2, "vision_embed": 64, "vision_depth": 2, "image_side": 8},
}


def make_tiny_vlm(
    out_dir: str | Path,
    family: Family = "qwen2_vl",
    seed: int = 0,
    *,
    preset: str = "default",
    hidden: int | None = None,
    layers: int | None = None,
    vision_embed: int | None = None,
    vision_depth: int | None = None,
    image_pixels: int | None = None,
) -> Path:
    """Build a tiny random Qwen-VL checkpoint in ``out_dir`` (reused if it already holds one) and return it.

    ``preset`` picks the sizes of :data:`PRESETS` (``"small"``: a tiny VLM that can learn local distortions of
    real photos); the keyword arguments override single sizes. ``image_pixels`` bounds the image processor
    (default: the preset's patches a side, e.g. 4 -> 4 image tokens after the 2x2 merge). Larger
    ``hidden``/``layers``/``image_pixels`` give the bigger random configs used by ``bench/``.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown tiny VLM preset {preset!r}; choose one of {', '.join(PRESETS)}")
    sizes = {
        **PRESETS[preset],
        **{
            k: v
            for k, v in {
                "hidden": hidden,
                "layers": layers,
                "vision_embed": vision_embed,
                "vision_depth": vision_depth,
            }.items()
            if v is not None
        },
    }
    from transformers import AutoModelForImageTextToText
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    out = Path(out_dir)
    if (out / "config.json").exists() and (out / "tokenizer.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer()
    config = _vlm_config(
        family, tokenizer, sizes["hidden"], sizes["layers"], sizes["vision_embed"], sizes["vision_depth"]
    )
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    pixels = image_pixels or (sizes["image_side"] * PATCH[family]) ** 2
    image_processor = Qwen2VLImageProcessorPil(min_pixels=pixels, max_pixels=pixels, patch_size=PATCH[family])
    image_processor.save_pretrained(out)
    processor_cls = {
        "qwen2_vl": "Qwen2VLProcessor",
        "qwen2_5_vl": "Qwen2_5_VLProcessor",
        "qwen3_vl": "Qwen3VLProcessor",
    }[family]
    (out / "processor_config.json").write_text(json.dumps({"processor_class": processor_cls}, indent=2))
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    logger.info("built tiny %s (%d params) in %s", family, sum(p.numel() for p in model.parameters()), out)
    return out


def make_tiny_lm(out_dir: str | Path, seed: int = 0, *, hidden: int = 64, layers: int = 2) -> Path:
    """Build a tiny random text-only causal LM (Qwen2 architecture) with the same tokenizer."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    out = Path(out_dir)
    if (out / "config.json").exists() and (out / "tokenizer.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer()
    text = _text_config(tokenizer, seed, hidden, layers)
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e4}
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(Qwen2Config(**text))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
