"""How a VLM checkpoint is loaded: one small set of knobs that every reward config and the SFT config carry.

The keys sit flat in a reward's config (``reward.device_map=auto reward.max_pixels=401408``) and in
``configs/sft.yaml``'s ``model:`` section (settings that extend :class:`ModelLoading`); :func:`load_vlm` takes such
settings, or the plain :class:`ModelLoading` that :func:`loading_of` takes out of them.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reward.core.config import FRACTION, RETRIES
from reward.core.errors import MissingInputError, UserError
from reward.data.files import read_json_object
from reward.vlm.families import Family, family_of
from reward.vlm.hub import folder_problem

if TYPE_CHECKING:  # torch and the model are imported when a model loads: settings are read before
    import torch

    from reward.vlm.model import VLM

logger = logging.getLogger(__name__)

ATTN_IMPLEMENTATIONS = ("sdpa", "flash_attention_2", "flash_attention_3", "eager")
BACKENDS = ("local", "openai")  # a reward's backend=: the model in this process, or OpenAI-compatible servers


@dataclass
class ModelLoading:
    """Loading knobs of a VLM checkpoint (every field has a default: the checkpoint's own behaviour)."""

    dtype: str = field(default="auto", metadata={"help": "auto: bf16 on a GPU that supports it, fp32 elsewhere"})
    device: str | None = field(
        default=None, metadata={"help": "null: cuda if available; ignored when device_map is set"}
    )
    device_map: Any = field(
        default=None, metadata={"help": '"auto": spread a model larger than one GPU over all GPUs (accelerate)'}
    )
    attn_implementation: str | None = field(
        default="sdpa", metadata={"help": "sdpa, flash_attention_2 (pip install flash-attn), eager; null: default"}
    )
    min_pixels: int | None = field(
        default=None,
        metadata={
            "help": "processor: images smaller than this are upscaled (null: the checkpoint's)",
            "range": (1, None),
        },
    )
    max_pixels: int | None = field(
        default=None,
        metadata={
            "help": "processor: images larger are downscaled (Qwen-VL: visual tokens = pixels / 28^2; InternVL, "
            "Ovis2: that many pixels of tiles)",
            "range": (1, None),
        },
    )

    def __post_init__(self) -> None:
        problems = []  # the pixel counts' type and range are the fields' (reward.core.config.parse)
        if self.attn_implementation is not None and self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            problems.append(
                f"attn_implementation={self.attn_implementation!r}: use one of {', '.join(ATTN_IMPLEMENTATIONS)}"
            )
        if self.min_pixels and self.max_pixels and self.min_pixels > self.max_pixels:
            problems.append(f"min_pixels={self.min_pixels} is above max_pixels={self.max_pixels}")
        if self.device_map is not None and self.device not in (None, "auto"):
            problems.append(f"device={self.device!r} and device_map={self.device_map!r}: set only one of them")
        if problems:
            raise ValueError("invalid model loading settings:\n  - " + "\n  - ".join(problems))

    def model_kwargs(self, dtype: torch.dtype) -> dict[str, Any]:
        """The keywords of ``from_pretrained`` for the model: ``dtype``, attention implementation, device map."""
        kwargs: dict[str, Any] = {"dtype": dtype}
        if self.attn_implementation:
            kwargs["attn_implementation"] = self.attn_implementation
        if self.device_map is not None:
            kwargs["device_map"] = self.device_map
        return kwargs


@dataclass
class ServerConfig:
    base_urls: list[str] = field(
        default_factory=list, metadata={"help": "e.g. [http://gpu7:8000/v1, http://gpu8:8000/v1]"}
    )
    base_url: str | None = field(default=None, metadata={"help": "one server (the same as base_urls=[URL])"})
    model: str | None = field(default=None, metadata={"help": "the served model name; null: the servers' only model"})
    api_key_env: str = field(
        default="OPENAI_API_KEY", metadata={"help": 'environment variable holding the key ("EMPTY" if unset)'}
    )
    top_logprobs: int = field(  # up to a whole vocabulary (a check of served vs in-process scores)
        default=20,
        metadata={
            "help": "answer tokens listed with their log-probs (vLLM: --max-logprobs)",
            "range": (1, 10**6),
        },
    )
    max_missing_mass: float = field(
        default=0.01,
        metadata={"help": "absent options taken as 0 if they could hold at most this share", "range": FRACTION},
    )
    timeout: float = field(default=60.0, metadata={"help": "seconds per request", "range": (0, None, True)})
    max_retries: int = field(
        default=2, metadata={"help": "the openai client's retries on each server", "range": RETRIES}
    )
    concurrency: int = field(
        default=8, metadata={"help": "requests in flight at most, over all servers", "range": (1, 4096)}
    )
    tokenizer: str | None = field(
        default=None,
        metadata={"help": "a local tokenizer folder to check option words are one token (default: the model's)"},
    )
    chat_template_kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "e.g. {enable_thinking: false} (Qwen3-VL)"}
    )

    @property
    def urls(self) -> list[str]:
        return list(dict.fromkeys([*([self.base_url] if self.base_url else []), *self.base_urls]))


