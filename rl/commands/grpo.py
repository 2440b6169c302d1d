"""What ``rl/grpo.py`` does: GRPO prompt expansion (SA-IQA §4.4, App. D.3) with trl's ``GRPOTrainer``.

The policy (a text LM, or a VLM shown the task image with the region to invent masked out) expands each task's base
prompt; the generator inpaints it (:mod:`rl.inpaint_render`); registered rewards score the image through the public
trl adapter (:mod:`reward.integrations.trl_rewards`). Every check comes before a model loads (the settings':
:mod:`rl.commands.grpo_settings`; the launch's: :mod:`rl.commands.grpo_launch`); held-out evaluation and the final
save are collective (DDP, DeepSpeed ZeRO-2/3; FSDP is refused). ``run`` reads top to bottom: :func:`set_up`,
:func:`train`, :func:`report`.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reward.console import PROG
from reward.core.errors import UserError
from reward.core.outputs import Output
from reward.data.files import atomic_write_json, read_records
from reward.integrations.reward_set import RewardSet, reward_has_device
from rl.commands.grpo_launch import check_fills_a_step, launch
from rl.commands.grpo_settings import GrpoSettings, reward_scale
from rl.devices import placed_device, resolve_devices
from rl.generators import build_generator, generator_has_device
from rl.inpaint_tasks import Task, policy_view, task_split
from rl.policy import is_vlm, load_policy
from rl.policy_card import policy_card
from training.shared.cards import settings_command, write_card
from training.shared.checkpoints import load_checkpoint_weights, restored_weights_quiet
from training.shared.deepspeed import start_deepspeed_comm, uses_deepspeed, zero3_init_off
from training.shared.launch import require_trained, resume_checkpoint, start_output
from training.shared.trainable import lora_config

if TYPE_CHECKING:  # callbacks (transformers, peft) and torch are imported when a run starts: a settings error is said
    # at once
    from reward.integrations.trl_rewards import TrlRewards
    from rl.heldout import HeldOutEval
    from rl.inpaint_render import InpaintingRender
    from rl.reward_guard import RewardGuard
    from rl.watchdog import Watchdog

logger = logging.getLogger(__name__)


def run(settings: GrpoSettings, callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Set up, train, report; returns the summary (also ``out/grpo_result.json``)."""
    output, args = launch(settings)
    if settings.plan:
        from rl.commands.grpo_plan import grpo_plan
        from training.shared.plan import report_plan

        return report_plan(grpo_plan(settings, args))
    from rl.watchdog import Watchdog

    with Watchdog(settings.stall_timeout_s) as watchdog:
        setup = set_up(settings, output, args, watchdog)
        trained = train(setup, callbacks or [], watchdog)
        watchdog.beat("writing the report")
        return report(setup, trained)


@dataclass
class Setup:
    """What :func:`set_up` builds for :func:`train` and :func:`report`."""

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


@dataclass
class Trained:
    """What :func:`train` returns for :func:`report`."""

    trainer: Any  # trl.GRPOTrainer
    global_step: int
    train_s: float
    stopped_at: int | None  # the step a callback stopped the run at (none: it ran out or finished)
    render: InpaintingRender
    scoring: TrlRewards  # the training rewards as trl reward functions over the render
    guard: RewardGuard
    heldout_cb: HeldOutEval | None


def set_up(settings: GrpoSettings, output: Output, args: Any, watchdog: Watchdog) -> Setup:
    """Every check before a model loads (tasks, a full step, devices; ``output``: the folder's verdict), then the
    rewards, the generator, the output folder created (a resumed run: the records after its last checkpoint dropped)
    and the policy."""
    out = Path(settings.out)
    vision = is_vlm(settings.policy.path, settings.policy.vision)
    train_tasks, heldout, n_bad = task_split(settings, with_eval=settings.eval.every > 0)
    check_fills_a_step(train_tasks, args, settings)
    train_entries = resolve_devices(
        [settings.reward, *settings.more_rewards], schema_has_device=reward_has_device, where="reward"
    )
    eval_entries = resolve_devices(settings.eval_rewards, schema_has_device=reward_has_device, where="eval_rewards")
    (generator_cfg,) = resolve_devices([settings.generator], schema_has_device=generator_has_device, where="generator")

    if uses_deepspeed(args):
        watchdog.beat("starting DeepSpeed's communication (its CPU op is compiled on first use: minutes)")
        start_deepspeed_comm(args)  # before any model is built under zero.Init (trl's reference model)
    watchdog.beat("building the rewards and the generator")
    with zero3_init_off(args):  # whole models on every process, never ZeRO-3 partitions of the policy's engine
        rewards = RewardSet(train_entries, normalize=settings.normalize_rewards)
        eval_set = None
        if settings.eval.every > 0:  # the training rewards (as built) and the held-out ones
            eval_set = RewardSet([*rewards.rewards, *eval_entries], normalize=settings.normalize_rewards)
        generator = build_generator(generator_cfg)
    start_output(output, args)  # created by the main process (an earlier run moved aside), the others waiting
    resume_from = resume_checkpoint(output)  # the last complete checkpoint (a half-written one moved aside)
    if output.resumed and args.process_index == 0:
        from rl.heldout import truncate_records  # transformers and peft: loaded when a run starts

        truncate_records(out, int(resume_from.rsplit("-", 1)[-1]) if resume_from else 0)  # checkpoint-STEP
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


