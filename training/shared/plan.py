"""``plan=true``: what a training run will cost, printed before any weight is loaded (docs/recipes.md).

Memory per GPU, in parts: **weights** in the load dtype; **gradients** of the trainable parameters (under DeepSpeed
with bf16 weights also an fp32 copy: 4 bytes each, 2 under ZeRO-3); **optimizer**: AdamW's two moments in the
weights' dtype, or under DeepSpeed fp32 moments plus an fp32 master copy of bf16 weights (12 bytes); **activations**
about ``34 x tokens x hidden`` bytes per sample and layer (Korthikanti et al., §4.1, without the attention scores
fused attention never stores), ``2 x`` with activation checkpointing, plus the fp32 logits and a trained vision
tower's own. ZeRO-1/2/3 shard optimizer, gradients, weights over all processes, stage 3 gathering the largest layer
whole: DeepSpeed's own estimators' numbers when every parameter is trained (tests/test_plan_deepspeed.py). The one
measurement (LoRA SFT of the Qwen2.5-VL-7B config at batch 4: 17.2 GiB on an H200) is checked in the tests; the step
time is scaled from it (:data:`MEASURED_S`) by samples x tokens x parameters, x4/3 for full fine-tuning: rough.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reward.core.errors import UserError
from training.shared.launch import launch_processes

if TYPE_CHECKING:
    from training.shared.plan_models import ModelShape

logger = logging.getLogger(__name__)

GIB = 2**30
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 34  # per decoder layer, bf16, fused attention (see the module docstring)
CHECKPOINTED_BYTES_PER_TOKEN_HIDDEN = 2  # the layer's input only; one layer is recomputed at a time
ASSUMED_GPU = " (assumed: one H200; plan_for.gpu_memory_gib=GIB sets yours)"
ASSUMED_IMAGE = (1024, 768)  # KonIQ-10k's size, where the data's images cannot be read
SAMPLED = 32  # images of a run's data whose size a plan reads
DEFAULT_GPU_MEMORY_GIB = 139.0  # one H200, as torch reports it (141 GB)


# the one step time measured on a GPU (:func:`estimate_step_s` scales from it): LoRA SFT of a random Qwen2.5-VL-7B
# (8.29e9 parameters) at 4 samples of 285 tokens per device and step on one H200: 1.01 s, peak 17.2 GiB
MEASURED_S, MEASURED_PARAMS, MEASURED_SAMPLES, MEASURED_TOKENS = 1.01, 8.29e9, 4, 285
MEASURED_WHAT = "LoRA SFT of a random Qwen2.5-VL-7B at batch 4"


@dataclass
class PlanSettings:
    """What ``plan=true`` plans for when the launch itself cannot say (a plan runs in one process, before any
    ``accelerate launch``): null values are read from this launch's environment."""

    processes: int | None = field(
        default=None,
        metadata={
            "help": "GPUs (processes) per machine; null: this launch's (WORLD_SIZE / machines), else 1",
            "range": (1, 4096),
        },
    )
    machines: int = field(default=1, metadata={"help": "machines (accelerate --num_machines)", "range": (1, 100_000)})
    zero_stage: int | None = field(
        default=None,
        metadata={"help": "DeepSpeed ZeRO stage 0-3; null: this launch's accelerate config, else 0", "range": (0, 3)},
    )
    gpu_memory_gib: float = field(
        default=DEFAULT_GPU_MEMORY_GIB,
        metadata={"help": "memory of one GPU (H200: 139 GiB as torch reports it)", "range": (0, 100_000, True)},
    )
    model: str | None = field(
        default=None,
        metadata={"help": "plan with this model (a built-in name) when model.path / policy.path is not here yet"},
    )
    reward_model: str | None = field(
        default=None, metadata={"help": "GRPO: the same for the reward's model (e.g. a scorer still to be trained)"}
    )
    rows: int | None = field(
        default=None,
        metadata={
            "help": "SFT: training rows to plan epochs with when data.train cannot be read here",
            "range": (1, 10**10),
        },
    )


