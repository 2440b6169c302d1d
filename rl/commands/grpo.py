"""What ``rl/grpo.py`` does, as a function of its config: GRPO prompt expansion (SA-IQA §4.4, App. D.3) with trl.

The policy (a text LM, or a VLM shown the task image with the region to invent masked out) expands each task's base
prompt; the generator inpaints the expansion into the task; registered rewards score the result (:mod:`rl.rewards`).

Everything that can fail is checked before a model loads (all problems at once): settings, trl's batch rules for this
launch's processes, the tasks (enough to fill one step; held out by whole scene / source image), the devices, the
output folder (a new run, the same run resumed with ``resume=auto``, or a refusal; ``overwrite=true`` moves an old
run aside). Each process builds its rewards and generator on its own device (:mod:`rl.devices`) and, under DeepSpeed
ZeRO-3, as whole models. Held-out evaluation and the final save are collective. At the end ``reward_curve.png`` and
``samples_first_last.png`` are drawn and ``grpo_result.json`` records the models and data, every process's devices,
the step-time split and peak memory; a run that ends short of ``trainer.max_steps`` fails with the reason.

Launches (``configs/accelerate/``): one process; several processes (DDP, ``multi_gpu.yaml``); DeepSpeed ZeRO-2
(``zero2.yaml``) and ZeRO-3 (``zero3.yaml``). FSDP is refused (held-out generation does not gather FSDP shards).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import MISSING

from reward.core.config import parse, store_schema, to_plain
from reward.core.errors import ConfigError, UserError
from reward.core.outputs import Output, prepare_output
from reward.data.files import atomic_write_json
from reward.data.images import DEFAULT_MAX_PIXELS
from reward.rewards.registry import store_reward_schemas
from rl.devices import local_rank, placed_device, resolve_devices
from rl.generators import build_generator, generator_has_device, text_budget
from rl.heldout import HeldOutEval, read_history, truncate_records
from rl.inpaint_tasks import Task, load_tasks, policy_view, split_heldout
from rl.plots import draw_run_plots, train_curve
from rl.policy import POLICY_VIEWS, PolicySettings, bf16_available, is_vlm, load_policy
from rl.processes import gather, on_main, wait_for_everyone
from rl.rewards import InpaintingRewards, RewardSet, reward_configs, reward_has_device
from rl.timing import StepClock, StopRequests, mean_timing, peak_memory_gib, step_split, timed_trainer
from training.shared import (
    LoraSettings,
    last_complete_checkpoint,
    load_checkpoint_weights,
    lora_config,
    restored_weights_quiet,
    uses_deepspeed,
    zero3_init_off,
)

logger = logging.getLogger(__name__)

DEFAULT_TEMPLATE = (
    "Expand this prompt for inpainting the masked region of an interior photo into one detailed, vivid "
    "description of the finished room: {prompt}"
)


@dataclass
class PromptSettings:
    template: str = DEFAULT_TEMPLATE  # the user turn; {prompt} is the task's base prompt
    system: str | None = None  # optional system turn


@dataclass
class EvalSettings:
    every: int = 10  # held-out evaluation every K steps (0: off)
    max_new_tokens: int | None = None  # null: trainer.max_completion_length


def _paper_trainer() -> dict[str, Any]:
    """trl.GRPOConfig fields with the paper's defaults; any other field is added with +trainer.NAME=VALUE."""
    return {
        "num_generations": 8,  # group size G (the paper: 8)
        # completions per process and step: 32 = the paper's 4 prompts x 8 with one process; with N processes a
        # step takes N x 32 / 8 prompts, so use 32 / N for the paper's batch (groups may span processes)
        "per_device_train_batch_size": 32,
        "gradient_accumulation_steps": 1,
        "max_completion_length": None,  # null: the generator's text budget (CLIP 77; FLUX Fill's T5: 512)
        "temperature": 1.0,
        "learning_rate": 1.0e-6,
        "beta": 0.04,  # KL to the reference policy (0 drops the reference model)
        "max_steps": 500,
        "lr_scheduler_type": "constant",
        "bf16": None,  # null: on where the GPU supports it
        "use_vllm": False,  # true on GPUs: trl's vLLM generation (vllm_mode colocate | server)
        "reward_weights": None,  # one per reward (reward + more_rewards); null: all 1
        "logging_steps": 1,
        "save_steps": 50,
        "save_total_limit": 2,
        "seed": 42,
        "report_to": "none",
    }