def loading_of(settings: Any) -> ModelLoading:
    """The :class:`ModelLoading` part of settings that extend it (a reward's config, a model section).

    >>> loading_of(ModelLoading(dtype="float32")).dtype
    'float32'
    """
    return ModelLoading(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(ModelLoading)})


def resolve_device(device: str | None = None) -> torch.device:
    import torch

    if device and device != "auto":
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_dtype(dtype: str | torch.dtype = "auto", device: torch.device | None = None) -> torch.dtype:
    """``auto``: bfloat16 on a GPU that supports it, float32 elsewhere."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        dev = device or resolve_device()
        if dev.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    name = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(dtype, dtype)
    if name not in ("bfloat16", "float16", "float32"):
        raise ValueError(f"unknown dtype {dtype!r}; use auto, bfloat16, float16 or float32")
    return getattr(torch, name)


_RESAVE = "the model folder is damaged: download or save it again (save_pretrained)"


def load_processor(path: str | Path, *, min_pixels: int | None = None, max_pixels: int | None = None) -> Any:
    """The checkpoint's processor, also on machines without torchvision (no video processor there).

    ``min_pixels``/``max_pixels`` bound the pixels an image is read at, as its family reads them
    (:data:`reward.vlm.families.FAMILIES`: resized to that area, e.g. pixels / 28^2 visual tokens for Qwen2.5-VL, or
    cut in that many pixels' worth of tiles); ``None`` keeps the checkpoint's.
    """
    from transformers import AutoConfig, AutoProcessor
    from transformers.utils import is_torchvision_available

    base = _processor_class(path)
    if is_torchvision_available() or "video_processor" not in base.get_attributes():
        processor = AutoProcessor.from_pretrained(path)
    else:
        processor = _processor_without_video(base, path)
    if min_pixels or max_pixels:
        family = family_of(AutoConfig.from_pretrained(path).model_type)
        _set_budget(processor.image_processor, family, min_pixels, max_pixels, path)
    processor.tokenizer.padding_side = "left"
    return processor


def _set_budget(image_processor: Any, family: Family, low: int | None, high: int | None, path: str | Path) -> None:
    """Bound the pixels an image is read at, as :attr:`Family.pixels` says for ``family``."""
    size = image_processor.size
    if family.pixels == "area":  # Qwen-VL's smart resize reads the area bounds from the size's edges
        low = low * family.frames if low else size.shortest_edge
        high = high * family.frames if high else size.longest_edge
        image_processor.size = dataclasses.replace(size, shortest_edge=low, longest_edge=high)
    elif family.pixels == "tiles":
        tile = size.height * size.width
        image_processor.crop_to_patches = True
        image_processor.min_patches = max(1, (low or tile) // tile)
        image_processor.max_patches = max(1, (high or tile * image_processor.max_patches) // tile)
    else:
        logger.warning(
            "%s: %s reads every image at one resolution; min_pixels/max_pixels change nothing", path, family.label
        )


THINKING_OFF = "{%- set enable_thinking = false -%}"


def thinking_off(processor: Any) -> bool:
    """Make ``processor``'s chat template render with thinking switched off, where it has that switch
    (Qwen3-VL thinking templates); returns whether it had. Used for training, so that prompts are rendered as
    scoring renders them (``enable_thinking=False``)."""
    changed = False
    for owner in (processor, getattr(processor, "tokenizer", None)):
        template = getattr(owner, "chat_template", None)
        if isinstance(template, str) and "enable_thinking" in template and not template.startswith(THINKING_OFF):
            owner.chat_template = THINKING_OFF + template
            changed = True
    return changed


def _processor_class(path: str | Path) -> type:
    """The checkpoint's processor class: ``processor_config.json``'s, else its model type's."""
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    proc_cfg = Path(path) / "processor_config.json"
    name = read_json_object(proc_cfg, _RESAVE).get("processor_class") if proc_cfg.is_file() else None
    name = name or PROCESSOR_MAPPING_NAMES.get(AutoConfig.from_pretrained(path).model_type)
    if name is None or not hasattr(transformers, name):
        raise ValueError(f"{path}: no processor is known for this checkpoint ({name or 'no processor_class'})")
    return getattr(transformers, name)


def _processor_without_video(base: type, path: str | Path) -> Any:
    """``base`` without its video processor (it needs torchvision), with the settings of ``processor_config.json``."""
    import inspect

    from transformers import AutoImageProcessor, AutoTokenizer, ProcessorMixin

    class _NoVideoProcessor(base):  # type: ignore[misc, valid-type]
        apply_chat_template = ProcessorMixin.apply_chat_template  # a family's own only adds video settings (SmolVLM)

        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            super().__init__(image_processor, tokenizer, video_processor=None, chat_template=chat_template, **kwargs)

    # saved under the real class's name, with its settings (save_pretrained reads the signature), so that a
    # checkpoint written here loads as that class where torchvision exists
    _NoVideoProcessor.__name__ = _NoVideoProcessor.__qualname__ = base.__name__
    own = inspect.signature(base.__init__)
    _NoVideoProcessor.__init__.__signature__ = own.replace(  # type: ignore[attr-defined]
        parameters=[p for name, p in own.parameters.items() if name != "video_processor"]
    )
    proc_cfg = Path(path) / "processor_config.json"
    saved = read_json_object(proc_cfg, _RESAVE) if proc_cfg.is_file() else {}
    settings = {
        k: v for k, v in saved.items() if k in own.parameters and k not in [*base.get_attributes(), "chat_template"]
    }
    tokenizer = AutoTokenizer.from_pretrained(path)
    image_processor = AutoImageProcessor.from_pretrained(path, backend="pil")
    return _NoVideoProcessor(image_processor, tokenizer, chat_template=tokenizer.chat_template, **settings)


def load_vlm(
    path: str | Path,
    loading: ModelLoading | None = None,
    *,
    batch_size: int = 16,
    adapter: str | Path | None = None,
    merge_adapter: bool = True,
    key: str = "model",
    **overrides: Any,
) -> VLM:
    """Load a Hugging Face VLM checkpoint of any family of :data:`reward.vlm.families.FAMILIES` for scoring.

    ``loading`` holds the knobs (dtype, device or device_map, attn_implementation, the processor's min/max
    pixels): a :class:`ModelLoading`, or settings that extend it (a reward's config); any of its fields may also be
    given as a keyword (``load_vlm(p, dtype="float32")``).
    ``adapter``: a peft (LoRA) adapter directory trained on ``path``, loaded in fp32 and merged into the weights in
    fp32 (rounded once to the model's dtype: :func:`merge_lora`); ``merge_adapter=False`` keeps it beside the
    weights, unmerged, computing exactly as in training (slower: two extra matmuls per adapted layer). ``key``: the
    setting that named ``path``, in the one-line refusal of a folder holding no usable model
    (:func:`reward.vlm.hub.folder_problem`).
    """

    from transformers import AutoModelForImageTextToText

    from reward.vlm.model import VLM

    loading = dataclasses.replace(loading or ModelLoading(), **overrides)
    if not Path(path).exists() and not str(path).count("/") == 1:
        raise MissingInputError(f"model path {path} does not exist; pass a checkpoint directory (model=...)")
    for folder in (Path(path), Path(adapter or path)):  # a text-only model, no weights, a truncated file: one line
        if folder.is_dir() and (problem := folder_problem(folder, key)):
            raise UserError(problem)
    for name in ("config.json", "preprocessor_config.json", "processor_config.json"):  # one line, not a traceback
        if (Path(path) / name).is_file():
            read_json_object(Path(path) / name, _RESAVE)
    dev = resolve_device(loading.device)
    model = AutoModelForImageTextToText.from_pretrained(
        path, **loading.model_kwargs(resolve_dtype(loading.dtype, dev))
    )
    if adapter is not None:
        model = attach_adapter(model, adapter, merge=merge_adapter)
    if loading.device_map is None:
        model = model.to(dev)
    processor = load_processor(path, min_pixels=loading.min_pixels, max_pixels=loading.max_pixels)
    return VLM(model.eval(), processor, batch_size=batch_size)


def attach_adapter(model: Any, adapter: str | Path, *, merge: bool = True) -> Any:
    """``model`` with the peft (LoRA) adapter in ``adapter`` loaded in fp32: merged into the weights in fp32 and
    rounded once (:func:`merge_lora`), or with ``merge=False`` kept beside them, unmerged (a plain model's API)."""
    from peft import PeftModel

    peft_model = PeftModel.from_pretrained(model, str(adapter), autocast_adapter_dtype=True)  # fp32 adapter
    if merge:
        merge_lora(peft_model)
        return peft_model.unload()
    return peft_model.get_base_model()  # the model with its LoRA layers in place


def adapter_base(path: str | Path) -> str | None:
    """The base model of a peft adapter folder (``adapter_config.json``'s ``base_model_name_or_path``), or ``None``
    when ``path`` is not an adapter folder (e.g. ``trl sft --use_peft``'s output is one).

    >>> adapter_base("/no/such/folder") is None
    True
    """
    config = Path(path) / "adapter_config.json"
    if not config.is_file():
        return None
    base = read_json_object(config, "re-save the adapter with peft's save_pretrained").get("base_model_name_or_path")
    if not base:
        raise MissingInputError(f"{config}: no base_model_name_or_path; the adapter cannot be loaded without its base")
    return str(base)


def _delta_fp32(module: Any, base: Any, adapter: str) -> torch.Tensor:
    """B A * scaling in fp32 from the adapter's own weights (any dtype); other layer kinds through peft."""
    import torch

    if isinstance(base, torch.nn.Linear):
        delta = module.lora_B[adapter].weight.float() @ module.lora_A[adapter].weight.float()
        delta = delta.T if module.fan_in_fan_out else delta
        return delta * module.scaling[adapter]
    return module.get_delta_weight(adapter).float()


def merge_lora(peft_model: Any) -> int:
    """Merge every LoRA adapter of ``peft_model`` into its base weights: W + B A s computed in fp32 and rounded once
    to W's dtype, whatever peft's defaults or the adapter file's dtype (a bf16 delta added in bf16 would round twice);
    a non-finite result (fp16 overflow) is refused. Returns the number of merged layers; the model keeps its LoRA
    modules until ``peft_model.unload()``.
    """
    import torch
    from peft.tuners.lora import LoraLayer

    merged = 0
    for name, module in peft_model.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        adapters = [a for a in module.active_adapters if a in module.lora_A]
        if any(module.use_dora.get(a) for a in adapters):
            raise ValueError(f"{name}: a DoRA adapter; load it with merge_adapter=false")
        base = module.get_base_layer()
        weight = base.weight.data.float()
        for a in adapters:
            weight = weight + _delta_fp32(module, base, a)
        if not torch.isfinite(weight).all():
            raise ValueError(f"{name}: merging the adapter overflows {base.weight.dtype}; load it with a wider dtype")
        base.weight.data = weight.to(base.weight.dtype)
        merged += 1
    return merged
