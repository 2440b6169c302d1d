"""``training/grpo_scorer.py ... plan=true``: memory and time of GRPO on the scorer (:mod:`training.shared.plan`)."""

from __future__ import annotations

import logging
import math

from training.commands.grpo_scorer_settings import GrpoScorerSettings
from training.shared.plan import (
    Plan,
    advise,
    duration,
    estimate_step_s,
    frozen_part,
    largest_image,
    launch_of,
    model_part,
    shape_or_fail,
    trainable_params,
    visual_tokens,
)

logger = logging.getLogger(__name__)

TEMPLATE_TOKENS = 20  # the chat template's role markers


def _train_images(settings: GrpoScorerSettings) -> tuple[int | None, tuple[int, int] | None, str]:
    """The rows of data.train and the largest of a sample of their images, where both can be read here (headers
    only); synthetic scenes: their size."""
    data = settings.data
    if data.train == "synthetic":
        return None, (data.synthetic_size, data.synthetic_size), f"data.synthetic_size={data.synthetic_size}"
    try:
        from reward.data import load_ratings

        rows = load_ratings(data.train, skip_bad=True, check_images=False, default_split="train").rows
    except Exception as err:  # noqa: BLE001 - a plan still prints without them
        logger.info("plan: data.train not read (%s)", str(err).splitlines()[0])
        return None, None, ""
    rows = [r for r in rows if data.dimension in (None, r.dimension)]
    return len(rows) or None, *largest_image([r.image for r in rows], "data.train")


def grpo_scorer_plan(settings: GrpoScorerSettings) -> Plan:
    """The plan of :class:`training.commands.grpo_scorer.GrpoScorerSettings`: the policy trained on its completions
    (prompt + image + answer), the reference model when ``trainer.beta > 0``, the steps and time."""
    from reward.rewards.reasoning_prompts import PROMPTS
    from training.shared.trainable import load_dtype

    t, p = settings.trainer, settings.plan_for
    per_device, accumulation = (
        int(t.get("per_device_train_batch_size", 8)),
        int(t.get("gradient_accumulation_steps", 1)),
    )
    launch = launch_of(
        p,
        per_device=per_device,
        accumulation=accumulation,
        bf16=t.get("bf16") is not False,
        checkpointing=bool(t.get("activation_checkpointing") or t.get("gradient_checkpointing")),
    )
    shape = shape_or_fail(settings.model.path, "model.path", p.model)
    found, image, image_why = _train_images(settings)
    vis, vis_why = visual_tokens(settings.model.max_pixels, shape, image, image_why)
    completion = int(t.get("max_completion_length", 256))
    released = PROMPTS[settings.prompt]
    tokens = vis + len(released.question + (released.system or "")) // 4 + TEMPLATE_TOKENS + completion
    lora = settings.lora.enabled
    dtype = load_dtype(settings.model.dtype, lora=lora, bf16=launch.bf16, deepspeed=launch.zero_stage > 0)
    train_vision = not settings.model.freeze_vision and not lora
    trainable = trainable_params(
        shape,
        lora_r=settings.lora.r if lora else None,
        lora_targets=list(settings.lora.target_modules),
        vision=train_vision,
        aligner=not settings.model.freeze_aligner and not lora,
    )
    name = shape.name.split("/")[-1]
    parts = [
        model_part(
            f"policy {name}",
            shape,
            launch,
            weight_bytes=dtype.itemsize,
            trainable=trainable,
            tokens=tokens,
            visual_tokens=vis,
            train_vision=train_vision,
            trains_largest_layer=not lora,
        )
    ]
    if float(t.get("beta", 0.04)) > 0 and not lora:  # trl's reference model (with LoRA: the adapter switched off)
        parts.append(
            frozen_part(f"reference {name}", shape.total, 2, launch, sharded=True, largest_layer=shape.largest_layer)
        )
    plan = Plan(title=f"GRPO on the scorer {settings.model.path}", parts=parts, launch=launch)
    group = int(t.get("num_generations", 8))
    completions = launch.effective_batch
    steps = int(t.get("max_steps", -1))
    rows = settings.data.rows if settings.data.train == "synthetic" else found or p.rows
    if steps <= 0 and rows:
        steps = math.ceil(float(t.get("num_train_epochs", 1)) * rows * group / completions)
    plan.lines += [
        f"model: {shape.total / 1e9:.2f}B parameters from {shape.source}; trained: {trainable / 1e6:,.1f}M "
        + (f"(LoRA r={settings.lora.r})" if lora else "(full fine-tuning)"),
        f"per step: {completions} completions ({completions // group} images x group {group}), up to {completion} "
        f"answer tokens each; {vis} visual tokens per image ({vis_why}), about {tokens} tokens per completion",
        f"steps: {steps or 'unknown (set plan_for.rows)'}",
    ]
    step_s, basis = estimate_step_s(shape.total, per_device * accumulation, tokens, lora)
    gen_s = completion * 0.03 * accumulation  # [ours] ~30 ms per sampled token of a 7B model on an H200, batched
    plan.step_s, plan.step_basis = step_s + gen_s, f"{basis}, + {gen_s:.0f} s of sampling at ~30 ms/token"
    if steps:
        plan.lines.append(f"time: about {duration(plan.step_s * steps)} for {steps} steps")
    plan.advice = advise(plan, lora=lora, fewer_tokens="trainer.max_completion_length=... or model.max_pixels lower")
    return plan