@dataclass
class GrpoSettings:
    output_dir: str = MISSING  # checkpoints, run.json, policy/, samples/, heldout.jsonl, plots, grpo_result.json
    data: str = MISSING  # inpainting tasks manifest (JSONL {"image", "mask", "prompt"[, "scene"]}) or datasets folder
    policy: PolicySettings = field(default_factory=PolicySettings)
    eval_data: str | None = None  # held-out tasks; null: whole scenes / source images from the end of data
    eval_tasks: int = 8  # tasks held out of data when eval_data is null (whole groups: possibly a few more)
    skip_bad: bool = True  # bad rows named by file:line, skipped and counted
    max_decode_pixels: int = DEFAULT_MAX_PIXELS  # decode guard: larger images are refused unread
    reward: Any = None  # reward=NAME selects configs/reward/NAME.yaml (reward.KEY=VALUE sets its keys)
    generator: Any = None  # generator=NAME selects configs/generator/NAME.yaml
    more_rewards: list[Any] = field(default_factory=list)  # further training rewards ({name: ..., ...})
    eval_rewards: list[Any] = field(default_factory=list)  # held-out only: names or {name: ..., ...}
    normalize_rewards: bool = True  # map each reward onto [0, 1] (1 = best) with its registered score_range
    lora: LoraSettings = field(default_factory=LoraSettings)
    prompt: PromptSettings = field(default_factory=PromptSettings)
    eval: EvalSettings = field(default_factory=EvalSettings)
    resume: str = "auto"  # auto: continue the same run in output_dir (refused if it is another run); never
    overwrite: bool = False  # an earlier run in output_dir is moved aside to output_dir.old-<time> (never deleted)
    seed: int = 0  # generator seeds (one per task and step, shared by the task's group)
    samples_per_step: int = 4  # images saved per step in output_dir/samples (first-vs-last grid; main process)
    trainer: dict[str, Any] = field(default_factory=_paper_trainer)  # trl.GRPOConfig fields


store_schema("grpo_schema", GrpoSettings)
store_reward_schemas()

# settings that may differ when a run is resumed: they change how long it runs, what it logs or where the models sit,
# not what it learns
MAY_CHANGE = (
    "output_dir",
    "resume",
    "overwrite",
    "samples_per_step",
    "eval.every",
    "trainer.max_steps",
    "trainer.logging_steps",
    "trainer.logging_first_step",
    "trainer.save_steps",
    "trainer.save_total_limit",
    "trainer.report_to",
    "trainer.dataloader_num_workers",
    "reward.device",
    "reward.backend",
    "reward.server",
    "reward.batch_size",
    "generator.device",
    "generator.batch_size",
)
MODEL_KEYS = ("path", "model", "protocol", "fusion", "memory")  # config keys of rewards and generators naming inputs


RESUME = {"auto": True, "true": True, "never": False, "false": False}  # true / false: the other commands' spelling


class RunIncomplete(UserError):
    """Training ended before ``trainer.max_steps`` without anything asking it to stop."""


def parse_settings(cfg: Any) -> GrpoSettings:
    """Typed settings; unknown, missing or mistyped keys of every section are reported together."""
    s = parse(GrpoSettings, cfg, where="")
    _validate(s)
    return s


def _validate(s: GrpoSettings) -> None:
    problems = []
    if str(s.resume).lower() not in RESUME:
        problems.append(f"resume={s.resume!r}: use auto (continue the same run) or never (a new run only)")
    if s.policy.vision not in ("auto", True, False, "true", "false"):
        problems.append(f"policy.vision={s.policy.vision!r}: use auto, true or false")
    if s.policy.image not in POLICY_VIEWS:
        problems.append(f"policy.image={s.policy.image!r}: use {', '.join(POLICY_VIEWS)}")
    if "{prompt}" not in s.prompt.template:
        problems.append("prompt.template must contain {prompt} (where the task's base prompt goes)")
    if not s.reward or not to_plain(s.reward).get("name"):
        problems.append("no reward: choose one with reward=NAME (e.g. reward=sa-iqa reward.path=DIR)")
    if not s.generator:
        problems.append("no generator: choose one with generator=NAME (procedural, sd15-inpaint, ...)")
    if s.trainer.get("remove_unused_columns"):
        problems.append(
            "trainer.remove_unused_columns=true would drop task_id, which the rewards need; leave it unset"
        )
    n_rewards = 1 + len(s.more_rewards)
    weights = s.trainer.get("reward_weights")
    if weights is not None and len(weights) != n_rewards:
        problems.append(
            f"trainer.reward_weights has {len(weights)} weights for {n_rewards} rewards "
            "(reward + more_rewards); give one per reward"
        )
    try:  # trl's own checks of trainer.* (batch and group sizes over the processes of this launch, ...)
        args = grpo_args(s, Path(s.output_dir))
        if getattr(args, "fsdp", None) or str(getattr(args.distributed_state, "distributed_type", "")).endswith(
            "FSDP"
        ):
            problems.append("FSDP launches are not supported by rl/grpo.py: use DDP, ZeRO-2 or ZeRO-3 (README)")
    except ConfigError as err:
        problems.append(str(err))
    if problems:
        raise ConfigError("invalid grpo settings:\n  - " + "\n  - ".join(problems))


