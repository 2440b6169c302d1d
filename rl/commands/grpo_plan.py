"""``rl/grpo.py ... plan=true``: the plan of a GRPO run (:mod:`training.shared.plan`), from its settings alone.

Per GPU: the policy (trained: full or LoRA), trl's reference model when β > 0 without LoRA (with LoRA the
adapter-disabled policy is the reference), the reward's model when it runs in the process (a served reward costs
nothing here) and the generator's pipeline. No GRPO step time has been measured on a GPU yet, so the plan gives none.
"""

from __future__ import annotations

import logging
from typing import Any

from reward.core.config import to_plain
from rl.commands.grpo_settings import GrpoSettings
from training.shared.plan import (
    Part,
    Plan,
    advise,
    frozen_part,
    generator_part,
    launch_of,
    model_part,
    planned_processes,
    shape_or_fail,
    trainable_params,
    visual_tokens,
)
from training.shared.plan_models import model_shape

logger = logging.getLogger(__name__)

PROMPT_TEXT_TOKENS = 80  # the expansion template, the base prompt and the chat markers
REWARD_ACTIVATION_GIB = 2.0  # a scoring batch's activations (one forward pass, no gradients): a rough allowance


def reward_part(reward: dict[str, Any], bf16: bool, stand_in: str | None) -> tuple[Part | None, str]:
    """A reward's model on the GPU of each process (a served one: none), and the plan's line about it; ``stand_in``:
    the model to count when the reward's own is not here yet (``plan_for.reward_model``)."""
    name = reward.get("name", "?")
    if reward.get("backend", "local") != "local":
        return None, f"reward {name}: served (backend={reward.get('backend')}), no GPU memory in this process"
    path = reward.get("model") or reward.get("path")
    if not isinstance(path, str):
        return None, f"reward {name}: no model (nothing on the GPU)"
    try:
        shape = model_shape(path)
    except KeyError:
        if not stand_in:
            return None, f"reward {name}: {path} not found here (no config.json): its memory is not counted"
        shape = model_shape(stand_in)
    part = Part(f"reward {name} ({shape.name.split('/')[-1]})", shape.total * (2 if bf16 else 4))
    part.activations = REWARD_ACTIVATION_GIB * 2**30
    return part, f"reward {name}: {shape.total / 1e9:.2f}B parameters in this process ({shape.source})"


def grpo_plan(settings: GrpoSettings, args: Any) -> Plan:
    """The plan of GRPO ``settings`` with trl's ``GRPOConfig`` ``args``."""
    from training.shared.launch import GRPO_BATCH, describe_batch, resolve_batch
    from training.shared.trainable import load_dtype

    trainer = settings.trainer
    batch = resolve_batch(trainer, planned_processes(settings.plan_for), GRPO_BATCH)  # args: this launch's
    launch = launch_of(
        settings.plan_for,
        per_device=batch.per_device,
        accumulation=batch.accumulation,
        bf16=trainer.get("bf16") is not False,
        checkpointing=bool(getattr(args, "activation_checkpointing", False)),
    )
    shape = shape_or_fail(settings.policy.path, "policy.path", settings.plan_for.model)
    vlm = shape.vision_params > 0 and settings.policy.vision not in (False, "false")
    vis, vis_why = visual_tokens(None, shape) if vlm else (0, "a text policy")
    tokens = PROMPT_TEXT_TOKENS + vis + (completion := int(args.max_completion_length))
    dtype = load_dtype(
        settings.policy.dtype, lora=settings.lora.enabled, bf16=launch.bf16, deepspeed=launch.zero_stage > 0
    )
    lora_r = settings.lora.r if settings.lora.enabled else None
    trainable = trainable_params(
        shape, lora_r=lora_r, lora_targets=list(settings.lora.target_modules), vision=False, aligner=False
    )
    policy = model_part(
        f"policy {shape.name.split('/')[-1]}",
        shape,
        launch,
        weight_bytes=dtype.itemsize,
        trainable=trainable,
        tokens=tokens,
        visual_tokens=vis,
        train_vision=False,
        trains_largest_layer=not settings.lora.enabled,
    )
    plan = Plan(title=f"GRPO of {settings.policy.path}", parts=[policy], launch=launch)
    beta = float(trainer.get("beta", 0.0) or 0.0)
    if beta > 0 and not settings.lora.enabled:
        plan.parts.append(
            frozen_part(
                "reference policy (beta > 0)",
                shape.total,
                dtype.itemsize,
                launch,
                sharded=True,
                largest_layer=shape.largest_layer,
            )
        )
    reward, reward_line = reward_part(to_plain(settings.reward), launch.bf16, settings.plan_for.reward_model)
    if reward is not None:
        plan.parts.append(reward)
    gen_name = to_plain(settings.generator).get("name", "?")
    if gen_name != "procedural":
        plan.parts.append(generator_part(gen_name, 2 if launch.bf16 else 4))
    per_generation = trainer.get("steps_per_generation") or batch.accumulation  # trl's default: the accumulation
    prompts = launch.per_device * launch.processes * per_generation // args.num_generations
    plan.lines += [
        f"policy: {shape.total / 1e9:.2f}B parameters from {shape.source}; trained: {trainable / 1e6:,.1f}M ("
        + (f"LoRA r={lora_r}" if lora_r else "full fine-tuning")
        + f"), weights in {str(dtype).removeprefix('torch.')}",
        f"{describe_batch(batch, trainer, GRPO_BATCH)}: {prompts} prompts x group {args.num_generations} per "
        "generation",
        f"steps: {args.max_steps}; beta {beta:g}"
        + ("; the reference is the adapter-disabled policy" if beta > 0 and settings.lora.enabled else ""),
        f"per completion: up to {completion} new tokens, about {tokens} tokens with the prompt ({vis_why}"
        + (f", {vis} visual tokens" if vlm else "")
        + ")",
        reward_line,
        f"generator {gen_name}: "
        + ("no GPU memory (procedural)" if gen_name == "procedural" else "its weights on every training process"),
        "time: no GRPO step time has been measured on a GPU yet",
    ]
    plan.advice = advise(
        plan, lora=settings.lora.enabled, fewer_tokens="trainer.max_completion_length=... lower (shorter expansions)"
    )
    if not plan.fits and reward is not None:
        plan.advice.insert(0, "reward.backend=openai: serve the reward on other GPUs (an OpenAI-compatible server)")
    return plan
