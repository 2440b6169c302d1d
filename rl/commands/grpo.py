"""What ``rl/grpo.py`` does: GRPO prompt expansion (SA-IQA §4.4, App. D.3) with trl's ``GRPOTrainer``.

The policy (a text LM, or a VLM shown the task image with the region to invent masked out) expands each task's base
prompt; the generator inpaints it (:mod:`rl.inpaint_render`); registered rewards score the image through the public
trl adapter (:mod:`reward.integrations.trl_rewards`). Every check comes before a model loads; held-out evaluation and
the final save are collective (DDP, DeepSpeed ZeRO-2/3; FSDP is refused). ``run`` reads top to bottom:
:func:`settings_and_args`, :func:`set_up`, :func:`train`, :func:`report`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from omegaconf import MISSING

from reward.console import PROG
from reward.core.config import COUNT, FRACTION, PIXELS, RESUME, TOKENS, parse, resume_mode, to_plain
from reward.core.errors import UserError
from reward.core.outputs import Output, check_output, may_change_keys
from reward.data import load_inpainting
from reward.data.datasets import check_source
from reward.data.files import atomic_write_json, read_records
from reward.data.images import DEFAULT_MAX_PIXELS
from reward.data.manifest import allow_absolute_paths_field, image_root_field
from reward.integrations.reward_set import RewardSet, missing_reward_models, reward_has_device
from reward.rewards.registry import reward_config
from reward.vlm.hub import missing_model
from rl.devices import placed_device, resolve_devices
from rl.generators import build_generator, generator_config, generator_has_device, text_budget
from rl.inpaint_tasks import Task, load_tasks, policy_view, split_heldout
from rl.policy import PolicySettings, is_vlm, load_policy
from rl.policy_card import policy_card
from rl.run_folder import on_main, prepare_run_folder, run_inputs, settings_record
from training.shared.batch import (
    GLOBAL_BATCH_KEY,
    GRPO_BATCH,
    PlanSettings,
    batch_problems,
    check_world,
    describe_batch,
    global_batch_help,
    launch_processes,
    planned_processes,
    resolve_batch,
    trl_fields,
)
from training.shared.cards import settings_command, write_card
from training.shared.checkpoints import last_complete_checkpoint, load_checkpoint_weights, restored_weights_quiet
from training.shared.deepspeed import (
    check_build_locks,
    launcher_bf16,
    save_gathered_weights_under_zero3,
    start_deepspeed_comm,
    uses_deepspeed,
    zero3_init_off,
)
from training.shared.reporting import report_to_problems
from training.shared.sizes import require_trained, trainer_size_problems
from training.shared.trainable import LoraSettings, lora_config
from training.shared.trl_fields import trainer_problems

if TYPE_CHECKING:  # callbacks (transformers, peft) and torch are imported when a run starts: a settings error is said
    # at once
    from reward.integrations.trl_rewards import TrlRewards
    from rl.heldout import HeldOutEval
    from rl.inpaint_render import InpaintingRender
    from rl.reward_guard import RewardGuard
    from training.shared.watchdog import Watchdog

logger = logging.getLogger(__name__)

DEFAULT_TEMPLATE = (
    "Expand this prompt for inpainting the masked region of an interior photo into one detailed, vivid "
    "description of the finished room: {prompt}"
)


@dataclass
class ExpansionPromptSettings:
    template: str = field(
        default=DEFAULT_TEMPLATE, metadata={"help": "the user turn; {prompt} is the task's base prompt"}
    )
    system: str | None = field(default=None, metadata={"help": "optional system turn"})


@dataclass
class HeldOutSettings:
    every: int = field(
        default=10,
        metadata={"help": "held-out evaluation every K steps (0: off)", "may_change": True, "range": (0, None)},
    )
    max_new_tokens: int | None = field(
        default=None, metadata={"help": "null: trainer.max_completion_length", "range": TOKENS}
    )


# trl.GRPOConfig fields, NAME -> (default, help): the paper's where App. D.3 states them (group 8, batch 4, eq. 8's
# loss and KL estimator), ours elsewhere; any other field is set with trainer.NAME=VALUE (checked against
# GRPOConfig's fields and their types before anything loads)
PAPER_TRAINER: dict[str, tuple[Any, str]] = {
    "num_generations": (8, "group size G (the paper: 8)"),
    "per_device_train_batch_size": (
        4,
        "completions per process and micro-step: 4 divides the paper's 32 on 1, 2, 4 or 8 processes (groups may "
        "span processes)",
    ),
    "gradient_accumulation_steps": (
        None,
        "null: derived from global_batch_size (8 on one process, 1 on eight); a number: used as given, the batch "
        "then grows with the processes",
    ),
    GLOBAL_BATCH_KEY: (None, global_batch_help(GRPO_BATCH)),
    "loss_type": (
        "grpo",
        "eq. 8: each completion's token losses averaged over its own length, then over the group (trl's grpo; "
        "trl's own default, dapo, averages over all tokens of the batch)",
    ),
    "use_bias_correction_kl": (
        False,
        "eq. 8: the KL term is DeepSeekMath's k3 estimator, pi_ref/pi - log(pi_ref/pi) - 1 (its gradient "
        "beta (1 - pi_ref/pi)); true: trl's default, DeepSeek-V3.2's correction, the KL term x pi/pi_old (its "
        "gradient beta (log pi - log pi_ref): not eq. 8)",
    ),
    "max_completion_length": (None, "null: the generator's text budget (CLIP 77; FLUX Fill's T5: 512)"),
    "temperature": (1.0, "ours (the paper gives none)"),
    "learning_rate": (1.0e-6, "ours (the paper gives none)"),
    "beta": (0.04, "ours: KL to the reference policy (0 drops the reference model)"),
    "max_steps": (500, "ours"),
    "lr_scheduler_type": ("constant", ""),
    "bf16": (None, "null: on where the GPU supports it"),
    "activation_checkpointing": (True, "trl's GRPO default: recompute activations in backward to save memory"),
    "use_vllm": (False, "true on GPUs: trl's vLLM generation (vllm_mode colocate | server)"),
    "reward_weights": (None, "one per reward (reward + more_rewards); null: all 1"),
    "logging_steps": (1, ""),
    "save_steps": (50, ""),
    "save_total_limit": (2, ""),
    "report_to": ("none", ""),
}


@dataclass
class GrpoSettings:
    """Settings of ``rl/grpo.py``. Keys marked ``may_change`` may differ when a run is resumed: they change how long it
    runs, what it logs or where the models sit, not what it learns."""

    groups: ClassVar[dict] = {"reward": reward_config, "generator": generator_config}

    out: str = field(
        default=MISSING, metadata={"help": "checkpoints, policy/ (with its card), plots, results", "may_change": True}
    )
    data: str = field(
        default=MISSING, metadata={"help": 'tasks: JSONL {"image", "mask", "prompt"[, "scene"]} or datasets folder'}
    )
    policy: PolicySettings = field(default_factory=PolicySettings)
    eval_data: str | None = field(
        default=None, metadata={"help": "held-out tasks; null: whole scenes / images from the end of data"}
    )
    eval_tasks: int = field(
        default=8, metadata={"help": "held out of data when eval_data is null (whole groups)", "range": COUNT}
    )
    image_root: str | None = image_root_field()
    allow_absolute_paths: bool = allow_absolute_paths_field()
    skip_bad: bool = field(
        default=False,
        metadata={"help": "a bad row (file and line named) is refused; true: skipped and counted instead"},
    )
    max_decode_pixels: int = field(
        default=DEFAULT_MAX_PIXELS, metadata={"help": "larger images are refused unread", "range": PIXELS}
    )
    reward: Any = field(
        default=None,
        metadata={
            "help": "reward=NAME picks the config reward/NAME.yaml",
            "may_change": ("device", "backend", "server", "batch_size"),
        },
    )
    generator: Any = field(
        default=None,
        metadata={"help": "generator=NAME picks generator/NAME.yaml", "may_change": ("device", "batch_size")},
    )
    more_rewards: list[Any] = field(
        default_factory=list, metadata={"help": "further training rewards ({name: ..., ...})"}
    )
    eval_rewards: list[Any] = field(
        default_factory=list, metadata={"help": "held-out only: names or {name: ..., ...}"}
    )
    normalize_rewards: bool = field(
        default=True, metadata={"help": "each reward onto [0, 1] (1 = best) by its score_range"}
    )
    max_reward_failures: float = field(
        default=1.0,
        metadata={
            "help": "a step with more than this fraction of completions unrewarded stops the run (1.0: none rewarded)",
            "may_change": True,
            "range": FRACTION,
        },
    )
    lora: LoraSettings = field(default_factory=LoraSettings)
    prompt: ExpansionPromptSettings = field(default_factory=ExpansionPromptSettings)
    eval: HeldOutSettings = field(default_factory=HeldOutSettings)
    resume: str = field(
        default="auto",
        metadata={
            "help": "auto: continue the same run in out; never: new only",
            "may_change": True,
            "choices": RESUME,
        },
    )
    overwrite: bool = field(
        default=False, metadata={"help": "an earlier run in out is moved aside to out.old-<time>", "may_change": True}
    )
    seed: int = field(default=42, metadata={"help": "trl's seed and the generator's (one per task and step)"})
    samples_per_step: int = field(
        default=4, metadata={"help": "images saved per step in out/samples", "may_change": True, "range": (0, 1024)}
    )
    stall_timeout_s: float = field(
        default=1800,
        metadata={
            "help": "no progress this long: dump the stacks, exit 2 (0: never)",
            "may_change": True,
            "range": (0, None),
        },
    )
    trainer: dict[str, Any] = field(
        default_factory=lambda: {name: default for name, (default, _) in PAPER_TRAINER.items()},
        metadata={
            "help": "trl.GRPOConfig fields (any one: trainer.NAME=V)",
            "entries": {name: text for name, (_, text) in PAPER_TRAINER.items() if text},
            "may_change": (
                "max_steps",
                "logging_steps",
                "logging_first_step",
                "save_steps",
                "save_total_limit",
                "report_to",
                "dataloader_num_workers",
            ),
        },
    )
    plan: bool = field(
        default=False,
        metadata={
            "help": "true: print the run's plan (batch, memory per GPU of each model) and exit; nothing loads",
            "may_change": True,
        },
    )
    plan_for: PlanSettings = field(
        default_factory=PlanSettings,
        metadata={"help": "plan=true: GPUs, machines, ZeRO stage, GPU memory", "may_change": True},
    )


def parse_settings(cfg: Any) -> GrpoSettings:
    """Typed settings; unknown, missing or mistyped keys of every section are reported together."""
    return settings_and_args(cfg)[0]


def settings_and_args(cfg: Any) -> tuple[GrpoSettings, Any]:
    """Typed settings and trl's ``GRPOConfig`` (built once: building it sets up this launch's processes); every
    problem of both is reported together, one line when there is one."""
    settings = parse(GrpoSettings, cfg, where="")
    own, missing = _problems(settings), [] if settings.plan else _missing_inputs(settings)
    # found without trl (a table of its fields, a count of the task rows): reported before trl is even imported
    quick = trainer_problems("GRPOConfig", trl_fields(settings.trainer)) + _task_count_problems(settings)
    processes = planned_processes(settings.plan_for) if settings.plan else launch_processes()
    quick += batch_problems(settings.trainer, processes, GRPO_BATCH) + trainer_size_problems(settings.trainer)
    problems = [*own, *missing, *quick]
    if not problems and not settings.plan:  # an identical rerun of a complete run, a refused folder: said before trl
        prepare(settings, Path(settings.out), create=False, check_only=True)
    args = None
    try:  # trl's own checks of trainer.* (batch and group sizes over the processes of this launch, ...), with the
        # other settings' problems; a missing model or file alone is said at once, before trl loads
        args = None if quick or (missing and not own) else grpo_args(settings, Path(settings.out))
    except UserError as err:
        problems.append(str(err))
    if args is not None and str(getattr(args.distributed_state, "distributed_type", "")).endswith("FSDP"):
        problems.append(
            "FSDP launches are not supported by GRPO (held-out generation needs whole weights): use DDP, "
            "ZeRO-2 or ZeRO-3"
        )
    if len(problems) == 1:
        raise UserError(problems[0])
    if problems:
        raise UserError("invalid grpo settings:\n  - " + "\n  - ".join(problems))
    return settings, args


def _problems(settings: GrpoSettings) -> list[str]:
    problems = []
    if "{prompt}" not in settings.prompt.template:
        problems.append("prompt.template must contain {prompt} (where the task's base prompt goes)")
    if not isinstance(settings.reward, dict) or not settings.reward.get("name"):  # parse made it a plain dict
        problems.append("no reward: choose one with reward=NAME (e.g. reward=sa-iqa reward.model=DIR)")
    if not settings.generator:
        problems.append("no generator: choose one with generator=NAME (procedural, sd15-inpaint, ...)")
    if settings.trainer.get("remove_unused_columns"):
        problems.append(
            "trainer.remove_unused_columns=true would drop task_id, which the rewards need; leave it unset"
        )
    if settings.trainer.get("sync_ref_model") and (settings.lora.enabled or not settings.trainer.get("beta")):
        why = (
            "with LoRA the reference is the policy with its adapter disabled" if settings.lora.enabled else "beta is 0"
        )
        problems.append(f"trainer.sync_ref_model=true has no reference model to sync ({why}); leave it false")
    n_rewards = 1 + len(settings.more_rewards)
    weights = settings.trainer.get("reward_weights")
    if weights is not None and len(weights) != n_rewards:
        problems.append(
            f"trainer.reward_weights has {len(weights)} weights for {n_rewards} rewards "
            "(reward + more_rewards); give one per reward"
        )
    problems.extend(report_to_problems(settings.trainer.get("report_to", "none")))
    return problems


def _missing_inputs(settings: GrpoSettings) -> list[str]:
    """The models and task files named that are not there (a plan is made before they are)."""
    gen = to_plain(settings.generator) if settings.generator else {}
    problems = [
        problem
        for key, value in (("policy.path", settings.policy.path), ("generator.path", gen.get("path")))
        if (problem := missing_model(value, key))
    ]
    for key, value in (("data", settings.data), ("eval_data", settings.eval_data)):
        if value and not check_source(value) and not Path(value).expanduser().exists():
            problems.append(f"{key}={value}: no such file or folder (an inpainting tasks manifest)")
    problems += missing_reward_models([settings.reward], "reward")
    problems += missing_reward_models(settings.more_rewards, "more_rewards")
    return problems + missing_reward_models(settings.eval_rewards, "eval_rewards")


def _task_count_problems(settings: GrpoSettings) -> list[str]:
    """``eval_tasks`` against the rows of ``data`` (counted, no image read); a file that does not read is left to
    the tasks' loading, which names it."""
    if settings.plan or settings.eval_data or settings.eval.every <= 0:
        return []
    paths = {"image_root": settings.image_root, "allow_absolute_paths": settings.allow_absolute_paths}
    try:
        rows = len(load_inpainting(settings.data, skip_bad=False, check_images=False, **paths).rows)
    except (ValueError, OSError):
        return []
    if rows >= 2 * settings.eval_tasks:
        return []
    return [
        f"eval_tasks={settings.eval_tasks}: data={settings.data} holds {rows} tasks, too few to hold out that many "
        f"and train on the rest (at most {rows // 2}); lower eval_tasks, give eval_data=TASKS.jsonl, or eval.every=0"
    ]


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