def grpo_args(s: GrpoSettings, out: Path) -> Any:
    """trl's ``GRPOConfig`` (this also sets up the launch's processes, each on its own device)."""
    from trl import GRPOConfig

    args = {
        "report_to": "none",
        "save_strategy": "steps",
        "logging_steps": 1,
        "logging_first_step": True,
        "log_completions": False,
        **s.trainer,
        "remove_unused_columns": False,  # the rewards need task_id
    }
    if args.get("bf16") is None:
        args["bf16"] = bf16_available()
    if args.get("max_completion_length") is None:
        args["max_completion_length"] = text_budget(s.generator) if s.generator else 77
    if not torch.cuda.is_available():
        args.setdefault("use_cpu", True)
    try:
        return GRPOConfig(output_dir=str(out), **args)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"invalid trainer.* settings (trl.GRPOConfig): {err}") from None


def build_messages(task: Task, s: GrpoSettings, vision: bool) -> list[dict[str, Any]]:
    text = s.prompt.template.format(prompt=task.prompt)
    user: Any = [{"type": "image"}, {"type": "text", "text": text}] if vision else text
    messages = [{"role": "system", "content": s.prompt.system}] if s.prompt.system else []
    return messages + [{"role": "user", "content": user}]


def task_split(s: GrpoSettings, with_eval: bool) -> tuple[list[Task], list[Task], int]:
    """Training and held-out tasks, and the number of bad rows; held out by whole scene / source image, and a
    held-out set given as ``eval_data`` shares no scene or image with the training tasks."""
    train, skipped = load_tasks(s.data, skip_bad=s.skip_bad, max_pixels=s.max_decode_pixels)
    n_bad = len(skipped)
    heldout: list[Task] = []
    if with_eval and s.eval_data:
        heldout, skipped_eval = load_tasks(s.eval_data, skip_bad=s.skip_bad, max_pixels=s.max_decode_pixels)
        n_bad += len(skipped_eval)
        shared = {t.group for t in heldout} & {t.group for t in train}
        if shared:
            raise ConfigError(
                f"eval_data={s.eval_data} shares {len(shared)} scene(s) / source image(s) with data={s.data} (e.g. "
                f"{sorted(shared)[0]}): held-out rewards would measure memory, not generalisation; remove them"
            )
    elif with_eval:
        if len(train) < 2 * s.eval_tasks:
            raise ConfigError(
                f"{s.data}: {len(train)} tasks are too few to hold out eval_tasks={s.eval_tasks}; "
                "give eval_data=TASKS.jsonl, lower eval_tasks, or eval.every=0"
            )
        train, heldout = split_heldout(train, s.eval_tasks)
    if not train:
        raise ConfigError(f"{s.data}: no usable tasks ({n_bad} bad rows); see the warnings above")
    return train, heldout, n_bad


def check_fills_a_step(train: list[Task], args: Any, s: GrpoSettings) -> int:
    """Prompts per step (over all processes); refuses when the training tasks cannot fill one step (trl would train
    0 steps and save the untrained policy)."""
    prompts = args.generation_batch_size // args.num_generations
    if len(train) < prompts:
        raise ConfigError(
            f"{len(train)} training tasks cannot fill one GRPO step: a step takes {prompts} prompts "
            f"({args.world_size} process(es) x trainer.per_device_train_batch_size={args.per_device_train_batch_size}"
            f" x steps_per_generation={args.steps_per_generation} = {args.generation_batch_size} completions, "
            f"trainer.num_generations={args.num_generations} per prompt). Lower trainer.per_device_train_batch_size "
            f"(or the number of processes), or give more tasks in data={s.data}"
            + (f" ({s.eval_tasks} are held out: eval_tasks)" if not s.eval_data and s.eval.every > 0 else "")
        )
    per_epoch = len(train) // prompts * prompts
    logger.info(
        "%d training tasks, %d prompts x %d completions per step (%d process(es)); %d tasks used per epoch",
        len(train),
        prompts,
        args.num_generations,
        args.world_size,
        per_epoch,
    )
    return prompts


