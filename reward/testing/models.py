"""Tiny, randomly initialised checkpoints of the real architectures, built offline: one entry of :data:`TINY` per
family, from the architecture's own config classes, with a tokenizer whose answer words are single tokens; ordinary
``from_pretrained`` folders that load through :func:`reward.vlm.load_vlm` as downloaded ones do.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # then the family's own, then "<|pad|>"

# Words every scorer in the toolkit reads at the answer position; each must be one token, with and
# without a leading space, in the tiny vocabulary.
ANSWER_WORDS = [
    *("excellent", "good", "fair", "poor", "bad", "high", "fine", "low", "Yes", "No", "Medium"),
    *("yes", "no", "medium", "A", "B", "C", "D", "E", "Excellent", "Good", "Fair", "Poor", "Bad"),
]


def chat_template(image: str, turn: str = "<|im_start|>{role}\n", end: str = "<|im_end|>\n", bot: str = "assistant"):
    """A small Jinja chat template: ``turn`` opens a turn, ``end`` closes it, ``image`` stands for an image part."""
    start = turn.replace("{role}", "' + message['role'] + '")
    return (
        "{% for message in messages %}"
        f"{{{{ '{start}' }}}}"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for part in message['content'] %}"
        f"{{% if part['type'] == 'image' %}}{image}"
        "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
        "{% endfor %}{% endif %}"
        f"{end}"
        "{% endfor %}"
        f"{{% if add_generation_prompt %}}{turn.replace('{role}', bot)}{{% endif %}}"
    )


QWEN_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
CHAT_TEMPLATE = chat_template(QWEN_IMAGE)

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


QWEN_TOKENS = {
    "vision_start_token": "<|vision_start|>",
    "vision_end_token": "<|vision_end|>",
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
}


def make_tokenizer(
    named: dict[str, str] | None = None,
    *,
    specials: tuple[str, ...] = (),
    template: str = CHAT_TEMPLATE,
    metaspace: bool = False,
    vocab_size: int = 1024,
):
    """A BPE tokenizer trained on a generated corpus; answer words are single tokens with and without a space.

    ``named``: the tokenizer's named special tokens (``image_token`` ...; default Qwen-VL's), ``specials``: more
    special tokens; ``metaspace``: spaces as "▁" (SentencePiece's habit, Gemma's), else byte-level (GPT-2's, Qwen's).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    named = QWEN_TOKENS if named is None else named
    tok = Tokenizer(models.BPE(byte_fallback=metaspace))
    if metaspace:
        tok.normalizer = normalizers.Replace(" ", "▁")
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("▁?[^▁]*"), behavior="isolated")
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
        alphabet = [chr(c) for c in range(32, 127)] + ["▁", "\n"]
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    all_specials = list(dict.fromkeys([*SPECIAL_TOKENS, *named.values(), *specials, "<|pad|>"]))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=all_specials, initial_alphabet=alphabet, show_progress=False
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        bos_token=None,
        unk_token=None,
        padding_side="left",
        extra_special_tokens=named,
    )
    fast.chat_template = template
    for w in ANSWER_WORDS:
        for text in (w, " " + w):
            ids = fast.encode(text, add_special_tokens=False)
            if len(ids) != 1:  # pragma: no cover - guards the corpus above
                raise RuntimeError(f"tiny tokenizer: {text!r} is {len(ids)} tokens; enlarge the corpus")
    return fast


def _mrope(head_dim: int, **extra: Any) -> dict:
    """Rope parameters with a multimodal section for ``head_dim`` (t, h, w summing to head_dim / 2)."""
    half = head_dim // 2
    t = half // 4
    h = (half - t) // 2
    return {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [t, h, half - t - h], **extra}


def _text(hidden: int, layers: int, **extra: Any) -> dict:
    """The language model's sizes, common to every family (4 heads, 2 KV heads)."""
    return {
        "hidden_size": hidden,
        "intermediate_size": hidden * 2,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": hidden // 4,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "initializer_range": 0.08,  # peakier than the default 0.02, so position or cache bugs show in tests
        **extra,
    }


_QWEN_IDS = dict(image_token_id="<|image_pad|>", video_token_id="<|video_pad|>")
_QWEN_IDS.update(vision_start_token_id="<|vision_start|>", vision_end_token_id="<|vision_end|>")


