"""``rl/flow_grpo.py ... plan=true``: a Flow-GRPO run's plan (:mod:`training.shared.plan`), from its settings alone.

Per GPU: the generator's transformer (frozen, in the pipeline's dtype) with its LoRA adapter (fp32 weights, gradients
and AdamW's two moments; ZeRO-1/2 shard the last two), the text encoders and VAE, the activations of one training
micro-batch through every block (``34 x tokens x hidden`` bytes per block and image as for SFT, or the input of each
block with activation checkpointing; classifier-free guidance doubles the batch), the reward's and the judge's models
when they run in the process (a served one costs nothing here).

Time: no Flow-GRPO step has been measured on a GPU, so a step is counted in FLOPs (a transformer forward is
``2 x parameters x tokens``; a training step of a window step is three forwards, the backward's two included; the
sampling steps, the reference forward when ``beta > 0``, CFG's doubled batch) at an assumed 40% of an H100's / H200's
989 dense bf16 TFLOP/s: rough, x0.5-x2. Rewards, the VAE and the text encoders are left out of the time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from reward.core.config import to_plain
from rl.commands.flow_grpo_settings import FlowGrpoSettings
from rl.commands.grpo_plan import reward_part
from training.shared.launch import SourceBatch
from training.shared.plan import GIB, Part, Plan, advise, frozen_part, launch_of, planned_processes
from training.shared.plan_models import GENERATOR_PARAMS_B

PEAK_FLOPS = 989e12  # H100 / H200 SXM, dense bf16
ASSUMED_MFU = 0.4
ACTIVATION_BYTES = 34  # per token, hidden unit and block (training.shared.plan's rate)


@dataclass(frozen=True)
class FlowShape:
    """What a plan needs of a flow transformer: its blocks (joint ones with a text stream, single ones without),
    widths, the text tokens it reads, and the LoRA targets' (in, out) sizes per block kind."""

    name: str
    params_b: float
    hidden: int
    joint_blocks: int
    single_blocks: int
    text_tokens: int
    patch: int  # pixels a side per image token (VAE factor x patch size)
    joint_targets: tuple[tuple[int, int], ...]
    single_targets: tuple[tuple[int, int], ...]
    cfg: bool  # classifier-free guidance doubles every batch


def _flux() -> FlowShape:
    h, mlp = 3072, 12288  # FLUX.1's transformer (black-forest-labs/FLUX.1-Fill-dev, transformer/config.json)
    attention = ((h, h),) * 8  # to_q/k/v, to_out.0, add_q/k/v_proj, to_add_out
    ff = ((h, mlp), (mlp, h)) * 2  # ff and ff_context: net.0.proj, net.2
    return FlowShape(
        "FLUX.1 Fill",
        GENERATOR_PARAMS_B["flux-fill"]["transformer"],
        h,
        19,
        38,
        512,
        16,
        attention + ff,
        ((h, h),) * 3,
        cfg=False,
    )


def _sd35() -> FlowShape:
    h = 1536  # SD3.5 Medium's MMDiT-X: 24 joint blocks of 24 heads x 64 (stabilityai/stable-diffusion-3.5-medium)
    return FlowShape(
        "SD3.5 Medium", GENERATOR_PARAMS_B["sd3"]["transformer"], h, 24, 0, 333, 16, ((h, h),) * 8, (), cfg=True
    )


SHAPES = {"flux-fill": _flux, "sd3": _sd35}


def lora_params(shape: FlowShape, r: int) -> int:
    """LoRA parameters on flow_grpo's target modules: ``r x (in + out)`` per targeted linear of every block."""
    joint = sum(r * (i + o) for i, o in shape.joint_targets) * shape.joint_blocks
    return joint + sum(r * (i + o) for i, o in shape.single_targets) * shape.single_blocks


def step_flops(
    shape: FlowShape, tokens: int, steps: int, window: int, beta: float, images: int, checkpointing: bool = False
) -> float:
    """FLOPs of one optimizer step's share of sampling and training, ``images`` images on one GPU: a forward per
    sampling step, three per trained window step (four when activations are recomputed), one more for the reference
    when ``beta > 0``.

    >>> shape = FlowShape("m", 1.0, 8, 1, 0, 0, 16, (), (), cfg=False)
    >>> step_flops(shape, 10, 6, 5, 0.0, 1) / (2 * 1e9 * 10)  # 6 + 3 x 5 forwards
    21.0
    """
    forward = 2 * shape.params_b * 1e9 * (tokens + shape.text_tokens) * (2 if shape.cfg else 1)
    per_image = forward * (steps + (4 if checkpointing else 3) * window + (window if beta > 0 else 0))
    return per_image * images