def _inputs(s: GrpoSettings) -> dict[str, Any]:
    """Every input the run reads, for the run's identity (fingerprinted) and provenance."""
    inputs: dict[str, Any] = {"policy": s.policy.path, "data": s.data, "eval_data": s.eval_data}
    for role, entries in (("reward", [s.reward, *s.more_rewards]), ("eval_reward", s.eval_rewards)):
        for i, (name, cfg) in enumerate(reward_configs(entries)):
            for key in MODEL_KEYS:
                if isinstance(cfg.get(key), str):
                    inputs[f"{role}{i}.{name}.{key}"] = cfg[key]
    gen = to_plain(s.generator) if s.generator else {}
    if isinstance(gen.get("path"), str):
        inputs["generator"] = gen["path"]
    return inputs


def prepare(s: GrpoSettings, out: Path, *, create: bool = True) -> Output | None:
    """The run's output folder (main process): new, the same run resumed (``resume=auto``), or refused. With
    ``create=False`` only a refusal is checked and nothing is written, so that it comes before any model loads (a
    folder created then would hold a run whose models never loaded)."""
    if not create and (s.overwrite or not (out.is_dir() and any(out.iterdir()))) and not out.is_file():
        return None
    settings = json.loads(json.dumps(asdict(s), default=str))
    return prepare_output(
        out,
        "grpo",
        settings,
        _inputs(s),
        resume=RESUME[str(s.resume).lower()],
        overwrite=s.overwrite,
        may_change=MAY_CHANGE,
        resume_hint="resume=auto",
        out_key="output_dir",
    )


def checkpoint_step(checkpoint: str | None) -> int:
    """Updates done at a checkpoint (``trainer_state.json``'s ``global_step``; 0 for no checkpoint)."""
    if not checkpoint:
        return 0
    state = Path(checkpoint) / "trainer_state.json"
    if state.is_file():
        return int(json.loads(state.read_text()).get("global_step", 0))
    return int(Path(checkpoint).name.rsplit("-", 1)[-1])


