"""Model inputs in two halves: images processed anywhere (DataLoader workers, the GPU), text joined at batch time.

:class:`ImagePreparer` turns an image group into :class:`PreparedImages` (picklable: workers make them while the
model scores); :func:`encode` expands each image placeholder as the family's processor does and pads the batch (left),
in pinned memory where asked. The result equals ``processor(text=..., images=...)`` for every family
(tests/test_families.py).

Example:
    >>> from reward.vlm.inputs import PreparedImages
    >>> import torch
    >>> PreparedImages({"pixel_values": torch.zeros(16, 1176)}, 1).size
    18816
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from PIL import Image

from reward.data.images import check_pixels

logger = logging.getLogger(__name__)


@dataclass
class PreparedImages:
    """One image group after the image processor: its tensors (``pixel_values`` and what else the family's image
    processor makes: patch grids, tile counts, image sizes) for ``n_images`` images."""

    data: dict[str, torch.Tensor]
    n_images: int

    @property
    def size(self) -> int:
        """The pixel values' element count: it grows with the visual tokens (batches group similar sizes)."""
        pixels = self.data.get("pixel_values")
        return 0 if pixels is None else pixels.numel()


@dataclass
class ImagePreparer:
    """Runs a VLM's image processor on image groups; picklable, so DataLoader workers can call it.

    ``dtype``: the vision tower's dtype (the model casts to it anyway; casting here halves the bytes moved in bf16).
    ``device``: run a fast (torchvision) processor on that device (see :func:`device_preprocessing`).
    ``settings``: what the processor passes its image processor beyond the image processor's own settings (e.g.
    InternVL's ``crop_to_patches``, SmolVLM's ``return_row_col_info``: ``VLM`` reads them from its processor).
    """

    image_processor: Any
    dtype: torch.dtype | None = None
    device: torch.device | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    def __call__(self, images: Sequence[Image.Image]) -> PreparedImages:
        return self.many([images])[0]

    def many(self, groups: Sequence[Sequence[Image.Image]]) -> list[PreparedImages]:
        """Every group's images, one processor call per group (groups may be empty: no images)."""
        flat = [img for g in groups for img in g]
        for i, img in enumerate(flat):  # what the processor would refuse, said of the image (commands skip it earlier)
            check_pixels(img.size, None, f"image {i} of the batch")
        kwargs = {**self.settings, "return_tensors": "pt"} | ({"device": self.device} if self.device else {})
        out = []
        for group in groups:
            data = dict(self.image_processor(images=[list(group)], **kwargs)) if group else {}
            if self.dtype is not None:
                data = {
                    k: v.to(self.dtype) if torch.is_tensor(v) and v.is_floating_point() else v for k, v in data.items()
                }
            out.append(PreparedImages(data, len(group)))
        return out


def _cat(parts: list[torch.Tensor], pin: bool) -> torch.Tensor:
    """``parts`` joined along dim 0, zero-padded to the largest on the other dims (tiles or images per row)."""
    shape = [sum(p.shape[0] for p in parts), *(max(p.shape[d] for p in parts) for d in range(1, parts[0].dim()))]
    first = parts[0]
    pin = pin and first.device.type == "cpu" and torch.cuda.is_available()
    out = (torch.zeros if len({p.shape[1:] for p in parts}) > 1 else torch.empty)(
        shape, dtype=first.dtype, device=first.device, pin_memory=pin
    )
    row = 0
    for p in parts:
        out[(slice(row, row + p.shape[0]), *(slice(0, n) for n in p.shape[1:]))] = p
        row += p.shape[0]
    return out


def image_inputs(processor: Any, parts: Sequence[PreparedImages], *, pin: bool = False) -> dict[str, torch.Tensor]:
    """The model's image inputs of ``parts``, in order, in pinned host memory if ``pin`` (what the processor makes
    only for itself, such as SmolVLM's rows and columns, left out)."""
    nonempty = [p for p in parts if p.n_images]
    keys = [k for k in (nonempty[0].data if nonempty else {}) if k in processor.model_input_names]
    if len(nonempty) == 1 and not pin:
        return {k: nonempty[0].data[k] for k in keys}
    return {k: _cat([p.data[k] for p in nonempty], pin) for k in keys}