@dataclass(frozen=True)
class Tiny:
    """How one family's tiny checkpoint is built: its config class with the text and vision parts (functions of
    the sizes), its image processor and processor, the tokenizer's named tokens and chat template. A config value
    naming a token (``"<image>"``) becomes its id; every token the template or the config names is a special one."""

    config: str
    text: Any  # (hidden, layers) -> the text_config dict
    vision: Any  # (hidden, vision_embed, vision_depth, side) -> the vision_config dict
    image_processor: Any  # (side) -> (class name, settings)
    processor: str
    processor_kwargs: dict = field(default_factory=dict)
    top: dict = field(default_factory=lambda: _QWEN_IDS)
    tokens: dict = field(default_factory=lambda: QWEN_TOKENS)
    template: str = CHAT_TEMPLATE
    metaspace: bool = False


def _qwen_vision(**extra: Any):
    return lambda hidden, embed, depth, side: {
        **dict(depth=depth, hidden_size=embed, intermediate_size=embed * 2, num_heads=2, out_hidden_size=hidden),
        **dict(spatial_merge_size=2, temporal_patch_size=2, patch_size=14),
        **extra,
    }


def _vit(patch: int, pixels: int | None = None, **extra: Any):
    """A plain ViT (SigLIP's, InternViT's, Idefics3's and Ovis2's field names) of ``pixels`` (default ``patch``)
    times the side in patches."""
    return lambda hidden, embed, depth, side: {
        **dict(hidden_size=embed, intermediate_size=embed * 2, num_hidden_layers=depth, num_attention_heads=2),
        **dict(image_size=side * (pixels or patch), patch_size=patch, **extra),
    }


def _pixels(cls: str, patch: int, frames: int = 1):
    """A Qwen-VL-style image processor reading ``side`` patches a side (x ``frames``: GLM-4V counts 2)."""
    return lambda side: (
        cls,
        {
            "size": dict(shortest_edge=frames * (side * patch) ** 2, longest_edge=frames * (side * patch) ** 2),
            "patch_size": patch,
        },
    )


def _square(cls: str, pixels: int, **extra: Any):
    return lambda side: (cls, {"size": {"height": side * pixels, "width": side * pixels}, **extra})


_PINPOINTS = [[28 * h, 28 * w] for h in (1, 2) for w in (1, 2)]  # LLaVA-OneVision's grids: 1x1 to 2x2 tiles of 28 px