def build_messages(task: Task, settings: GrpoSettings, vision: bool) -> list[dict[str, Any]]:
    text = settings.prompt.template.format(prompt=task.prompt)
    user: Any = [{"type": "image"}, {"type": "text", "text": text}] if vision else text
    messages = [{"role": "system", "content": settings.prompt.system}] if settings.prompt.system else []
    return messages + [{"role": "user", "content": user}]


def task_split(settings: Any, with_eval: bool, load: Callable[..., Any] = load_tasks) -> tuple[list, list, int]:
    """Training and held-out tasks (read by ``load``: inpainting tasks, or Flow-GRPO's prompts), and the number of
    bad rows; held out by whole scene / source image, and a held-out set given as ``eval_data`` shares no scene or
    image with the training tasks. ``settings``: GRPO's or Flow-GRPO's (the same data keys)."""
    paths = {"image_root": settings.image_root, "allow_absolute_paths": settings.allow_absolute_paths}
    read = {"skip_bad": settings.skip_bad, "max_pixels": settings.max_decode_pixels, **paths}
    train, skipped = load(settings.data, **read)
    n_bad = len(skipped)
    heldout: list[Task] = []
    if with_eval and settings.eval_data:
        heldout, skipped_eval = load(settings.eval_data, **read)
        n_bad += len(skipped_eval)
        shared = {task.group for task in heldout} & {task.group for task in train}
        if shared:
            raise UserError(
                f"eval_data={settings.eval_data} shares {len(shared)} scene(s) / source image(s) with "
                f"data={settings.data} (e.g. {sorted(shared)[0]}): held-out rewards would measure memory, not "
                "generalisation; remove them"
            )
    elif with_eval:
        train, heldout = split_heldout(train, settings.eval_tasks)
    if not train:
        raise UserError(f"{settings.data}: no usable tasks ({n_bad} bad rows); see the warnings above")
    return train, heldout, n_bad


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


