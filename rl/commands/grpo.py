"""What ``rl/grpo.py`` does, as a function of its config: GRPO prompt expansion (SA-IQA §4.4, App. D.3) with trl.

The policy (a text LM, or a VLM that sees the image to complete) expands each task's base prompt; the generator
inpaints the expansion into the task; registered rewards score the result (:mod:`rl.rewards`). Everything is
validated and built before the first step (all problems at once); a resumed run must be the same run; at the end
``reward_curve.png`` (training and held-out rewards) and ``samples_first_last.png`` are drawn.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import MISSING

from reward.core.config import parse, store_schema, to_plain
from reward.core.errors import ConfigError, MissingInputError
from reward.data.files import atomic_write_json, read_records
from reward.data.images import DEFAULT_MAX_PIXELS
from reward.rewards.registry import store_reward_schemas
from rl.generators import build_generator
from rl.heldout import HeldOutEval, read_history
from rl.inpaint_tasks import Task, load_tasks
from rl.plots import image_grid, reward_curves
from rl.rewards import InpaintingRewards, RewardSet
from training.shared import (
    LoraSettings,
    load_checkpoint_weights,
    lora_config,
    resume_checkpoint,
    save_run_config,
    uses_deepspeed,
)

logger = logging.getLogger(__name__)

DEFAULT_TEMPLATE = (
    "Expand this prompt for inpainting the masked region of an interior photo into one detailed, vivid "
    "description of the finished room: {prompt}"
)


@dataclass
class PolicySettings:
    path: str = MISSING  # the prompt-expansion model: a causal LM or a VLM (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) directory
    dtype: str = "auto"  # auto: bf16 on GPU, fp32 on CPU
    vision: str = "auto"  # auto: a VLM (it sees the task image) if its config has a vision part; true; false
    freeze_vision: bool = True  # VLM policy: the vision tower stays frozen


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
        "per_device_train_batch_size": 32,  # completions per step: 4 prompts x 8 generations (the paper's batch 4)
        "gradient_accumulation_steps": 1,
        "max_completion_length": 77,  # tokens of the expanded prompt (CLIP's limit)
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
    output_dir: str = MISSING  # checkpoints, run_config.json, policy/, samples/, heldout.jsonl, plots, result
    data: str = MISSING  # inpainting tasks manifest (JSONL {"image", "mask", "prompt"}) or datasets folder
    policy: PolicySettings = field(default_factory=PolicySettings)
    eval_data: str | None = None  # held-out tasks; null: the last eval_tasks tasks of data are held out
    eval_tasks: int = 8  # tasks held out of data when eval_data is null
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
    resume: str = "auto"  # auto: continue from output_dir's last checkpoint; never: start over
    seed: int = 0  # generator seeds (one per task and step, shared by the task's group)
    samples_per_step: int = 4  # images saved per step in output_dir/samples (first-vs-last grid)
    trainer: dict[str, Any] = field(default_factory=_paper_trainer)  # trl.GRPOConfig fields


store_schema("grpo_schema", GrpoSettings)
store_reward_schemas()
COMPAT_KEYS = ("policy", "lora", "prompt", "reward", "more_rewards", "generator", "data")


def parse_settings(cfg: Any) -> GrpoSettings:
    """Typed settings; unknown, missing or mistyped keys of every section are reported together."""
    s = parse(GrpoSettings, cfg, where="")
    _validate(s)
    return s


def _validate(s: GrpoSettings) -> None:
    problems = []
    if s.resume not in ("auto", "never"):
        problems.append(f"resume={s.resume!r}: use auto (continue from the last checkpoint) or never")
    if s.policy.vision not in ("auto", True, False, "true", "false"):
        problems.append(f"policy.vision={s.policy.vision!r}: use auto, true or false")
    if "{prompt}" not in s.prompt.template:
        problems.append("prompt.template must contain {prompt} (where the task's base prompt goes)")
    if not s.reward or not to_plain(s.reward).get("name"):
        problems.append("no reward: choose one with reward=NAME (e.g. reward=sa-iqa reward.path=DIR)")
    if not s.generator:
        problems.append("no generator: choose one with generator=NAME (procedural, sd15-inpaint, ...)")
    n_rewards = 1 + len(s.more_rewards)
    weights = s.trainer.get("reward_weights")
    if weights is not None and len(weights) != n_rewards:
        problems.append(
            f"trainer.reward_weights has {len(weights)} weights for {n_rewards} rewards "
            "(reward + more_rewards); give one per reward"
        )
    try:  # trl's own checks of trainer.* (batch and group sizes over the processes of this launch, ...)
        grpo_args(s, Path(s.output_dir))
    except ConfigError as err:
        problems.append(str(err))
    if problems:
        raise ConfigError("invalid grpo settings:\n  - " + "\n  - ".join(problems))


def _compat_view(s: GrpoSettings) -> dict[str, Any]:
    d = asdict(s)
    return json.loads(json.dumps({k: d[k] for k in COMPAT_KEYS}, default=str))


def check_resume(out: Path, s: GrpoSettings) -> str | None:
    """The checkpoint to resume from (``None``: fresh start); a different earlier run in ``out`` is an error."""
    return resume_checkpoint(out, s.resume, _compat_view(s))


def is_vlm(path: str, vision: str | bool) -> bool:
    """Whether the policy is a VLM (it then sees the task image): from ``policy.vision`` or its config."""
    if vision in (True, "true"):
        return True
    if vision in (False, "false"):
        return False
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise MissingInputError(
            f"policy.path={path!r}: cannot read its config ({err}); point it at a model directory"
        ) from err
    return getattr(config, "vision_config", None) is not None


def grpo_args(s: GrpoSettings, out: Path) -> Any:
    from trl import GRPOConfig

    args = {
        "report_to": "none",
        "save_strategy": "steps",
        "logging_steps": 1,
        "logging_first_step": True,
        "remove_unused_columns": False,
        "log_completions": False,
        **s.trainer,
    }
    if args.get("bf16") is None:
        args["bf16"] = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
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
    train, skipped = load_tasks(s.data, skip_bad=s.skip_bad, max_pixels=s.max_decode_pixels)
    n_bad = len(skipped)
    heldout: list[Task] = []
    if with_eval and s.eval_data:
        heldout, skipped_eval = load_tasks(s.eval_data, skip_bad=s.skip_bad, max_pixels=s.max_decode_pixels)
        n_bad += len(skipped_eval)
    elif with_eval:
        if len(train) < 2 * s.eval_tasks:
            raise ValueError(
                f"{s.data}: {len(train)} tasks are too few to hold out eval_tasks={s.eval_tasks}; "
                "give eval_data=TASKS.jsonl, lower eval_tasks, or eval.every=0"
            )
        train, heldout = train[: -s.eval_tasks], train[-s.eval_tasks :]
    if not train:
        raise ValueError(f"{s.data}: no usable tasks ({n_bad} bad rows); see the warnings above")
    return train, heldout, n_bad


def load_policy(s: GrpoSettings, vision: bool) -> tuple[Any, Any]:
    from reward.vlm import load_processor, resolve_dtype

    dtype = resolve_dtype(s.policy.dtype)
    if vision:
        from training.shared import freeze_vision, load_for_training

        model = load_for_training(s.policy.path, dtype)
        if s.policy.freeze_vision:
            freeze_vision(model, vision=True, aligner=True)
        return model, load_processor(s.policy.path)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(s.policy.path)
    if tokenizer.chat_template is None:
        raise ValueError(f"{s.policy.path}: the tokenizer has no chat template; GRPO prompts are chat turns")
    return AutoModelForCausalLM.from_pretrained(s.policy.path, dtype=dtype), tokenizer


def run(cfg: Any, callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Validate, build, train, plot; returns a summary (also ``output_dir/grpo_result.json``)."""
    from datasets import Dataset
    from trl import GRPOTrainer

    s = parse_settings(cfg)
    out = Path(s.output_dir)
    vision = is_vlm(s.policy.path, s.policy.vision)
    with_eval = s.eval.every > 0
    args = grpo_args(s, out)
    train, heldout, n_bad = task_split(s, with_eval)
    rewards = RewardSet([s.reward, *s.more_rewards], normalize=s.normalize_rewards)
    eval_set = None
    if with_eval:
        built = {r.label: r.reward for r in rewards.rewards}
        entries = [s.reward, *s.more_rewards, *s.eval_rewards]
        eval_set = RewardSet(entries, normalize=s.normalize_rewards, built=built)
    generator = build_generator(s.generator)
    resume_from = check_resume(out, s)
    model, processing_class = load_policy(s, vision)
    if resume_from and not s.lora.enabled and not uses_deepspeed(args):
        load_checkpoint_weights(model, resume_from)  # the trainer's own resume misses Qwen-VL checkpoint keys
    out.mkdir(parents=True, exist_ok=True)
    save_run_config(out, _compat_view(s))
    adapter = InpaintingRewards(
        generator,
        rewards,
        {t.id: t for t in [*train, *heldout]},
        seed=s.seed,
        samples_dir=out / "samples",
        samples_per_step=s.samples_per_step,
    )
    rows = []
    for t in train:
        row: dict[str, Any] = {"prompt": build_messages(t, s, vision), "task_id": t.id}
        if vision:
            row["image"] = t.image
        rows.append(row)
    callbacks = list(callbacks or [])
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
            vision=vision,
        )
        callbacks.append(heldout_cb)
    trainer = GRPOTrainer(
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
    start = time.perf_counter()
    train_out = trainer.train(resume_from_checkpoint=resume_from)
    elapsed = time.perf_counter() - start
    result: dict[str, Any] = {
        "global_step": train_out.global_step,
        "skipped_rows": n_bad,
        "output_dir": str(out),
        "rewards": rewards.labels,
        "eval_rewards": eval_set.labels if eval_set else [],
    }
    if trainer.is_world_process_zero():
        trainer.save_model(str(out / "policy"))
        processing_class.save_pretrained(str(out / "policy"))
        result["policy"] = str(out / "policy")
        result["train_curve"] = train_curve(trainer.state.log_history, rewards.labels)
        log = trainer.state.log_history
        result["frac_reward_zero_std"] = [
            (e["step"], e["frac_reward_zero_std"]) for e in log if "frac_reward_zero_std" in e
        ]
        result["timing"] = {
            "train_s": elapsed,
            "generate_s": adapter.timing.generate_s,
            "reward_s": adapter.timing.reward_s,
            "generate_share": adapter.timing.generate_s / elapsed if elapsed else None,
            "reward_share": adapter.timing.reward_s / elapsed if elapsed else None,
        }
        result["plots"] = draw_plots(out, result["train_curve"], read_history(out / "heldout.jsonl"))
        atomic_write_json(out / "grpo_result.json", result)
    return result


def train_curve(log_history: list[dict[str, Any]], labels: list[str]) -> dict[str, list[tuple[int, float, float]]]:
    """Per reward: (step, mean, std) of the logged training rewards (trl's ``rewards/<name>/mean|std``)."""
    curve: dict[str, list[tuple[int, float, float]]] = {label: [] for label in labels}
    for entry in log_history:
        for label in labels:
            mean = entry.get(f"rewards/{label}/mean")
            if mean is not None and "step" in entry:
                curve[label].append((int(entry["step"]), float(mean), float(entry.get(f"rewards/{label}/std") or 0)))
    return curve


def draw_plots(out: Path, curve: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, str]:
    labels = sorted({k for row in history for k in row if k not in ("step", "counts", "example")})
    heldout = {k: [(r["step"], r[k]) for r in history if r.get(k) is not None] for k in labels}
    plots = {"reward_curve": str(reward_curves(curve, heldout, out / "reward_curve.png"))}
    samples = out / "samples" / "samples.jsonl"
    if samples.is_file():
        from PIL import Image

        rows = read_records(samples)
        if rows:
            first, last = min(r["step"] for r in rows), max(r["step"] for r in rows)

            def cells(step: int) -> list[tuple[Any, list[str]]]:
                picked = [r for r in rows if r["step"] == step and Path(r["path"]).is_file()]
                return [
                    (
                        Image.open(r["path"]),
                        [f"reward {r['reward']:.3f}" if r["reward"] is not None else "failed", r["prompt"][:40]],
                    )
                    for r in picked
                ]

            path = image_grid(
                [cells(first), cells(last)],
                out / "samples_first_last.png",
                row_titles=[f"step {first}", f"step {last}"],
            )
            plots["samples"] = str(path)
    return plots