def run(cfg: Any, callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Validate, build, train, plot; returns a summary (also ``output_dir/grpo_result.json``)."""
    from datasets import Dataset

    s = parse_settings(cfg)
    out = Path(s.output_dir)
    vision = is_vlm(s.policy.path, s.policy.vision)
    with_eval = s.eval.every > 0
    args = grpo_args(s, out)
    train, heldout, n_bad = task_split(s, with_eval)
    check_fills_a_step(train, args, s)
    train_entries = resolve_devices([s.reward, *s.more_rewards], schema_has_device=reward_has_device, where="reward")
    eval_entries = resolve_devices(s.eval_rewards, schema_has_device=reward_has_device, where="eval_rewards")
    (generator_cfg,) = resolve_devices([s.generator], schema_has_device=generator_has_device, where="generator")

    on_main(lambda: prepare(s, out, create=False))  # a refused output_dir fails here, before any model loads

    with zero3_init_off(args):  # whole models on every process, never ZeRO-3 partitions of the policy's engine
        rewards = RewardSet(train_entries, normalize=s.normalize_rewards)
        eval_set = None
        if with_eval:
            built = {r.label: r.reward for r in rewards.rewards}
            eval_set = RewardSet([*train_entries, *eval_entries], normalize=s.normalize_rewards, built=built)
        generator = build_generator(generator_cfg)
    output = on_main(lambda: prepare(s, out))  # decided once, by the main process
    assert output is not None
    resume_from = None
    if output.resumed:
        resume_from = last_complete_checkpoint(out, main_process=args.process_index == 0)
        if args.process_index == 0:
            truncate_records(out, checkpoint_step(resume_from))
        logger.info("resuming the run in %s from %s", out, resume_from or "its start (no checkpoint yet)")
    wait_for_everyone()
    model, processing_class = load_policy(s.policy, s.lora, vision, args)
    restored = bool(resume_from) and not s.lora.enabled and not uses_deepspeed(args)
    restored = restored and load_checkpoint_weights(model, resume_from)  # the trainer's own resume misses the keys
    adapter = InpaintingRewards(
        generator,
        rewards,
        {t.id: t for t in [*train, *heldout]},
        seed=s.seed,
        samples_dir=out / "samples",
        samples_per_step=s.samples_per_step,
        write_samples=args.process_index == 0,
    )
    rows = []
    for t in train:
        row: dict[str, Any] = {"prompt": build_messages(t, s, vision), "task_id": t.id}
        if vision:
            row["image"] = policy_view(t, s.policy.image)
        rows.append(row)
    clock = StepClock()
    callbacks = [clock, *(callbacks or [])]  # the clock first: a step ends before held-out evaluation starts
    heldout_cb = None
    if eval_set is not None:
        heldout_cb = HeldOutEval(
            heldout,
            lambda t: build_messages(t, s, vision),
            adapter,
            eval_set,
            every=s.eval.every,
            max_new_tokens=s.eval.max_new_tokens or args.max_completion_length or 64,
            history=out / "heldout.jsonl",
            view=(lambda t: policy_view(t, s.policy.image)) if vision else None,
        )
        callbacks.append(heldout_cb)
    trainer = timed_trainer()(
        model=model,
        reward_funcs=adapter.functions(),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=processing_class,
        peft_config=lora_config(s.lora) if s.lora.enabled else None,
        callbacks=callbacks,
    )
    if heldout_cb is not None:
        heldout_cb.trainer = trainer
    stop = StopRequests()
    trainer.add_callback(stop)  # last: it sees what every other callback asked for
    start = time.perf_counter()
    with restored_weights_quiet() if restored else contextlib.nullcontext():  # its key warnings are moot
        train_out = trainer.train(resume_from_checkpoint=resume_from)
    elapsed = time.perf_counter() - start
    trainer.save_model(str(out / "policy"))  # collective under ZeRO-3 (gathers the weights); the main process writes
    me = {
        "process": args.process_index,
        "local_rank": local_rank(),
        "devices": {
            "policy": placed_device(trainer.model) or str(trainer.accelerator.device),
            "generator": placed_device(generator) or str(getattr(generator, "device", "cpu")),
            **{f"reward:{r.label}": placed_device(r.reward) or "none" for r in rewards.rewards},
            **{
                f"eval_reward:{r.label}": placed_device(r.reward) or "none"
                for r in (eval_set.rewards if eval_set else [])
                if r.label not in rewards.labels
            },
        },
        "timing": step_split(clock, trainer.policy_generate_s, adapter.timing.inpaint_s, adapter.timing.reward_s),
        "heldout_s": heldout_cb.seconds if heldout_cb else 0.0,
        "peak_memory_gib": peak_memory_gib(),
    }
    processes = gather(me)  # collective
    complete = train_out.global_step >= trainer.state.max_steps or stop.requested_at is not None
    result: dict[str, Any] = {
        "global_step": train_out.global_step,
        "max_steps": trainer.state.max_steps,
        "complete": complete,
        "stopped_by_callback_at": stop.requested_at,
        "resumed": output.resumed,
        "skipped_rows": n_bad,
        "tasks": {"train": len(train), "heldout": len(heldout)},
        "output_dir": str(out),
        "policy_dtype": str(next(model.parameters()).dtype),
        "rewards": rewards.labels,
        "eval_rewards": eval_set.labels if eval_set else [],
        "provenance": output.provenance(),
        "processes": processes,
        "timing": {"train_s": elapsed, **mean_timing(processes)},
    }
    if trainer.is_world_process_zero():
        processing_class.save_pretrained(str(out / "policy"))
        result["policy"] = str(out / "policy")
        result["train_curve"] = train_curve(trainer.state.log_history, rewards.labels)
        log = trainer.state.log_history
        result["frac_reward_zero_std"] = [
            (e["step"], e["frac_reward_zero_std"]) for e in log if "frac_reward_zero_std" in e
        ]
        result["plots"] = draw_run_plots(out, result["train_curve"], read_history(out / "heldout.jsonl"))
        atomic_write_json(out / "grpo_result.json", result)
    if not complete:
        raise RunIncomplete(
            f"GRPO ended after {train_out.global_step} of {trainer.state.max_steps} steps: the training tasks ran out "
            f"(the trainer found no full batch of prompts). The policy so far is in {out / 'policy'}; "
            "see grpo_result.json"
        )
    return result