@dataclass
class Setup:
    """What :func:`set_up` builds for :func:`train` and :func:`report`, and what :func:`train` adds."""

    settings: GrpoSettings
    args: Any  # trl.GRPOConfig
    out: Path
    output: Output
    vision: bool
    train: list[Task]
    heldout: list[Task]
    n_bad: int
    rewards: RewardSet
    eval_set: RewardSet | None
    generator: Any
    model: Any
    processing_class: Any
    resume_from: str | None
    restored: bool  # the checkpoint's weights were loaded by our code (the trainer's key warnings are moot)
    trainer: Any = None  # from here on: train's
    global_step: int = 0
    train_s: float = 0.0
    render: InpaintingRender | None = None
    scoring: TrlRewards | None = None  # the training rewards as trl reward functions over the render
    heldout_cb: HeldOutEval | None = None
    stopped_at: int | None = None
    guard: RewardGuard | None = None


def run(cfg: Any, callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Set up, train, report; returns the summary (also ``out/grpo_result.json``)."""
    settings, args = settings_and_args(cfg)
    if settings.plan:
        from rl.commands.grpo_plan import grpo_plan
        from training.shared.plan import report_plan

        return report_plan(grpo_plan(settings, args))
    from training.shared.watchdog import Watchdog

    with Watchdog(settings.stall_timeout_s) as watchdog:
        setup = set_up(settings, args, watchdog)
        train(setup, callbacks or [], watchdog)
        watchdog.beat("writing the report")
        return report(setup)


def set_up(settings: GrpoSettings, args: Any, watchdog: Watchdog) -> Setup:
    """Every check before a model loads (tasks, a full step, devices, the output folder), then the rewards, the
    generator, the output folder (a resumed run: the records after its last checkpoint dropped) and the policy."""
    out = Path(settings.out)
    batch = resolve_batch(settings.trainer, args.world_size, GRPO_BATCH)
    logger.info("%s", describe_batch(batch, settings.trainer, GRPO_BATCH))
    vision = is_vlm(settings.policy.path, settings.policy.vision)
    train_tasks, heldout, n_bad = task_split(settings, with_eval=settings.eval.every > 0)
    check_fills_a_step(train_tasks, args, settings)
    train_entries = resolve_devices(
        [settings.reward, *settings.more_rewards], schema_has_device=reward_has_device, where="reward"
    )
    eval_entries = resolve_devices(settings.eval_rewards, schema_has_device=reward_has_device, where="eval_rewards")
    (generator_cfg,) = resolve_devices([settings.generator], schema_has_device=generator_has_device, where="generator")
    on_main(lambda: prepare(settings, out, create=False))  # a refused out folder fails here, before any model loads

    watchdog.beat("starting DeepSpeed's communication (its CPU op is compiled on first use: minutes)")
    start_deepspeed_comm(args)  # before any model is built under zero.Init (trl's reference model)
    watchdog.beat("building the rewards and the generator")
    with zero3_init_off(args):  # whole models on every process, never ZeRO-3 partitions of the policy's engine
        rewards = RewardSet(train_entries, normalize=settings.normalize_rewards)
        eval_set = None
        if settings.eval.every > 0:  # the training rewards (as built) and the held-out ones
            eval_set = RewardSet([*rewards.rewards, *eval_entries], normalize=settings.normalize_rewards)
        generator = build_generator(generator_cfg)
    output = on_main(lambda: prepare(settings, out))  # decided once, by the main process
    assert output is not None
    resume_from = None
    if output.resumed:  # from the last complete checkpoint (a half-written one is skipped), or from the start
        resume_from = last_complete_checkpoint(out, main_process=args.process_index == 0)
        if args.process_index == 0:
            from rl.heldout import truncate_records  # transformers and peft: loaded when a run starts

            truncate_records(out, int(resume_from.rsplit("-", 1)[-1]) if resume_from else 0)  # checkpoint-STEP
        logger.info("resuming the run in %s from %s", out, resume_from or "its start (no checkpoint yet)")
    args.distributed_state.wait_for_everyone()

    watchdog.beat("loading the policy")
    model, processing_class = load_policy(settings.policy, settings.lora, vision, args)
    restored = bool(resume_from) and not settings.lora.enabled and not uses_deepspeed(args)
    restored = restored and load_checkpoint_weights(model, resume_from)  # the trainer's own resume misses the keys
    return Setup(
        settings=settings,
        args=args,
        out=out,
        output=output,
        vision=vision,
        train=train_tasks,
        heldout=heldout,
        n_bad=n_bad,
        rewards=rewards,
        eval_set=eval_set,
        generator=generator,
        model=model,
        processing_class=processing_class,
        resume_from=resume_from,
        restored=bool(restored),
    )


def train(setup: Setup, callbacks: list[Any], watchdog: Watchdog) -> None:
    """trl's GRPOTrainer on the training tasks, timed per step, evaluated on the held-out tasks (every ``eval.every``
    steps and before the first), one console line per step; the policy saved to ``out/policy`` (collective)."""
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOTrainer

    from reward.integrations.trl_rewards import TrlRewards
    from rl.heldout import HeldOutEval
    from rl.inpaint_render import InpaintingRender
    from rl.reward_guard import RewardGuard
    from rl.summary import StepLine

    settings, args, out, vision = setup.settings, setup.args, setup.out, setup.vision
    render = InpaintingRender(
        setup.generator,
        {task.id: task for task in [*setup.train, *setup.heldout]},
        seed=settings.seed,
        samples_dir=out / "samples",
        samples_per_step=settings.samples_per_step,
        write_samples=args.process_index == 0,
    )
    scoring = TrlRewards(setup.rewards, render)
    guard = RewardGuard(scoring, settings.max_reward_failures)  # times steps; one without usable rewards stops the run
    heldout_cb = None
    if setup.eval_set is not None:
        heldout_cb = HeldOutEval(
            setup.heldout,
            lambda task: build_messages(task, settings, vision),
            render,
            setup.eval_set,
            every=settings.eval.every,
            max_new_tokens=settings.eval.max_new_tokens or args.max_completion_length or 64,
            history=out / "heldout.jsonl",
            view=(lambda task: policy_view(task, settings.policy.image)) if vision else None,
        )
    rows = [
        {"prompt": build_messages(task, settings, vision), "task_id": task.id}
        | ({"image": policy_view(task, settings.policy.image)} if vision else {})
        for task in setup.train
    ]
    watchdog.beat("building the trainer (and the reference model when trainer.beta > 0)")
    trainer = GRPOTrainer(
        model=setup.model,
        reward_funcs=scoring.functions(),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=setup.processing_class,
        peft_config=lora_config(settings.lora) if settings.lora.enabled else None,
        # the guard first: a step's time ends before held-out evaluation starts
        callbacks=[guard, watchdog, *callbacks, *([heldout_cb] if heldout_cb else [])],
    )
    if heldout_cb is not None:
        heldout_cb.trainer = trainer
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    step_line = StepLine()  # one line per step, not trl's dictionaries
    step_line.scale = reward_scale(settings)
    trainer.add_callback(step_line)
    start = time.perf_counter()
    with restored_weights_quiet() if setup.restored else contextlib.nullcontext():  # its key warnings are moot
        global_step = trainer.train(resume_from_checkpoint=setup.resume_from).global_step
    train_s = time.perf_counter() - start
    if guard.failure is None:  # (a guard's stop says why itself, in report)
        require_trained(global_step, "GRPO", settings.trainer)  # no policy from no step
    trainer.save_model(str(out / "policy"))  # collective under ZeRO-3 (gathers the weights); the main process writes
    asked = trainer.control.should_training_stop and global_step < trainer.state.max_steps  # a callback's stop
    setup.stopped_at = global_step if asked else None
    setup.trainer, setup.global_step, setup.train_s = trainer, global_step, train_s
    setup.render, setup.scoring, setup.heldout_cb, setup.guard = render, scoring, heldout_cb, guard


def reward_scale(settings: GrpoSettings) -> str:
    """What trl's logged ``reward`` (the weighted sum of the rewards) ranges over: each reward normalised to [0, 1].

    >>> s = GrpoSettings(out="o", data="d", policy=PolicySettings(path="p"), more_rewards=[{"name": "qbench"}])
    >>> reward_scale(s), reward_scale(GrpoSettings(out="o", data="d", normalize_rewards=False))
    ('normalised to [0, 2]', 'raw scale')
    """
    if not settings.normalize_rewards:
        return "raw scale"
    weights = settings.trainer.get("reward_weights") or [1.0] * (1 + len(settings.more_rewards))
    return f"normalised to [{sum(min(w, 0) for w in weights):g}, {sum(max(w, 0) for w in weights):g}]"


def report(setup: Setup) -> dict[str, Any]:
    """Every process's devices and step-time split (collective), then :func:`write_results` on the main process; a run
    that ended short of ``max_steps`` fails with the reason."""
    from accelerate.utils import gather_object

    from rl.reward_guard import served_reports, step_split

    out, trainer = setup.out, setup.trainer
    processes = gather_object([process_record(setup)])  # collective: the last one
    trainer.accelerator.end_training()  # the process groups destroyed (a launched process ends: cli.main)
    max_steps = trainer.state.max_steps
    mean = {k: sum(p["seconds"][k] for p in processes) / len(processes) for k in processes[0]["seconds"]}
    complete = setup.guard.failure is None and (setup.global_step >= max_steps or setup.stopped_at is not None)
    result: dict[str, Any] = {
        "global_step": setup.global_step,
        "max_steps": max_steps,
        "complete": complete,
        "stopped_by_callback_at": setup.stopped_at,
        "resumed": setup.output.resumed,
        "skipped_rows": setup.n_bad,
        "tasks": {"train": len(setup.train), "heldout": len(setup.heldout)},
        "output_dir": str(out),
        "policy_dtype": str(next(setup.model.parameters()).dtype),
        "beta": setup.args.beta,
        "rewards": setup.rewards.labels,
        "reward_scale": reward_scale(setup.settings),
        "reward_failures": {  # totals over the run and the failure, if any
            **setup.guard.totals,
            "max_reward_failures": setup.guard.max_failed,
            "failure": setup.guard.failure,
            "servers": served_reports(setup.rewards),
        },
        "eval_rewards": setup.eval_set.labels if setup.eval_set else [],
        "provenance": setup.output.provenance(),
        "processes": processes,
        "timing": {"train_s": setup.train_s, **step_split(mean)},
    }
    if trainer.is_world_process_zero():
        write_results(setup, result)
    if setup.guard.failure is not None:
        raise UserError(
            f"{setup.guard.failure}. The run is incomplete (the policy so far is in {out / 'policy'}; see "
            "grpo_result.json); fix the reward, then resume"
        )
    if not complete:
        raise UserError(
            f"GRPO ended after {setup.global_step} of {max_steps} steps: the training tasks ran out "
            f"(the trainer found no full batch of prompts). The policy so far is in {out / 'policy'}; "
            "see grpo_result.json"
        )
    return result


def write_results(setup: Setup, result: dict[str, Any]) -> None:
    """The main process's share of :func:`report`: the policy's processor, the curves and plots in ``result``, the
    policy's card, ``grpo_result.json`` and the closing summary; a complete run's folder finished."""
    from rl.plots import draw_run_plots  # matplotlib: imported when drawn, not when settings are checked
    from rl.summary import summarize, summary_text

    out, trainer = setup.out, setup.trainer
    setup.processing_class.save_pretrained(str(out / "policy"))
    log = trainer.state.log_history
    history = read_records(out / "heldout.jsonl")
    result["train_curve"] = {  # per reward: (step, mean, std) as trl logged them (rewards/NAME/mean|std)
        label: [
            (int(e["step"]), float(e[f"rewards/{label}/mean"]), float(e.get(f"rewards/{label}/std") or 0))
            for e in log
            if e.get(f"rewards/{label}/mean") is not None and "step" in e
        ]
        for label in setup.rewards.labels
    }
    result["frac_reward_zero_std"] = [
        (e["step"], e["frac_reward_zero_std"]) for e in log if "frac_reward_zero_std" in e
    ]
    result["kl"] = [(e["step"], e["kl"]) for e in log if "kl" in e]
    result["plots"] = draw_run_plots(out, result["train_curve"], history)
    result["policy"] = str(out / "policy")
    result["summary"] = summarize(log, history, setup.rewards.labels)
    record = setup.output.identity["settings"]  # the card: also the run folder's README.md (not trl's template)
    card = policy_card(
        record,
        result,
        command=card_command(record),
        vision=setup.vision,
        max_new_tokens=setup.args.max_completion_length,
    )
    result["model_card"] = str([write_card(folder, card) for folder in (out / "policy", out)][0])
    files = {
        "policy": out / "policy",
        "model card": out / "policy" / "README.md",
        "samples": out / "samples",
        "held-out rewards": out / "heldout.jsonl",
        **{f"{name.replace('_', ' ')} plot": Path(path) for name, path in result["plots"].items()},
        "checkpoints": out,
        "result": out / "grpo_result.json",
    }
    result["files"] = {name: str(p) for name, p in files.items() if p.exists() or name == "result"}
    atomic_write_json(out / "grpo_result.json", result)
    logger.info("%s", summary_text(result))
    if result["complete"]:
        setup.output.finish()


def card_command(record: dict[str, Any]) -> str:
    """The command that makes the run of settings ``record``, as it was run: ``perceptual-rewards grpo ...`` (under
    accelerate: ``accelerate launch ... -m reward grpo ...``) when installed, ``python rl/grpo.py ...`` (a clone)."""
    script = "-m reward grpo" if sys.argv[0].startswith(PROG) else "rl/grpo.py"
    return settings_command(script, "grpo", GrpoSettings, record).replace("python -m reward", PROG, 1)


def process_record(setup: Setup) -> dict[str, Any]:
    """This process's rank, the devices its models actually sit on, its step-time split, what trl's KL term compares
    the policy with, and peak memory."""
    import torch

    from rl.reward_guard import step_split

    rewards, eval_set, generator, trainer = setup.rewards, setup.eval_set, setup.generator, setup.trainer
    devices = {
        "policy": placed_device(trainer.model) or str(trainer.accelerator.device),
        "generator": placed_device(generator) or str(getattr(generator, "device", "cpu")),
        **{f"reward:{r.label}": placed_device(r.reward) or "none" for r in rewards.rewards},
        **{
            f"eval_reward:{r.label}": placed_device(r.reward) or "none"
            for r in (eval_set.rewards if eval_set else [])
            if r.label not in rewards.labels
        },
    }
    reference = "policy without its adapter" if trainer.beta else "none"  # what trl's KL term compares with
    if trainer.beta and trainer.ref_model is not None:
        params = list(trainer.ref_model.parameters())
        reference = "zero3-sharded" if params and all(hasattr(p, "ds_id") for p in params) else "whole"
    seconds = {**setup.guard.seconds, "inpainting": setup.render.inpaint_s, "reward": setup.scoring.reward_s}
    return {
        "process": setup.args.process_index,
        "local_rank": setup.args.local_process_index,
        "devices": devices,
        "seconds": seconds,  # what the run's mean split is made of
        "timing": step_split(seconds),
        "reference": reference,
        "heldout_s": setup.heldout_cb.seconds if setup.heldout_cb else 0.0,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
    }
