"""What GRPO (``rl/grpo.py``) settles before a model loads: the output folder's verdict (:func:`prepare`), trl's
``GRPOConfig`` for this launch (:func:`launch`; FSDP refused) and a step the training tasks fill
(:func:`check_fills_a_step`)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from reward.core.config import resume_mode
from reward.core.errors import UserError
from reward.core.outputs import Output, check_output, may_change_keys
from rl.commands.grpo_settings import GrpoSettings
from rl.generators import text_budget
from rl.inpaint_tasks import Task
from rl.run_folder import prepare_run_folder, run_inputs, settings_record
from training.shared.batch import GRPO_BATCH, check_world, launch_processes, resolve_batch, trl_fields
from training.shared.deepspeed import (
    check_build_locks,
    launcher_bf16,
    save_gathered_weights_under_zero3,
    uses_deepspeed,
)

logger = logging.getLogger(__name__)


def launch(settings: GrpoSettings) -> Any:
    """trl's ``GRPOConfig`` for this launch (building it sets up the launch's processes, each on its own device),
    after the output folder's verdict (an identical rerun of a complete run, a refused folder: said before trl loads);
    an FSDP launch refused."""
    if not settings.plan:
        prepare(settings, Path(settings.out), create=False, check_only=True)
    args = grpo_args(settings, Path(settings.out))
    if str(getattr(args.distributed_state, "distributed_type", "")).endswith("FSDP"):
        raise UserError(
            "FSDP launches are not supported by GRPO (held-out generation needs whole weights): use DDP, "
            "ZeRO-2 or ZeRO-3"
        )
    return args


def grpo_args(settings: GrpoSettings, out: Path) -> Any:
    """trl's ``GRPOConfig`` (this also sets up the launch's processes, each on its own device)."""
    import torch
    from trl import GRPOConfig

    batch = resolve_batch(settings.trainer, launch_processes(), GRPO_BATCH)
    args = {
        "report_to": "none",
        "save_strategy": "steps",
        "logging_steps": 1,
        "logging_first_step": True,
        "log_completions": False,
        **trl_fields(settings.trainer),
        "gradient_accumulation_steps": batch.accumulation,
        "seed": settings.seed,
        "remove_unused_columns": False,  # the rewards need task_id
    }
    if args.get("bf16") is None:  # where this process's GPU does it natively (no tensor made on GPU 0 to find out)
        gpu = torch.cuda.is_available()
        args["bf16"] = launcher_bf16(
            gpu
            and torch.cuda.get_device_capability(int(os.environ.get("LOCAL_RANK") or 0) % torch.cuda.device_count())[0]
            >= 8
        )
    if args.get("max_completion_length") is None:
        args["max_completion_length"] = text_budget(settings.generator) if settings.generator else 77
    if not torch.cuda.is_available():
        args.setdefault("use_cpu", True)
    save_gathered_weights_under_zero3()  # the policy is written as a model, not as DeepSpeed's shards
    if uses_deepspeed(None):
        check_build_locks()  # before accelerate starts DeepSpeed (GPU launches), which may build its ops
    try:
        config = GRPOConfig(output_dir=str(out), **args)
    except (TypeError, ValueError) as err:
        raise UserError(f"invalid trainer.* settings (trl.GRPOConfig): {err}") from None
    check_world(batch, config.world_size)
    return config


def check_fills_a_step(train: list[Task], args: Any, settings: GrpoSettings) -> int:
    """Prompts per step (over all processes); refuses when the training tasks cannot fill one step (trl would train
    0 steps and save the untrained policy)."""
    prompts = args.generation_batch_size // args.num_generations
    if len(train) < prompts:
        held = not settings.eval_data and settings.eval.every > 0
        raise UserError(
            f"{len(train)} training tasks cannot fill one GRPO step: a step takes {prompts} prompts "
            f"({args.world_size} process(es) x trainer.per_device_train_batch_size={args.per_device_train_batch_size}"
            f" x steps_per_generation={args.steps_per_generation} = {args.generation_batch_size} completions, "
            f"trainer.num_generations={args.num_generations} per prompt). Lower trainer.global_batch_size (with "
            "trainer.gradient_accumulation_steps given: trainer.per_device_train_batch_size or the processes), or "
            f"give more tasks in data={settings.data}" + (f" ({settings.eval_tasks} are held out: eval_tasks)" * held)
        )
    logger.info(
        "%d training tasks, %d prompts x %d completions per step (%d process(es)); %d tasks used per epoch",
        *(len(train), prompts, args.num_generations, args.world_size, len(train) // prompts * prompts),
    )
    return prompts


def prepare(settings: GrpoSettings, out: Path, *, create: bool = True, check_only: bool = False) -> Output | None:
    """The run's output folder (main process): new, the same run resumed (``resume=auto``), or refused; with
    ``create=False`` only a refusal is checked, before any model loads (:func:`rl.run_folder.prepare_run_folder`);
    ``check_only``: the decision alone, writing nothing, on any process (a complete run: ``already complete``)."""
    inputs = run_inputs(
        {"policy": settings.policy.path, "data": settings.data, "eval_data": settings.eval_data},
        [("reward{i}", [settings.reward, *settings.more_rewards]), ("eval_reward{i}", settings.eval_rewards)],
        settings.generator,
    )
    rules = {
        "resume": resume_mode(settings.resume),
        "may_change": may_change_keys(GrpoSettings),
        "resume_hint": "resume=auto",
    }
    if check_only:
        check_output(out, "grpo", settings_record(settings), inputs, overwrite=settings.overwrite, **rules)
        return None
    return prepare_run_folder(
        out,
        "grpo",
        settings_record(settings),
        inputs,
        create=create,
        overwrite=settings.overwrite,
        **rules,
    )
