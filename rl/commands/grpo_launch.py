"""What GRPO (``rl/grpo.py``) settles before a model loads, through :mod:`training.shared.launch` as SFT and the GRPO
scorer do: the output folder's verdict on every process (:func:`check_output_folder`), trl's ``GRPOConfig`` for this
launch (:func:`grpo_args`; FSDP refused: :func:`launch`) and a step the training tasks fill
(:func:`check_fills_a_step`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from reward.core.config import resume_mode
from reward.core.errors import UserError
from reward.core.outputs import Output, check_output, may_change_keys
from rl.commands.grpo_settings import GrpoSettings
from rl.generators import text_budget
from rl.inpaint_tasks import Task
from rl.run_folder import run_inputs, settings_record
from training.shared.launch import GRPO_BATCH, trl_config

logger = logging.getLogger(__name__)

# what GRPO asks of trl whatever trainer.* says, and its defaults beneath trainer.*
FIXED = {"remove_unused_columns": False}  # the rewards need task_id
BASE = {
    "report_to": "none",
    "save_strategy": "steps",
    "logging_steps": 1,
    "logging_first_step": True,
    "log_completions": False,
}


def launch(settings: GrpoSettings) -> tuple[Output | None, Any]:
    """The models and files named (:meth:`GrpoSettings.missing_inputs`), then the run's output folder, checked on every
    process before trl loads (an identical rerun of a complete run, a
    refused folder; none for a plan), and trl's ``GRPOConfig`` for this launch (building it sets up the launch's
    processes, each on its own device); an FSDP launch refused."""
    output = None
    if not settings.plan:
        if found := settings.missing_inputs():
            raise UserError(found[0] if len(found) == 1 else "invalid settings:\n  - " + "\n  - ".join(found))
        output = check_output_folder(settings)
    args = grpo_args(settings, Path(settings.out))
    if str(getattr(args.distributed_state, "distributed_type", "")).endswith("FSDP"):
        raise UserError(
            "FSDP launches are not supported by GRPO (held-out generation needs whole weights): use DDP, "
            "ZeRO-2 or ZeRO-3"
        )
    return output, args


def grpo_args(settings: GrpoSettings, out: Path) -> Any:
    """trl's ``GRPOConfig`` (:func:`training.shared.launch.trl_config`): ``trainer.*`` over GRPO's defaults, the seed,
    and the completions' length the generator's text encoder reads when ``trainer.max_completion_length`` is null."""
    from trl import GRPOConfig

    fixed: dict[str, Any] = {**FIXED, "seed": settings.seed}
    if settings.trainer.get("max_completion_length") is None:
        fixed["max_completion_length"] = text_budget(settings.generator) if settings.generator else 77
    return trl_config(GRPOConfig, settings.trainer, out=out, source=GRPO_BATCH, base=BASE, fixed=fixed)


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


def check_output_folder(settings: GrpoSettings) -> Output:
    """The run's output folder, written by nobody yet (every process may ask): new, the same run resumed
    (``resume=auto``), an earlier run moved aside (``overwrite=true``), or refused; a complete identical run stops the
    command at once. Created by :func:`training.shared.launch.start_output` once the rewards and generator load."""
    inputs = run_inputs(
        {"policy": settings.policy.path, "data": settings.data, "eval_data": settings.eval_data},
        [("reward{i}", [settings.reward, *settings.more_rewards]), ("eval_reward{i}", settings.eval_rewards)],
        settings.generator,
    )
    return check_output(
        Path(settings.out),
        "grpo",
        settings_record(settings),
        inputs,
        resume=resume_mode(settings.resume),
        overwrite=settings.overwrite,
        may_change=may_change_keys(GrpoSettings),
        resume_hint="resume=auto",
    )