def build_messages(task: Task, settings: GrpoSettings, vision: bool) -> list[dict[str, Any]]:
    text = settings.prompt.template.format(prompt=task.prompt)
    user: Any = [{"type": "image"}, {"type": "text", "text": text}] if vision else text
    messages = [{"role": "system", "content": settings.prompt.system}] if settings.prompt.system else []
    return messages + [{"role": "user", "content": user}]


def train(setup: Setup, callbacks: list[Any], watchdog: Watchdog) -> Trained:
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
    stopped_at = global_step if asked else None
    return Trained(trainer, global_step, train_s, stopped_at, render, scoring, guard, heldout_cb)


def report(setup: Setup, trained: Trained) -> dict[str, Any]:
    """Every process's devices and step-time split (collective), then :func:`write_results` on the main process; a run
    that ended short of ``max_steps`` fails with the reason."""
    from accelerate.utils import gather_object

    from rl.reward_guard import served_reports, step_split

    out, trainer = setup.out, trained.trainer
    processes = gather_object([process_record(setup, trained)])  # collective: the last one
    trainer.accelerator.end_training()  # the process groups destroyed (a launched process ends: cli.main)
    max_steps = trainer.state.max_steps
    mean = {k: sum(p["seconds"][k] for p in processes) / len(processes) for k in processes[0]["seconds"]}
    complete = trained.guard.failure is None and (trained.global_step >= max_steps or trained.stopped_at is not None)
    result: dict[str, Any] = {
        "global_step": trained.global_step,
        "max_steps": max_steps,
        "complete": complete,
        "stopped_by_callback_at": trained.stopped_at,
        "resumed": setup.output.resumed,
        "skipped_rows": setup.n_bad,
        "tasks": {"train": len(setup.train), "heldout": len(setup.heldout)},
        "output_dir": str(out),
        "policy_dtype": str(next(setup.model.parameters()).dtype),
        "beta": setup.args.beta,
        "rewards": setup.rewards.labels,
        "reward_scale": reward_scale(setup.settings),
        "reward_failures": {  # totals over the run and the failure, if any
            **trained.guard.totals,
            "max_reward_failures": trained.guard.max_failed,
            "failure": trained.guard.failure,
            "servers": served_reports(setup.rewards),
        },
        "eval_rewards": setup.eval_set.labels if setup.eval_set else [],
        "provenance": setup.output.provenance(),
        "processes": processes,
        "timing": {"train_s": trained.train_s, **step_split(mean)},
    }
    if trainer.is_world_process_zero():
        write_results(setup, trained, result)
    if trained.guard.failure is not None:
        raise UserError(
            f"{trained.guard.failure}. The run is incomplete (the policy so far is in {out / 'policy'}; see "
            "grpo_result.json); fix the reward, then resume"
        )
    if not complete:
        raise UserError(
            f"GRPO ended after {trained.global_step} of {max_steps} steps: the training tasks ran out "
            f"(the trainer found no full batch of prompts). The policy so far is in {out / 'policy'}; "
            "see grpo_result.json"
        )
    return result


def write_results(setup: Setup, trained: Trained, result: dict[str, Any]) -> None:
    """The main process's share of :func:`report`: the policy's processor, the curves and plots in ``result``, the
    policy's card, ``grpo_result.json`` and the closing summary; a complete run's folder finished."""
    from rl.plots import draw_run_plots  # matplotlib: imported when drawn, not when settings are checked
    from rl.summary import summarize, summary_text

    out, trainer = setup.out, trained.trainer
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


def process_record(setup: Setup, trained: Trained) -> dict[str, Any]:
    """This process's rank, the devices its models actually sit on, its step-time split, what trl's KL term compares
    the policy with, and peak memory."""
    import torch

    from rl.reward_guard import step_split

    rewards, eval_set, generator, trainer = setup.rewards, setup.eval_set, setup.generator, trained.trainer
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
    seconds = {**trained.guard.seconds, "inpainting": trained.render.inpaint_s, "reward": trained.scoring.reward_s}
    return {
        "process": setup.args.process_index,
        "local_rank": setup.args.local_process_index,
        "devices": devices,
        "seconds": seconds,  # what the run's mean split is made of
        "timing": step_split(seconds),
        "reference": reference,
        "heldout_s": trained.heldout_cb.seconds if trained.heldout_cb else 0.0,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
    }
