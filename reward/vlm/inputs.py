"""Model inputs in two halves: images processed anywhere (DataLoader workers, the GPU), text joined at batch time.

The image processor (resize, normalise, cut into patches) is the costly host step of scoring. Here it runs apart
from the text: :class:`ImagePreparer` turns an image group into :class:`PreparedImages` (pixel values in the vision
tower's dtype and the patch grid), a small picklable object that DataLoader workers can make while the model scores
the previous batch. :func:`encode` then expands each image placeholder to the image's token count (the processor's
own rule), tokenizes the batch with left padding and concatenates the pixel values straight into pinned memory, so
that :func:`to_device` can copy them without blocking. The result equals ``processor(text=..., images=...)``.

Where torchvision is importable the processor is the fast (torch) one and can run on the GPU itself
(:func:`device_preprocessing`); where it is not (this CPU machine), the PIL one runs on the host, as before.

Example:
    >>> from reward.vlm.inputs import PreparedImages
    >>> import torch
    >>> PreparedImages(torch.zeros(16, 1176), torch.tensor([[1, 4, 4]]), merge=2).n_tokens
    4
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image

from reward.data.images import check_pixels
from reward.vlm.profile import section

logger = logging.getLogger(__name__)


@dataclass
class PreparedImages:
    """One image group after the image processor: ``pixel_values`` [patches, patch dim] and ``grid_thw`` [images, 3]
    (patches = the sum of each row's product); ``merge`` is the spatial merge size (tokens = patches / merge^2)."""

    pixel_values: torch.Tensor
    grid_thw: torch.Tensor
    merge: int = 2

    @property
    def n_images(self) -> int:
        return int(self.grid_thw.shape[0])

    @property
    def n_tokens(self) -> int:
        """Visual tokens the group adds to a sequence."""
        return int(self.grid_thw.prod(-1).sum()) // self.merge**2

    def split(self) -> list[PreparedImages]:
        """One :class:`PreparedImages` per image."""
        sizes = self.grid_thw.prod(-1).tolist()
        parts = torch.split(self.pixel_values, sizes)
        return [PreparedImages(p, g[None], self.merge) for p, g in zip(parts, self.grid_thw, strict=True)]


class ImagePreparer:
    """Runs a VLM's image processor on image groups; picklable, so DataLoader workers can call it.

    ``dtype``: the vision tower's dtype (the model casts to it anyway; casting here halves the bytes moved in bf16).
    ``device``: run a fast (torchvision) processor on that device (see :func:`device_preprocessing`).
    """

    def __init__(self, image_processor: Any, dtype: torch.dtype | None = None, device: torch.device | None = None):
        self.image_processor = image_processor
        self.dtype = dtype
        self.device = device
        self.merge = int(getattr(image_processor, "merge_size", 1) or 1)

    def __call__(self, images: Sequence[Image.Image]) -> PreparedImages:
        return self.many([images])[0]

    def many(self, groups: Sequence[Sequence[Image.Image]]) -> list[PreparedImages]:
        """Every group's images in one processor call, split back per group (groups may be empty: no images)."""
        flat = [img for g in groups for img in g]
        if not flat:
            return [self._empty() for _ in groups]
        for i, img in enumerate(flat):  # what the processor would refuse, said of the image (commands skip it earlier)
            check_pixels(img.size, None, f"image {i} of the batch")
        kwargs = {"device": self.device} if self.device is not None else {}
        with section("image processor"):
            out = self.image_processor(images=flat, return_tensors="pt", **kwargs)
            pixel_values, grid = out["pixel_values"], out["image_grid_thw"]
            if self.dtype is not None:
                pixel_values = pixel_values.to(self.dtype)
        per_image = PreparedImages(pixel_values, grid, self.merge).split()
        result, i = [], 0
        for g in groups:
            part = per_image[i : i + len(g)]
            i += len(g)
            result.append(concat(part) if part else self._empty())  # one image: a view, no copy
        return result

    def _empty(self) -> PreparedImages:
        return PreparedImages(
            torch.zeros(0, 0, dtype=self.dtype or torch.float32), torch.zeros(0, 3, dtype=torch.long), self.merge
        )


def concat(parts: Sequence[PreparedImages], *, pin: bool = False) -> PreparedImages:
    """The images of ``parts`` in order as one group; ``pin``: the pixel values land in pinned host memory."""
    nonempty = [p for p in parts if p.n_images]
    merge = parts[0].merge if parts else 1
    if not nonempty:
        return PreparedImages(torch.zeros(0, 0), torch.zeros(0, 3, dtype=torch.long), merge)
    pin = pin and nonempty[0].pixel_values.device.type == "cpu" and torch.cuda.is_available()
    if len(nonempty) == 1 and not pin:
        return nonempty[0]
    first = nonempty[0].pixel_values
    rows = sum(p.pixel_values.shape[0] for p in nonempty)
    buf = torch.empty((rows, first.shape[1]), dtype=first.dtype, device=first.device, pin_memory=pin)
    torch.cat([p.pixel_values for p in nonempty], out=buf)
    return PreparedImages(buf, torch.cat([p.grid_thw for p in nonempty]), merge)


def encode(processor: Any, texts: Sequence[str], groups: Sequence[PreparedImages], *, pin: bool = False) -> dict:
    """``processor(text=texts, images=..., padding=True, return_tensors="pt")`` from prepared images: row ``i`` of
    ``texts`` holds ``groups[i]``'s images, in order."""
    if len(texts) != len(groups):
        raise ValueError(f"encode: {len(texts)} texts but {len(groups)} image groups")
    images = concat(groups, pin=pin)
    replacements = []
    if images.n_images:
        grid = {"image_grid_thw": images.grid_thw}
        replacements = [processor.replace_image_token(grid, i) for i in range(images.n_images)]
    expanded, _ = processor.get_text_with_replacements(list(texts), replacements)
    enc = processor.tokenizer(expanded, padding=True, return_tensors="pt")
    out: dict[str, torch.Tensor] = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    if "mm_token_type_ids" in getattr(processor, "model_input_names", []):
        out["mm_token_type_ids"] = torch.tensor(processor.create_mm_token_type_ids(enc["input_ids"]))
    if images.n_images:
        out["pixel_values"] = images.pixel_values
        out["image_grid_thw"] = images.grid_thw
    return out


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