def planned_processes(p: PlanSettings) -> int:
    """Processes of the planned launch, all machines together: ``p.processes`` per machine, else this launch's."""
    return (p.processes or max(1, launch_processes() // max(1, p.machines))) * p.machines


@dataclass
class Launch:
    """How many processes, how the batch is made, what precision and ZeRO stage."""

    per_device: int
    accumulation: int
    processes_per_machine: int = 1
    machines: int = 1
    zero_stage: int = 0  # 0: no DeepSpeed
    bf16: bool = True
    activation_checkpointing: bool = False
    gpu_memory_gib: float = DEFAULT_GPU_MEMORY_GIB

    @property
    def processes(self) -> int:
        return self.processes_per_machine * self.machines

    @property
    def effective_batch(self) -> int:
        return self.per_device * self.accumulation * self.processes


@dataclass
class Part:
    """One model's memory on one device (bytes)."""

    name: str
    weights: float
    gradients: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations


@dataclass
class Plan:
    title: str
    lines: list[str] = field(default_factory=list)  # batch, steps, tokens: the facts before the memory table
    parts: list[Part] = field(default_factory=list)
    launch: Launch | None = None
    step_s: float | None = None
    step_basis: str = ""
    advice: list[str] = field(default_factory=list)

    @property
    def total_gib(self) -> float:
        return sum(p.total for p in self.parts) / GIB

    @property
    def fits(self) -> bool:
        return self.launch is None or self.total_gib <= self.launch.gpu_memory_gib

    def as_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "facts": self.lines,
            "memory_gib": {p.name: round(p.total / GIB, 2) for p in self.parts},
            "total_gib": round(self.total_gib, 2),
            "fits": self.fits,
            "step_s": None if self.step_s is None else round(self.step_s, 3),
            "advice": self.advice,
        }


def shape_or_fail(path: str, key: str, stand_in: str | None = None) -> Any:
    """The shape of ``path``, else of ``stand_in`` (``plan_for.model``: the model a missing output will be)."""
    from training.shared.plan_models import BUILTIN, model_shape  # a run imports this module for its settings only

    try:
        return model_shape(path)
    except KeyError:
        if stand_in:
            return shape_or_fail(stand_in, "plan_for.model")
        names = ", ".join(BUILTIN)
        raise UserError(
            f"{key}={path}: plan=true needs the model's config.json (a folder holding it, or a hub id in the local "
            f"Hugging Face cache) or a name of the built-in table ({names})"
        ) from None


def visual_tokens(
    max_pixels: int | None, shape: ModelShape, image: tuple[int, int] | None = None, why: str = ""
) -> tuple[int, str]:
    """Visual tokens of one ``image`` (width, height, read from ``why``; none read: an assumed 1024x768 one) of
    ``shape``'s family, capped by the pixel budget ``max_pixels``, or at its fixed resolution, and why.

    >>> from training.shared.plan_models import ModelShape
    >>> shape = ModelShape("m", "", 0, 0, 0, 1, 1, 1, 1)
    >>> visual_tokens(None, shape), visual_tokens(784, shape, (56, 56), "data")
    ((1003, 'assumed: a 1024x768 image'), (1, 'data: 56x56, model.max_pixels=784'))
    """
    if shape.image_tokens:
        return shape.image_tokens, "an image (one tile) at the resolution of its config"
    assumed = not image
    width, height = image or ASSUMED_IMAGE
    pixels = min(width * height, max_pixels or width * height)
    cap = f", model.max_pixels={max_pixels}" if pixels < width * height else ""
    said = f"assumed: a {width}x{height} image{cap}" + (f"; {why}" if why else "") if assumed else ""
    return max(1, pixels // shape.pixels_per_token), said or f"{why}: {width}x{height}{cap}"


def largest_image(images: Sequence[Any], what: str) -> tuple[tuple[int, int] | None, str]:
    """The largest of up to :data:`SAMPLED` of ``images`` (paths or datasets cells, headers read only; one not here
    is left out) and where its size is from, ``(None, ...)`` where none could be read."""
    sizes = []
    for image in list(images)[:: max(1, len(images) // SAMPLED)][:SAMPLED]:
        with contextlib.suppress(OSError, ValueError):  # an image not here (yet) is left out
            sizes.append(_size(image))
    if not sizes:
        return None, f"{what}'s images not read here; model.max_pixels=N bounds them"
    return max(sizes, key=lambda s: s[0] * s[1]), f"the largest of {len(sizes)} images of {what} read"


def _size(image: Any) -> tuple[int, int]:
    """An image's width and height from its header (a path, or a datasets cell: PIL image, bytes or path)."""
    from PIL import Image

    cell = getattr(image, "cell", image)
    if isinstance(cell, Image.Image):
        return cell.size
    if isinstance(cell, dict):
        cell = io.BytesIO(cell["bytes"]) if cell.get("bytes") else cell["path"]
    with Image.open(cell) as im:
        return im.size


def trainable_params(
    shape: ModelShape, *, lora_r: int | None, lora_targets: list[str], vision: bool, aligner: bool
) -> int:
    """Parameters the optimizer updates: LoRA's ``r x (in + out)`` per targeted linear of every decoder layer, or the
    language model plus whatever of the vision side is not frozen."""
    if lora_r is not None:
        per_layer = sum(lora_r * (i + o) for name, i, o in shape.linear_shapes if name in lora_targets)
        return per_layer * shape.layers
    return shape.llm_params + (shape.vision_params if vision else 0) + (shape.aligner_params if aligner else 0)


def model_part(
    name: str,
    shape: ModelShape,
    launch: Launch,
    *,
    weight_bytes: int,
    trainable: int,
    tokens: int,
    visual_tokens: int,
    train_vision: bool,
    trains_largest_layer: bool = False,
) -> Part:
    """Memory of a trained model on one device under ``launch`` (see the module docstring for each term);
    ``trains_largest_layer``: the largest layer is trained (full fine-tuning), so ZeRO-3 gathers its gradient too."""
    weights, grads, optimizer = model_states(
        shape, launch, weight_bytes=weight_bytes, trainable=trainable, trains_largest_layer=trains_largest_layer
    )
    checkpointed = launch.activation_checkpointing
    act_rate = CHECKPOINTED_BYTES_PER_TOKEN_HIDDEN if checkpointed else ACTIVATION_BYTES_PER_TOKEN_HIDDEN
    llm_act = act_rate * tokens * shape.hidden * shape.layers
    if checkpointed:
        llm_act += ACTIVATION_BYTES_PER_TOKEN_HIDDEN * tokens * shape.hidden  # the layer being recomputed
    logits = tokens * shape.vocab * (4 + 2)  # fp32 logits for the loss + their bf16 copy
    vision_act = 0.0
    if train_vision and shape.vision_depth:
        patches = visual_tokens * 4  # a visual token merges 2 x 2 patches
        vision_act = act_rate * patches * shape.vision_hidden * shape.vision_depth
    activations = launch.per_device * (llm_act + logits + vision_act)
    return Part(name, weights, grads, optimizer, activations)


def model_states(
    shape: ModelShape, launch: Launch, *, weight_bytes: int, trainable: int, trains_largest_layer: bool
) -> tuple[float, float, float]:
    """Bytes of weights, gradients and optimizer state per device (the module docstring: DeepSpeed's estimators'
    terms when every parameter is trained).

    >>> from training.shared.plan_models import ModelShape
    >>> shape = ModelShape("m", "doc", 1000, 0, 0, hidden=8, layers=1, vocab=10, intermediate=8, largest_layer=100)
    >>> model_states(shape, Launch(1, 1, 4, zero_stage=3), weight_bytes=2, trainable=1000, trains_largest_layer=True)
    (700.0, 1200.0, 3000.0)
    """
    n, stage = launch.processes, launch.zero_stage
    weights = shape.total * weight_bytes / (n if stage >= 3 else 1)
    if stage == 0:  # torch's AdamW: gradients and two moments in the weights' dtype
        return weights, float(trainable * weight_bytes), float(trainable * 2 * weight_bytes)
    half = weight_bytes < 4  # DeepSpeed keeps fp32 gradients and master weights of bf16 weights
    fp32_grads = (2 if stage >= 3 else 4) if half else 0  # ZeRO-3 makes them a sub-group at a time: 18 bytes in all
    grads = trainable * weight_bytes / (n if stage >= 2 else 1) + trainable * fp32_grads / n
    optimizer = trainable * (8 + (4 if half else 0)) / n
    if stage >= 3:  # the largest layer gathered whole, with its gradient when it is trained
        weights += shape.largest_layer * weight_bytes
        grads += shape.largest_layer * weight_bytes if trains_largest_layer and trainable else 0
    return weights, grads, optimizer


def frozen_part(
    name: str, params: float, weight_bytes: int, launch: Launch, *, sharded: bool = False, largest_layer: int = 0
) -> Part:
    """A model that is only run (a reference policy, a reward, a generator): its weights (ZeRO-3 shards them when
    they are prepared with the policy, and gathers its ``largest_layer`` whole)."""
    if sharded and launch.zero_stage >= 3:
        return Part(name, params * weight_bytes / launch.processes + largest_layer * weight_bytes)
    return Part(name, params * weight_bytes)


def generator_part(name: str, weight_bytes: int) -> Part:
    from training.shared.plan_models import GENERATOR_PARAMS_B

    params = sum(GENERATOR_PARAMS_B.get(name, {}).values()) * 1e9
    return Part(f"generator {name}", params * weight_bytes)


def estimate_step_s(params: float, samples: int, tokens: int, lora: bool) -> tuple[float, str]:
    """Seconds per optimizer step on an H200, scaled from :data:`MEASURED_S` (see the module docstring)."""
    scale = (params / MEASURED_PARAMS) * (samples / MEASURED_SAMPLES) * (tokens / MEASURED_TOKENS)
    if not lora:
        scale *= 4 / 3
    return MEASURED_S * scale, f"scaled from {MEASURED_S} s/step measured for {MEASURED_WHAT} on one H200"


def advise(plan: Plan, *, lora: bool, fewer_tokens: str) -> list[str]:
    """The knobs that would make a plan fit, the cheapest first (``fewer_tokens``: the command's own way to shorten
    the sequences)."""
    launch = plan.launch
    if launch is None or plan.fits:
        return []
    tips = []
    per_device = launch.per_device
    acts = sum(p.activations for p in plan.parts) / GIB
    if not launch.activation_checkpointing and acts > 1:
        tips.append(f"trainer.activation_checkpointing=true (activations {acts:.1f} GiB)")
    if per_device > 1:
        tips.append(
            f"trainer.per_device_train_batch_size={max(1, per_device // 2)} (same effective batch: the accumulation "
            "derived from trainer.global_batch_size doubles; one given in trainer.gradient_accumulation_steps, double "
            "it)"
        )
    if launch.zero_stage < 3:
        from reward.core.cli import CONFIG_DIR  # the shipped configs, in a clone or an installed wheel

        tips.append(f"accelerate launch --config_file {CONFIG_DIR / 'accelerate' / 'zero3.yaml'} (shards everything)")
    if not lora:
        tips.append("lora.enabled=true (trains adapters only: no full gradients or optimizer states)")
    tips.append(fewer_tokens)
    return tips


def duration(seconds: float) -> str:
    """A duration as people say it.

    >>> duration(40), duration(4000), duration(200_000)
    ('40 s', '1.1 h', '2.3 days')
    """
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 48 * 3600 else f"{seconds / 86400:.1f} days"


def report_plan(plan: Plan) -> dict[str, Any]:
    """Log the plan as a command prints it; returns what the command returns (``{"plan": ...}``)."""
    logger.info("%s", format_plan(plan))
    return {"plan": plan.as_dict()}


def format_plan(plan: Plan) -> str:
    """The plan as the lines a command prints."""
    out = [f"plan: {plan.title}", *(f"  {line}" for line in plan.lines)]
    if plan.launch is not None:
        launch = plan.launch
        zero = f"ZeRO-{launch.zero_stage}" if launch.zero_stage else "no ZeRO"
        out.append(
            f"  memory per GPU ({launch.processes} process(es) on {launch.machines} machine(s), "
            f"{'bf16' if launch.bf16 else 'fp32'}, {zero}"
            f"{', activation checkpointing' if launch.activation_checkpointing else ''}):"
        )
        out.append(f"    {'part':<34}{'weights':>9}{'grads':>9}{'optim':>9}{'activ':>9}{'total':>9}  GiB")
        for p in plan.parts:
            cells = (p.weights, p.gradients, p.optimizer, p.activations, p.total)
            out.append(f"    {p.name[:33]:<34}" + "".join(f"{c / GIB:>9.1f}" for c in cells))
        verdict = "fits" if plan.fits else "does NOT fit"
        assumed = ASSUMED_GPU if launch.gpu_memory_gib == DEFAULT_GPU_MEMORY_GIB else ""
        out.append(
            f"    total {plan.total_gib:.1f} GiB of {launch.gpu_memory_gib:.0f} GiB per GPU{assumed}: {verdict}"
        )
    if plan.step_s is not None:
        out.append(f"  time: about {plan.step_s:.2f} s/step on one H200 ({plan.step_basis}; rough: x0.5-x2)")
    if plan.advice:
        out.append("  to make it fit, any of:")
        out.extend(f"    - {tip}" for tip in plan.advice)
    out.append("  nothing was loaded; run the same command without plan=true to train")
    return "\n".join(out)


def launch_of(p: PlanSettings, *, per_device: int, accumulation: int, bf16: bool, checkpointing: bool) -> Launch:
    """The launch a plan is made for: ``p``'s values, else this process's launcher environment."""
    import os

    stage_env = (
        os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") if os.environ.get("ACCELERATE_USE_DEEPSPEED") else None
    )
    return Launch(
        per_device=per_device,
        accumulation=accumulation,
        processes_per_machine=planned_processes(p) // p.machines,
        machines=p.machines,
        zero_stage=p.zero_stage if p.zero_stage is not None else int(stage_env or 0),
        bf16=bf16,
        activation_checkpointing=checkpointing,
        gpu_memory_gib=p.gpu_memory_gib,
    )
