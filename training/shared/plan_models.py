"""The sizes a plan needs, without loading weights: parameter counts of a VLM (vision tower, aligner, language
model) and of the diffusers generators.

A model's ``config.json`` is read from its folder or the Hugging Face cache and the model is instantiated on the
``meta`` device (no memory, no weights), so every count is exact for that architecture. Offline and without a cached
config, the built-in table below stands in: the architecture values of the supported Qwen-VL checkpoints, copied
from each checkpoint's published ``config.json`` and counted the same way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reward.data.files import read_json_object
from reward.vlm.families import family_of

logger = logging.getLogger(__name__)


def _text(hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int, tied: bool, **extra: Any) -> dict:
    return {
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        **extra,
    }


_Q2_VISION = {
    "depth": 32,
    "embed_dim": 1280,
    "mlp_ratio": 4,
    "num_heads": 16,
    "patch_size": 14,
    "spatial_merge_size": 2,
}
_Q25_VISION = {
    "depth": 32,
    "hidden_size": 1280,
    "intermediate_size": 3420,
    "num_heads": 16,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31],
}
_Q3_SMALL_VISION = {
    "depth": 24,
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_heads": 16,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "deepstack_visual_indexes": [5, 11, 17],
}
_Q3_VISION = {**_Q3_SMALL_VISION, "depth": 27, "hidden_size": 1152, "intermediate_size": 4304}
_Q3_VISION["deepstack_visual_indexes"] = [8, 16, 24]

# architecture values of the published config.json of each checkpoint (token ids and rope details left out: they
# change no parameter count); pixels per visual token: (patch_size x spatial_merge_size)^2
BUILTIN: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2-VL-2B-Instruct": {
        "model_type": "qwen2_vl",
        "text_config": _text(1536, 8960, 28, 12, 2, 151936, True),
        "vision_config": {**_Q2_VISION, "hidden_size": 1536},
    },
    "Qwen/Qwen2-VL-7B-Instruct": {
        "model_type": "qwen2_vl",
        "text_config": _text(3584, 18944, 28, 28, 4, 152064, False),
        "vision_config": {**_Q2_VISION, "hidden_size": 3584},
    },
    "Qwen/Qwen2.5-VL-3B-Instruct": {
        "model_type": "qwen2_5_vl",
        "text_config": _text(2048, 11008, 36, 16, 2, 151936, True),
        "vision_config": {**_Q25_VISION, "out_hidden_size": 2048},
    },
    "Qwen/Qwen2.5-VL-7B-Instruct": {
        "model_type": "qwen2_5_vl",
        "text_config": _text(3584, 18944, 28, 28, 4, 152064, False),
        "vision_config": {**_Q25_VISION, "out_hidden_size": 3584},
    },
    "Qwen/Qwen2.5-VL-32B-Instruct": {
        "model_type": "qwen2_5_vl",
        "text_config": _text(5120, 27648, 64, 40, 8, 152064, False),
        "vision_config": {**_Q25_VISION, "out_hidden_size": 5120},
    },
    "Qwen/Qwen2.5-VL-72B-Instruct": {
        "model_type": "qwen2_5_vl",
        "text_config": _text(8192, 29568, 80, 64, 8, 152064, False),
        "vision_config": {**_Q25_VISION, "out_hidden_size": 8192},
    },
    "Qwen/Qwen3-VL-2B-Instruct": {
        "model_type": "qwen3_vl",
        "text_config": _text(2048, 6144, 28, 16, 8, 151936, True, head_dim=128),
        "vision_config": {**_Q3_SMALL_VISION, "out_hidden_size": 2048},
    },
    "Qwen/Qwen3-VL-4B-Instruct": {
        "model_type": "qwen3_vl",
        "text_config": _text(2560, 9728, 36, 32, 8, 151936, True, head_dim=128),
        "vision_config": {**_Q3_SMALL_VISION, "out_hidden_size": 2560},
    },
    "Qwen/Qwen3-VL-8B-Instruct": {
        "model_type": "qwen3_vl",
        "text_config": _text(4096, 12288, 36, 32, 8, 151936, False, head_dim=128),
        "vision_config": {**_Q3_VISION, "out_hidden_size": 4096},
    },
}

# diffusers pipelines: parameters by component (billions), from the published model cards / configs; a plan counts
# them in the pipeline's dtype on every process that holds a generator
GENERATOR_PARAMS_B: dict[str, dict[str, float]] = {
    "sd15-inpaint": {"unet": 0.86, "text_encoder": 0.12, "vae": 0.08},
    "sdxl-inpaint": {"unet": 2.57, "text_encoders": 0.82, "vae": 0.08},
    "flux-fill": {"transformer": 11.9, "t5": 4.76, "clip": 0.12, "vae": 0.08},
    "sd3": {"transformer": 2.5, "t5": 4.76, "clip_l": 0.12, "clip_g": 0.69, "vae": 0.08},  # SD3.5 Medium
    "procedural": {},
}


@dataclass(frozen=True)
class ModelShape:
    """What a plan needs of a VLM (or a text LM: no vision tower)."""

    name: str
    source: str  # where the numbers come from: the config.json read, or the built-in table
    llm_params: int  # language model with embeddings and LM head
    vision_params: int  # vision tower without the aligner
    aligner_params: int  # the merger(s) between the two
    hidden: int
    layers: int
    vocab: int
    intermediate: int
    vision_hidden: int = 0
    vision_depth: int = 0
    pixels_per_token: int = 28 * 28  # a visual token covers (patch x merge)^2 pixels
    image_tokens: int = 0  # visual tokens of an image (or tile) at the family's fixed resolution; 0: pixels decide
    linear_shapes: tuple[tuple[str, int, int], ...] = ()  # one decoder layer's linear modules: (name, in, out)
    largest_layer: int = 0  # the parameters of the largest module's own tensors (ZeRO-3 gathers it whole)

    @property
    def total(self) -> int:
        return self.llm_params + self.vision_params + self.aligner_params


_RESAVE = "the model folder is damaged: download or save it again (save_pretrained)"


def _config_dict(path: str) -> tuple[dict[str, Any], str] | None:
    """The config.json of a model folder, or of a hub id in the local cache; None when neither has one."""
    local = Path(path).expanduser()
    if local.is_dir() and (local / "config.json").is_file():
        return read_json_object(local / "config.json", _RESAVE), f"{local / 'config.json'}"
    if local.exists() or path.count("/") != 1:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(path, "config.json")
    except Exception:  # noqa: BLE001 - an id the cache cannot name: not cached
        return None
    if isinstance(cached, str) and Path(cached).is_file():
        return read_json_object(cached, _RESAVE), f"{cached} (Hugging Face cache)"
    return None


def model_shape(path: str) -> ModelShape:
    """The shape of the model at ``path`` (a folder, a cached hub id, or a name of the built-in table).

    Raises ``KeyError`` naming the known names when none of the three has it.
    """
    from reward.vlm.loading import adapter_base

    local = Path(path).expanduser()
    if local.is_dir() and not (local / "config.json").is_file():
        path = adapter_base(local) or path  # a LoRA adapter folder (a stage-1 output): the shape of its base
    found = _config_dict(path)
    if found is None:
        key = next((k for k in BUILTIN if k.lower() == path.lower() or k.split("/")[-1].lower() == path.lower()), None)
        if key is None:
            raise KeyError(path)
        found = (BUILTIN[key], f"built-in table ({key}: its published config.json)")
    config, source = found
    return _count(path, config, source)


def _side(size: int | list[int]) -> int:
    """One side of a square size given as a number or as [height, width] (InternVL's)."""
    return size[0] if isinstance(size, list | tuple) else size


def _count(name: str, config: dict[str, Any], source: str) -> ModelShape:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    kind = config["model_type"]
    cfg = AutoConfig.for_model(kind, **{k: v for k, v in config.items() if k != "model_type"})
    vlm = hasattr(cfg, "vision_config")
    with torch.device("meta"):
        auto = AutoModelForImageTextToText if vlm else AutoModelForCausalLM
        model = auto.from_config(cfg)
    family = family_of(kind)
    vision = aligner = llm = 0
    for pname, p in model.named_parameters():
        if family.aligner in pname:
            aligner += p.numel()
        elif f".{family.vision}." in f".{pname}":
            vision += p.numel()
        else:
            llm += p.numel()
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    text = cfg.text_config if vlm else cfg
    layer = next(m for n, m in model.named_modules() if n.endswith("layers.0") and f".{family.vision}." not in f".{n}")
    linears = tuple(
        (n.split(".")[-1], m.in_features, m.out_features)
        for n, m in layer.named_modules()
        if isinstance(m, torch.nn.Linear)
    )
    vc = getattr(cfg, "vision_config", None)
    patch = _side(getattr(vc, "patch_size", 14)) * getattr(vc, "spatial_merge_size", 2) if vc is not None else 28
    return ModelShape(
        name=name,
        source=source,
        llm_params=llm,
        vision_params=vision,
        aligner_params=aligner,
        hidden=text.hidden_size,
        layers=text.num_hidden_layers,
        vocab=text.vocab_size,
        intermediate=text.intermediate_size,
        vision_hidden=int(getattr(vc, "embed_dim", 0) or getattr(vc, "hidden_size", 0)),
        vision_depth=int(getattr(vc, "depth", 0) or getattr(vc, "num_hidden_layers", 0)),
        pixels_per_token=patch * patch,
        image_tokens=family.tokens(cfg) if vlm and family.tokens else 0,
        linear_shapes=linears,
        largest_layer=int(largest),
    )