def flow_grpo_plan(settings: FlowGrpoSettings, source: SourceBatch) -> Plan:
    """The plan of Flow-GRPO ``settings``; ``source``: the batch the
    defaults stand for (flow_grpo's)."""
    from training.shared.launch import describe_batch, resolve_batch

    t, s, gen = settings.trainer, settings.sample, to_plain(settings.generator)
    processes = planned_processes(settings.plan_for)
    batch = resolve_batch(settings.batch_mapping(), processes, source)
    launch = launch_of(
        settings.plan_for,
        per_device=batch.per_device,
        accumulation=batch.accumulation,
        bf16=t.bf16 is not False,
        checkpointing=t.activation_checkpointing,
    )
    name = gen.get("name", "flux-fill")
    shape = SHAPES[name]()
    side = min(s.max_size, gen.get("size") or s.max_size) // shape.patch * shape.patch
    tokens = (side // shape.patch) ** 2
    text = int(gen.get("max_sequence_length") or shape.text_tokens) + (77 if name == "sd3" else 0)  # SD3: + CLIP's
    shape = dataclasses.replace(shape, text_tokens=text)
    weight_bytes = 2 if launch.bf16 else 4
    trainable = lora_params(shape, settings.lora.r)
    shard = launch.processes if launch.zero_stage >= 1 else 1
    sequence = (tokens + shape.text_tokens) * (2 if shape.cfg else 1) * launch.per_device
    blocks = shape.joint_blocks + shape.single_blocks
    rate = 2 if launch.activation_checkpointing else ACTIVATION_BYTES
    activations = rate * sequence * shape.hidden * blocks * (weight_bytes / 2)
    if launch.activation_checkpointing:
        activations += ACTIVATION_BYTES * sequence * shape.hidden  # the block being recomputed
    transformer = Part(
        f"{shape.name} + LoRA r={settings.lora.r}",
        weights=shape.params_b * 1e9 * weight_bytes + trainable * 4,
        gradients=trainable * 4 / (launch.processes if launch.zero_stage >= 2 else 1),
        optimizer=trainable * 8 / shard,
        activations=activations,
    )
    others = {k: v for k, v in GENERATOR_PARAMS_B[name].items() if k != "transformer"}
    parts = [transformer, frozen_part("text encoders + VAE", sum(others.values()) * 1e9, weight_bytes, launch)]
    lines = []
    for role, entry in (
        ("reward", settings.reward),
        *(("reward", r) for r in settings.more_rewards),
        ("judge", settings.judge),
    ):
        if not entry:
            continue
        node = {"name": entry} if isinstance(entry, str) else to_plain(entry)
        part, line = reward_part(node, launch.bf16, settings.plan_for.reward_model)
        lines.append(line.replace("reward ", f"{role} ", 1))
        if part is not None:
            part.name = part.name.replace("reward ", f"{role} ", 1)
            parts.append(part)
    images = settings.round_images()
    per_step = batch.per_device * batch.accumulation  # this GPU's images per optimizer step
    flops = step_flops(shape, tokens, s.steps, s.window, t.beta, per_step, launch.activation_checkpointing)
    step_s = flops / (PEAK_FLOPS * ASSUMED_MFU)
    plan = Plan(title=f"Flow-GRPO of {gen.get('path', '?')} ({name})", parts=parts, launch=launch)
    plan.step_s, plan.step_basis = step_s, f"{flops / 1e15:,.0f} PFLOP per GPU at {ASSUMED_MFU:.0%} of 989 TFLOP/s"
    plan.lines = [
        f"transformer: {shape.params_b:g}B parameters; LoRA r={settings.lora.r} on flow_grpo's targets: "
        f"{trainable / 1e6:,.1f}M trained (fp32 weights, gradients, AdamW)",
        f"{describe_batch(batch, settings.batch_mapping(), source)}",
        f"a round: {images} images = {images // t.num_generations} prompts x group {t.num_generations}, "
        f"{images // settings.batch_mapping()['global_batch_size']} optimizer step(s); {s.steps} sampling steps, "
        f"a window of {s.window} trained",
        f"images at {side}x{side} (sample.max_size): {tokens} image tokens + {shape.text_tokens} text tokens"
        + (", doubled by classifier-free guidance" if shape.cfg else ""),
        *lines,
        f"steps: {t.max_steps}; about {step_s * t.max_steps / 3600:.1f} h at the time below",
    ]
    plan.advice = advise(plan, lora=True, fewer_tokens="sample.max_size=... lower (fewer image tokens)")
    plan.advice = [a for a in plan.advice if "zero3" not in a]  # ZeRO-3 is refused: sampling needs whole weights
    if not plan.fits:
        plan.advice.insert(
            0, "reward.backend=openai / judge served: score on other GPUs (an OpenAI-compatible server)"
        )
    return plan


__all__ = ["GIB", "flow_grpo_plan", "lora_params", "step_flops"]