def token_ids(processor: Any, texts: Sequence[str], groups: Sequence[PreparedImages]) -> list[list[int]]:
    """The token ids of ``texts`` (unpadded), each image placeholder expanded as the processor does; row ``i`` holds
    ``groups[i]``'s images, in order."""
    if len(texts) != len(groups):
        raise ValueError(f"token_ids: {len(texts)} texts but {len(groups)} image groups")
    replacements = [processor.replace_image_token(g.data, i) for g in groups for i in range(g.n_images)]
    expanded, _ = processor.get_text_with_replacements(list(texts), replacements)
    return processor.tokenizer(expanded)["input_ids"]


def pad(processor: Any, ids: Sequence[Sequence[int]], side: str = "left") -> dict[str, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` of ``ids`` padded on ``side``, with each token's modality (text 0, image
    1) where the processor gives it (Qwen-VL's M-RoPE and Gemma 3's image attention read it), under its name."""
    out = dict(processor.tokenizer.pad({"input_ids": list(ids)}, padding_side=side, return_tensors="pt"))
    if getattr(processor, "return_mm_token_type_ids", False):
        name = "mm_token_type_ids" if "mm_token_type_ids" in processor.model_input_names else "token_type_ids"
        out[name] = torch.tensor(processor.create_mm_token_type_ids(out["input_ids"]))
    return out


def encode(processor: Any, texts: Sequence[str], groups: Sequence[PreparedImages], *, pin: bool = False) -> dict:
    """``processor(text=texts, images=..., padding=True, return_tensors="pt")`` from prepared images: row ``i`` of
    ``texts`` holds ``groups[i]``'s images, in order."""
    return {**pad(processor, token_ids(processor, texts, groups)), **image_inputs(processor, groups, pin=pin)}


def to_device(inputs: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Every tensor on ``device``; from pinned host memory the copies do not block the host."""
    return {k: v.to(device, non_blocking=v.is_pinned()) for k, v in inputs.items()}


def device_preprocessing(image_processor: Any, device: torch.device) -> str | None:
    """Why the image processor cannot run on ``device`` (``None``: it can).

    The fast image processors are torch code (the torchvision backend) and take a ``device``; the PIL ones run
    on the host only.
    """
    if device.type != "cuda":
        return f"the model is on {device.type}, not a GPU"
    from transformers.utils import is_torchvision_available

    if not is_torchvision_available():
        return "torchvision is not importable, so the image processor is the PIL one"
    backend = getattr(image_processor, "backend", None) or type(image_processor).__name__
    if "pil" in str(backend).lower():
        return f"the image processor is {type(image_processor).__name__} (PIL backend)"
    return None


def fast_image_processor(image_processor: Any) -> Any | None:
    """The torchvision (fast) image processor with the settings of ``image_processor`` (itself when it is one);
    ``None`` where torchvision is not importable or the class has no torchvision twin."""
    if getattr(image_processor, "backend", None) == "torchvision":
        return image_processor
    from transformers.utils import is_torchvision_available

    if not is_torchvision_available():
        return None
    import transformers

    name = type(image_processor).__name__
    twin = getattr(transformers, name[: -len("Pil")], None) if name.endswith("Pil") else None
    if twin is None or getattr(twin, "backend", None) is None:
        return None
    settings = {k: v for k, v in image_processor.to_dict().items() if k != "image_processor_type"}
    return twin.from_dict(settings)


def as_groups(images: Sequence[Image.Image | PreparedImages]) -> list[Any]:
    """One image group per image, as ``VLM.option_logprobs`` takes them: ``[image]``, or the ``PreparedImages``.

    >>> len(as_groups([Image.new("RGB", (8, 8))])[0])
    1
    """
    return [im if isinstance(im, PreparedImages) else [im] for im in images]