_Q3 = {"patch_size": 16, "num_position_embeddings": 64}
# Qwen3.5: Gated DeltaNet (linear attention) and full attention layers in turn
_GDN = dict(full_attention_interval=2, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2)
_GDN.update(linear_num_value_heads=4)
_MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32)
_QWEN2 = lambda hidden, layers: _text(hidden, layers, model_type="qwen2")  # noqa: E731
_MROPE = lambda hidden, layers, **extra: _text(hidden, layers, rope_parameters=_mrope(hidden // 4, **extra))  # noqa: E731

TINY: dict[str, Tiny] = {
    "qwen2_vl": Tiny(
        "Qwen2VLConfig",
        _MROPE,
        lambda hidden, embed, depth, side: {
            **dict(depth=depth, embed_dim=embed, hidden_size=hidden, num_heads=2, mlp_ratio=2, patch_size=14),
            **dict(spatial_merge_size=2, temporal_patch_size=2),
        },
        _pixels("Qwen2VLImageProcessorPil", 14),
        "Qwen2VLProcessor",
    ),
    "qwen2_5_vl": Tiny(
        "Qwen2_5_VLConfig",
        _MROPE,
        _qwen_vision(window_size=56, fullatt_block_indexes=[1]),
        _pixels("Qwen2VLImageProcessorPil", 14),
        "Qwen2_5_VLProcessor",
    ),
    "qwen3_vl": Tiny(
        "Qwen3VLConfig",
        lambda hidden, layers: _MROPE(hidden, layers, mrope_interleaved=True),
        _qwen_vision(**_Q3, deepstack_visual_indexes=[0]),
        _pixels("Qwen2VLImageProcessorPil", 16),
        "Qwen3VLProcessor",
    ),
    "qwen3_5": Tiny(
        "Qwen3_5Config",
        lambda hidden, layers: {**_MROPE(hidden, layers, mrope_interleaved=True), **_GDN},
        _qwen_vision(**_Q3),
        _pixels("Qwen2VLImageProcessorPil", 16),
        "Qwen3VLProcessor",
    ),
    "qwen3_5_moe": Tiny(
        "Qwen3_5MoeConfig",
        lambda hidden, layers: {**_MROPE(hidden, layers, mrope_interleaved=True), **_GDN, **_MOE},
        _qwen_vision(**_Q3),
        _pixels("Qwen2VLImageProcessorPil", 16),
        "Qwen3VLProcessor",
    ),
    "glm4v": Tiny(
        "Glm4vConfig",
        lambda hidden, layers: _text(hidden, layers, rope_parameters=_mrope(hidden // 8, partial_rotary_factor=0.5)),
        _qwen_vision(image_size=56),
        _pixels("Glm4vImageProcessorPil", 14, frames=2),
        "Glm4vProcessor",
        top={
            **dict(image_token_id="<|image|>", image_start_token_id="<|begin_of_image|>"),
            **dict(image_end_token_id="<|end_of_image|>", video_token_id="<|video|>"),
            **dict(video_start_token_id="<|begin_of_video|>", video_end_token_id="<|end_of_video|>"),
        },
        tokens={"image_token": "<|image|>", "video_token": "<|video|>"},
        template=chat_template("<|begin_of_image|><|image|><|end_of_image|>", "<|{role}|>\n", ""),
    ),
    "ovis2": Tiny(
        "Ovis2Config",
        _QWEN2,
        _vit(8, hidden_stride=2, vocab_size=64),  # 2x2 patches a visual token, a visual vocabulary of 64
        _square("Ovis2ImageProcessorPil", 8),
        "Ovis2Processor",
        {"image_seq_length": 4},
        top={
            "image_token_id": "<IMG_ATOM>",
            "visual_indicator_token_ids": ["<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>", "<IMG_END>"],
        },
        tokens={"image_token": "<image>"},
        template=chat_template("<image>\n"),
    ),
    "internvl": Tiny(
        "InternVLConfig",
        _QWEN2,
        _vit(14),
        _square("GotOcr2ImageProcessorPil", 14),
        "InternVLProcessor",
        {"image_seq_length": 4},
        top={"image_token_id": "<IMG_CONTEXT>", "image_seq_length": 4, "downsample_ratio": 0.5},
        tokens=dict(start_image_token="<img>", end_image_token="</img>", context_image_token="<IMG_CONTEXT>")
        | {"video_token": "<video>"},
        template=chat_template("<IMG_CONTEXT>\n"),
    ),
    "gemma3": Tiny(
        "Gemma3Config",
        lambda hidden, layers: _text(
            hidden,
            layers,
            query_pre_attn_scalar=hidden // 4,
            sliding_window=16,  # shorter than a prompt: the cache keeps a window
            layer_types=["sliding_attention", "full_attention"][:layers] + ["full_attention"] * (layers - 2),
        ),
        _vit(7, model_type="siglip_vision_model"),
        _square("Gemma3ImageProcessorPil", 7),
        "Gemma3Processor",
        {"image_seq_length": 4},
        top=dict(mm_tokens_per_image=4, boi_token_index="<start_of_image>", eoi_token_index="<end_of_image>")
        | {"image_token_index": "<image_soft_token>"},
        tokens={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"},
        template=chat_template("<start_of_image>", "<start_of_turn>{role}\n", "<end_of_turn>\n", "model"),
        metaspace=True,
    ),
    "smolvlm": Tiny(
        "SmolVLMConfig",
        lambda hidden, layers: _text(hidden, layers, model_type="llama"),
        _vit(8),
        lambda side: (
            "SmolVLMImageProcessorPil",
            {
                "do_image_splitting": False,
                "size": {"longest_edge": side * 8},
                "max_image_size": {"longest_edge": side * 8},
            },
        ),
        "SmolVLMProcessor",
        {"image_seq_len": 4},
        top={"image_token_id": "<image>", "scale_factor": 2},
        tokens=dict(fake_image_token="<fake_token_around_image>", image_token="<image>")
        | dict(global_image_token="<global-img>", end_of_utterance_token="<end_of_utterance>"),
        template=chat_template("<image>", "<|im_start|>{role}:", "<end_of_utterance>\n"),
    ),
    "llava_onevision": Tiny(
        "LlavaOnevisionConfig",
        _QWEN2,
        _vit(14, 7, model_type="siglip_vision_model"),
        _square("LlavaOnevisionImageProcessorPil", 7, image_grid_pinpoints=_PINPOINTS),
        "LlavaOnevisionProcessor",
        {"num_image_tokens": 4, "vision_feature_select_strategy": "full"},
        top=dict(image_token_index="<image>", video_token_index="<video>", vision_feature_select_strategy="full")
        | {"image_grid_pinpoints": _PINPOINTS},
        tokens={"image_token": "<image>", "video_token": "<video>"},
        template=chat_template("<image>\n"),
    ),
}


PRESETS: dict[str, dict[str, int]] = {
    # 4 image tokens: fast, enough for the procedural scenes' global effects (lighting, harmony)
    "default": {"hidden": 64, "layers": 2, "vision_embed": 32, "vision_depth": 2, "image_side": 4},
    # sees local distortions of real photos (blur, noise, JPEG, pixelation): 112x112 crops at native scale,
    # 8x8 patches -> 16 image tokens; train its ViT (recipe tiny-real-photos)
    "small": {"hidden": 64, "layers": 2, "vision_embed": 64, "vision_depth": 2, "image_side": 8},
}


def _ids(value: Any, tokenizer: Any) -> Any:
    """``value`` with every string naming a token replaced by that token's id (lists element-wise)."""
    if isinstance(value, list):
        return [_ids(v, tokenizer) for v in value]
    return tokenizer.convert_tokens_to_ids(value) if isinstance(value, str) and value.startswith("<") else value


def make_tiny_vlm(
    out_dir: str | Path,
    family: str = "qwen2_vl",
    seed: int = 0,
    *,
    preset: str = "default",
    hidden: int | None = None,
    layers: int | None = None,
    vision_embed: int | None = None,
    vision_depth: int | None = None,
    image_pixels: int | None = None,
) -> Path:
    """Build a tiny random checkpoint of ``family`` (a key of :data:`TINY`) in ``out_dir`` (reused if it already
    holds one) and return it. ``preset``: the sizes of :data:`PRESETS`, which the keyword arguments override one by
    one; ``image_pixels`` bounds a Qwen-VL image processor (default: the preset's patches a side)."""
    import transformers

    if preset not in PRESETS:
        raise ValueError(f"unknown tiny VLM preset {preset!r}; choose one of {', '.join(PRESETS)}")
    if family not in TINY:
        raise ValueError(f"unknown tiny VLM family {family!r}; choose one of {', '.join(TINY)}")
    given = {"hidden": hidden, "layers": layers, "vision_embed": vision_embed, "vision_depth": vision_depth}
    sizes = {**PRESETS[preset], **{k: v for k, v in given.items() if v is not None}}
    out = Path(out_dir)
    if (out / "config.json").exists() and (out / "tokenizer.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    spec = TINY[family]
    named = re.findall(r"<[^<>\s'{}\\]+>", spec.template + json.dumps(spec.top))  # the template's and config's
    tokenizer = make_tokenizer(spec.tokens, specials=tuple(named), template=spec.template, metaspace=spec.metaspace)
    common = {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    }
    text = {**common, **spec.text(sizes["hidden"], sizes["layers"])}
    vision = spec.vision(sizes["hidden"], sizes["vision_embed"], sizes["vision_depth"], sizes["image_side"])
    top = {k: _ids(v, tokenizer) for k, v in spec.top.items()}
    config_class = getattr(transformers, spec.config)
    top.update({k: text[k] for k in ("hidden_size", "vocab_size") if k in config_class.__annotations__})  # Ovis2's
    config = config_class(text_config=text, vision_config=vision, **top)
    torch.manual_seed(seed)
    model = transformers.AutoModelForImageTextToText.from_config(config)
    with torch.no_grad():  # a matrix its init leaves at zero (Gemma 3's projector) would hide the images
        for p in model.parameters():
            if p.dim() > 1 and not p.any():
                p.normal_(0, 0.08)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    ip_name, ip_settings = spec.image_processor(sizes["image_side"])
    if image_pixels is not None:
        ip_settings = {**ip_settings, "min_pixels": image_pixels, "max_pixels": image_pixels}
    getattr(transformers, ip_name)(**ip_settings).save_pretrained(out)
    processor = {"processor_class": spec.processor, **spec.processor_kwargs}
    (out / "processor_config.json").write_text(json.dumps(processor, indent=2))
    (out / "chat_template.jinja").write_text(spec.template)
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
    text = _text(hidden, layers, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    text.update(eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(Qwen2Config(**text))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
