"""``training/sft.py ... plan=true``: the plan of an SFT run (:mod:`training.shared.plan`), from its settings alone."""

from __future__ import annotations

import logging
import math

from training.commands.sft_settings import SftSettings
from training.shared.plan import (
    Plan,
    advise,
    duration,
    estimate_step_s,
    largest_image,
    launch_of,
    model_part,
    shape_or_fail,
    trainable_params,
    visual_tokens,
)

logger = logging.getLogger(__name__)

RESPONSE_TOKENS = 16  # "The spatial aesthetic layout quality level of this image is good." and the turn's end
TEMPLATE_TOKENS = 20  # the chat template's system and role markers


def _train_data(settings: SftSettings) -> tuple[int | None, tuple[int, int] | None, str]:
    """Rows of data.train that data.keep keeps and the largest of up to :data:`training.shared.plan.SAMPLED` of their
    images (headers
    only), and where that size is from; a stream's size from its settings; ``(None, None, "")`` where not found."""
    data = settings.data
    if data.train in ("synthetic", "distorted-photos"):
        side, key = (
            (data.synthetic_size, "synthetic_size") if data.train == "synthetic" else (data.photos_crop, "photos_crop")
        )
        return None, (side, side), f"data.{key}={side}"
    try:
        from reward.data import load_ratings
        from reward.data.manifest import image_paths
        from training.sft_labels import keep_rows

        read = load_ratings(
            data.train, skip_bad=True, check_images=False, default_split="train", **image_paths(settings)
        )
        rows = keep_rows(read.rows, {k: (float(b[0]), float(b[1])) for k, b in data.keep.items()}, read.source)[0]
    except Exception as err:  # noqa: BLE001 - a plan still prints without them
        logger.info("plan: data.train not read (%s)", str(err).splitlines()[0])
        rows = None
    largest, why = largest_image([row.image for row in rows or []], "data.train")
    return rows and len(rows), largest, why


def sft_plan(settings: SftSettings) -> Plan:
    """The plan of SFT settings ``s`` (:class:`training.commands.sft.SftSettings`)."""
    from training.prompts import DEFAULT_DIMENSIONS, resolve_definitions, scorer_metadata
    from training.shared.launch import SFT_BATCH, describe_batch, resolve_batch
    from training.shared.plan import planned_processes
    from training.shared.trainable import load_dtype

    trainer, lora = settings.trainer, settings.lora.enabled
    batch = resolve_batch(trainer, planned_processes(settings.plan_for), SFT_BATCH)
    checkpointing = bool(trainer.get("activation_checkpointing") or trainer.get("gradient_checkpointing"))
    sizes = {"per_device": batch.per_device, "accumulation": batch.accumulation}
    launch = launch_of(settings.plan_for, **sizes, bf16=trainer.get("bf16") is not False, checkpointing=checkpointing)
    shape = shape_or_fail(settings.model.path, "model.path", settings.plan_for.model)
    dims = settings.prompt.dimensions or list(DEFAULT_DIMENSIONS)  # null: data.train's own, maybe not there yet
    definitions = resolve_definitions(dims, settings.prompt.type, settings.prompt.definitions)
    meta = scorer_metadata(
        dims, prompt_type=settings.prompt.type, definitions=definitions, wording=settings.prompt.wording
    )
    question = max(len(q["question"]) for q in meta["queries"].values())
    rows, image, image_why = _train_data(settings)
    vis, vis_why = visual_tokens(settings.model.max_pixels, shape, image, image_why)
    tokens = vis + question // 4 + RESPONSE_TOKENS + TEMPLATE_TOKENS
    dtype = load_dtype(settings.model.dtype, lora=lora, bf16=launch.bf16, deepspeed=launch.zero_stage > 0)
    lora_r = settings.lora.r if lora else None
    train_vision = not settings.model.freeze_vision and not lora
    aligner, targets = not settings.model.freeze_aligner and not lora, list(settings.lora.target_modules)
    trainable = trainable_params(shape, lora_r=lora_r, lora_targets=targets, vision=train_vision, aligner=aligner)
    counts = {"weight_bytes": dtype.itemsize, "trainable": trainable, "tokens": tokens, "visual_tokens": vis}
    name = f"model {shape.name.split('/')[-1]}"
    part = model_part(name, shape, launch, **counts, train_vision=train_vision, trains_largest_layer=not lora)
    plan = Plan(title=f"SFT of {settings.model.path}", parts=[part], launch=launch)
    eff = launch.effective_batch
    rows = rows or settings.plan_for.rows
    max_steps = int(trainer.get("max_steps", -1))
    epochs = float(trainer.get("num_train_epochs", 3))
    if max_steps > 0:
        steps = max_steps
        epoch_text = f"{steps * eff / rows:.2f} epochs of {rows} rows" if rows else "epochs: a stream has none"
    elif rows:
        steps = math.ceil(epochs * math.ceil(rows / eff))
        epoch_text = f"{epochs:g} epochs of {rows} rows"
    else:
        steps, epoch_text = 0, f"{epochs:g} epochs (rows of data.train unknown here)"
    plan.lines += [
        f"model: {shape.total / 1e9:.2f}B parameters ({shape.llm_params / 1e9:.2f}B language model, "
        f"{shape.vision_params / 1e9:.2f}B vision, {shape.aligner_params / 1e9:.3f}B aligner) from {shape.source}",
        f"trained: {trainable / 1e6:,.1f}M parameters ("
        + (f"LoRA r={lora_r} on {', '.join(targets)}" if lora_r else "full fine-tuning")
        + f"), weights in {str(dtype).removeprefix('torch.')}",
        f"{describe_batch(batch, trainer, SFT_BATCH)}; {launch.processes_per_machine} per machine x "
        f"{launch.machines} machines",
        f"steps: {steps or 'unknown'} ({epoch_text})",
        f"per step: {eff} samples, {vis} visual tokens per image ({vis_why}), about {tokens} tokens per sample, "
        f"{eff * tokens:,} tokens",
    ]
    step_s, plan.step_basis = estimate_step_s(shape.total, launch.per_device * launch.accumulation, tokens, lora)
    plan.step_s = step_s
    if steps:
        plan.lines.append(f"time: about {duration(step_s * steps)} for {steps} steps at the step time below")
    plan.advice = advise(plan, lora=lora, fewer_tokens="model.max_pixels=... lower (fewer visual tokens)")
    return plan
