"""RL GPU check: GRPO steps on one GPU with a random-weight policy, a random 7B-class Qwen2.5-VL reward and the tiny
FLUX Fill pipeline, with the reward in-process and then behind the loopback OpenAI-compatible server.

    bash bench/rl_gpu_check.sh                     # one GPU (H200: ~4-6 min); prints one table
    bash bench/rl_gpu_check.sh --dry-run           # the same sections on tiny models on the CPU (a test runs it)
    bash bench/rl_gpu_check.sh --out DIR           # also writes DIR/rl_gpu_check.json ([section, metric, value] rows)
    bash bench/rl_gpu_check.sh --reward-model DIR  # score with this VLM checkpoint instead of building the 7B one

Per GRPO section: steps, the policy's dtype and the fraction of its weights changed at the paper's lr 1e-6, every
model's device, seconds per step by part, peak memory (served: the server's requests and failures). Then served vs
in-process scores, each tiny diffusers pipeline in its auto dtype, and GRPO with trl's default KL term under
DeepSpeed ZeRO-3 (a full and a LoRA policy). ``bench/gpu_all.py`` runs this check as its ``rl`` stage.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from common import (
    QWEN25_VL_7B_TEXT,
    QWEN25_VL_7B_VISION,
    ROOT,
    TINY_TEXT,
    TINY_VISION,
    Table,
    arguments,
    build_checkpoint,
    guarded,
    logger,
    tensors,
    workdir,
)
from transformers import TrainerCallback

SECTIONS = (
    "rl grpo in-process reward",
    "rl grpo served reward",
    "rl served vs in-process scores",
    "rl generators",
    "rl grpo zero3 kl",
    "rl grpo zero3 kl lora",
)
PARTS = ("grpo", "parity", "generators", "zero3", "served")  # --only's names of the sections, in the order they run


@dataclass
class Parts:
    """What the GRPO sections share: tasks, policy, generator pipeline and reward checkpoint."""

    tasks: Path
    policy: Path
    pipeline: Path
    reward: Path
    work: Path
    dry_run: bool
    steps: int


class WeightWatch(TrainerCallback):
    """The fraction of the policy's trainable elements that differ after training from before."""

    def __init__(self) -> None:
        self.before: dict[str, torch.Tensor] = {}
        self.changed: float | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self.before = {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters() if p.requires_grad}

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        now = dict(model.named_parameters())
        moved = sum(int((now[n].detach().cpu() != p).sum()) for n, p in self.before.items())
        self.changed = moved / max(1, sum(p.numel() for p in self.before.values()))


def build_parts(
    table: Table, work: Path, *, dry_run: bool, reward_model: Path | None, steps: int, scored: bool = True
) -> Parts:
    """Procedural tasks, a random text policy, the tiny FLUX Fill pipeline and the reward VLM (built unless given,
    or unless no section scores with it: ``scored``)."""
    from reward.testing import make_tiny_inpaint_pipeline, make_tiny_lm
    from training.procedural.synthetic import write_inpainting_tasks

    side = 64 if dry_run else 448
    tasks = write_inpainting_tasks(work / "tasks", 24, size=side, mask_fraction=0.6)
    hidden, layers = (64, 2) if dry_run else (1024, 12)  # ~0.1B parameters on the GPU
    policy = make_tiny_lm(work / "policy", hidden=hidden, layers=layers)
    pipeline = make_tiny_inpaint_pipeline(work / "flux-fill", "flux-fill")
    if reward_model is None and scored:
        text, vision = (TINY_TEXT, TINY_VISION) if dry_run else (QWEN25_VL_7B_TEXT, QWEN25_VL_7B_VISION)
        reward_model = build_checkpoint(work / "reward-vlm", text, vision, side * side)
    table.add("rl setup", "reward model", str(reward_model) if reward_model else "none (no section scores with it)")
    table.add("rl setup", "policy parameters (M)", round(sum(t.numel() for t in tensors(policy).values()) / 1e6, 1))
    return Parts(tasks, policy, pipeline, Path(reward_model or work / "no-reward"), work, dry_run, steps)


def _overrides(p: Parts, out: Path) -> list[str]:
    dry = p.dry_run
    return [
        *(f"policy.path={p.policy}", f"data={p.tasks}", f"out={out}", "generator=flux-fill"),
        *(f"generator.path={p.pipeline}", f"generator.steps={2 if dry else 4}", "generator.size_multiple=16"),
        *(f"generator.max_sequence_length={64 if dry else 128}", f"trainer.max_steps={p.steps}"),
        "trainer.num_generations=4",
        "trainer.per_device_train_batch_size=16",  # 4 prompts x 4 completions a step
        *("trainer.gradient_accumulation_steps=1", f"trainer.max_completion_length={8 if dry else 48}"),
        "trainer.learning_rate=1e-6",  # the paper's: what pure-bf16 AdamW rounds away
        "trainer.save_steps=1000",
        f"eval.every={p.steps}",  # held-out before and after, collective
        *("eval_tasks=4", "samples_per_step=2"),
    ]


def grpo_section(table: Table, p: Parts, *, served: bool) -> None:
    """One GRPO run; its rows: steps, precision, devices, step-time split, memory (+ the server's figures)."""
    from reward.core.cli import compose
    from reward.core.config import parse
    from reward.testing.openai_server import serve_openai
    from reward.vlm import load_vlm
    from rl.commands.grpo import run as run_grpo
    from rl.commands.grpo_settings import GrpoSettings
    from rl.devices import process_device

    name = SECTIONS[1] if served else SECTIONS[0]
    reward = ["reward=qbench", f"reward.model={p.reward}", "reward.batch_size=16"]
    stats: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        if served:
            vlm = load_vlm(p.reward, batch_size=16)
            url = stack.enter_context(serve_openai(vlm, model_name="scorer", stats=stats))
            # every token's log-prob: a random reward's answer words are outside any short top-k, and an item whose
            # options the answer does not list fails (never a made-up 0.5)
            vocab = int(vlm.model.config.get_text_config().vocab_size)
            server = f"{{base_urls: ['{url}'], model: scorer, top_logprobs: {vocab}, concurrency: 8}}"
            reward += ["reward.backend=openai", f"reward.server={server}"]
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        watch = WeightWatch()
        out = p.work / ("grpo-served" if served else "grpo-local")
        cfg = parse(GrpoSettings, compose("grpo", overrides=[*_overrides(p, out), *reward], schema=GrpoSettings))
        start = time.perf_counter()
        result = run_grpo(cfg, callbacks=[watch])
        table.add(name, "wall seconds (load + train + save)", round(time.perf_counter() - start, 1))
    me = result["processes"][0]
    table.add(name, "steps done", f"{result['global_step']} of {result['max_steps']}")
    table.add(name, "policy dtype (dtype=auto, full fine-tuning)", result["policy_dtype"])
    table.add(name, "policy elements changed (lr 1e-6)", watch.changed)
    expected = process_device(None)
    for role, device in me["devices"].items():
        table.add(name, f"device {role}", device)
    # a served reward has no model here ("none")
    wrong = {k: v for k, v in me["devices"].items() if v not in ("none", expected)}
    table.add(name, f"devices as configured ({expected})", "yes" if not wrong else f"NO: {wrong}")
    for part, seconds in me["timing"]["per_step_s"].items():
        table.add(name, f"s/step {part}", seconds)
    table.add(name, "s/step total", me["timing"]["step_s"])
    table.add(name, "held-out evaluation s (2 rounds)", me["heldout_s"])
    table.add(name, "peak GPU memory GiB", me["peak_memory_gib"] if me["peak_memory_gib"] is not None else "n/a")
    table.add(name, "mean reward per step", [round(m, 4) for _, m, _ in result["train_curve"]["qbench"]])
    if served:
        table.add(name, "server requests answered", stats.get("requests", 0))
        table.add(name, "failed scores (counted)", result["reward_failures"]["unusable"])
        reasons = result["reward_failures"]["servers"]["qbench"]["failed_reasons"]
        table.add(name, "served reward failures (reasons)", reasons or "none")


def launch_error(output: str) -> str:
    """A failed launch's own error: the last exception line of a rank (``[rank0]: ValueError: ...``), else the last
    exception line at all (the launcher's ``ChildFailedError`` follows the rank's)."""
    found = [
        ln.strip() for ln in output.splitlines() if re.match(r"\s*(\[rank\d+\]:\s*)?[\w.]+(Error|Exception):", ln)
    ]
    return ([ln for ln in found if ln.startswith("[rank")] or found or ["no exception line; see the log"])[-1]


def zero3_section(table: Table, p: Parts, *, lora: bool) -> None:
    """GRPO with trl's default KL term (beta 0.04) under ``accelerate launch --use_deepspeed --zero_stage 3``, one
    process per GPU (one on the CPU): a reference model built inside ``zero.Init`` and sharded like the policy, or
    with LoRA the policy with its adapter disabled."""
    name = SECTIONS[5] if lora else SECTIONS[4]
    out = p.work / ("grpo-zero3-lora" if lora else "grpo-zero3")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    cmd = [
        *(sys.executable, "-m", "accelerate.commands.launch", "--use_deepspeed", "--zero_stage", "3"),
        *("--num_processes", str(max(gpus, 1)), "--mixed_precision", "bf16" if gpus else "no"),
        *(str(ROOT / "rl/grpo.py"), f"policy.path={p.policy}", f"data={p.tasks}", f"out={out}", "reward=scene-proxy"),
        *("generator=procedural", f"trainer.max_steps={p.steps}", "trainer.num_generations=4"),
        *("trainer.per_device_train_batch_size=8", "trainer.gradient_accumulation_steps=1"),
        *(f"trainer.max_completion_length={8 if p.dry_run else 48}", "trainer.learning_rate=1e-5"),
        *("trainer.save_steps=1000", "eval.every=0", "stall_timeout_s=300", *(["lora.enabled=true"] if lora else [])),
    ]
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=p.work, env=env)
    table.add(name, "wall seconds (launch + train + save)", round(time.perf_counter() - start, 1))
    if proc.returncode != 0:  # the launcher's summary ends its output: the row names the rank's own error
        output = proc.stderr + proc.stdout
        logger.error("%s: accelerate launch exited %d; its output's end:\n%s", name, proc.returncode, output[-8000:])
        table.add(name, "exit status", f"{proc.returncode}: {launch_error(output)[:300]}")
        return
    result = json.loads((out / "grpo_result.json").read_text())
    kl = [v for _, v in result["kl"]]
    table.add(name, "steps done", f"{result['global_step']} of {result['max_steps']}")
    table.add(name, "processes", len(result["processes"]))
    table.add(name, "beta", result["beta"])
    table.add(name, "reference model", result["processes"][0]["reference"])
    table.add(name, "kl first / last step", f"{kl[0]:.3g} / {kl[-1]:.3g}" if kl else "n/a")
    table.add(name, "s/step total", result["timing"]["step_s"])
    saved = "adapter_model.safetensors" if lora else "model.safetensors"
    table.add(name, f"policy/{saved} written", "yes" if (out / "policy" / saved).is_file() else "NO")


def parity_section(table: Table, p: Parts) -> None:
    """qbench on the same images in-process and through the loopback server with every token's log-prob."""
    from reward import get_reward
    from reward.testing.openai_server import serve_openai
    from reward.vlm import load_vlm
    from rl.inpaint_tasks import load_tasks

    name = SECTIONS[2]
    images = [t.image for t in load_tasks(p.tasks)[0][:4]]
    vlm = load_vlm(p.reward, batch_size=4)
    local = get_reward("qbench", {"model": str(p.reward)}).score(images).scores
    vocab = int(vlm.model.config.get_text_config().vocab_size)
    with serve_openai(vlm, model_name="scorer") as url:
        server = {"base_urls": [url], "model": "scorer", "top_logprobs": vocab, "timeout": 300.0}
        served = get_reward("qbench", {"backend": "openai", "server": server}).score(images).scores
    table.add(name, "max |served - in-process| qbench (4 images)", float((served - local).abs().max()))
    table.add(name, "score spread (std) in-process", float(local.std()))


def generator_section(table: Table, p: Parts) -> None:
    """Each tiny diffusers pipeline with dtype=auto (bf16 on a GPU): where it runs, seconds per batched call of 2
    tasks x 4 candidates, and a candidate drawn alone against the same candidate in the batch."""
    import numpy as np

    from reward.testing import make_tiny_inpaint_pipeline
    from rl.generators import build_generator
    from rl.inpaint_tasks import load_tasks

    task = load_tasks(p.tasks)[0][0]
    for kind in ("sd15-inpaint", "sdxl-inpaint", "flux-fill"):
        path = p.pipeline if kind == "flux-fill" else make_tiny_inpaint_pipeline(p.work / kind, kind)
        extra = {"size_multiple": 16} if kind == "flux-fill" else {}
        gen = build_generator({"name": kind, "path": str(path), "steps": 3, "dtype": "auto", **extra})
        start = time.perf_counter()
        out = gen.inpaint([task.image] * 2, [task.mask] * 2, ["a bright room", "a dark room"], n=4, seed=5)
        took = time.perf_counter() - start
        alone = gen.inpaint([task.image], [task.mask], ["a dark room"], n=1, seed=7)[0][0]
        diff = np.abs(np.asarray(alone, float) - np.asarray(out[1][2], float)).max()
        table.add(SECTIONS[3], f"{kind} device / dtype", f"{gen.pipe.device} / {gen.pipe.dtype}")
        table.add(SECTIONS[3], f"{kind} s per call (2 tasks x 4)", took)
        table.add(SECTIONS[3], f"{kind} candidate alone vs batched, max |diff| (0-255)", float(diff))


def rl_sections(
    table: Table,
    *,
    dry_run: bool,
    work: Path,
    reward_model: Path | None = None,
    steps: int | None = None,
    only: Sequence[str] = PARTS,
) -> None:
    """The RL sections of ``only`` (default: every one) into ``table`` (this script's own, or another check's): setup,
    GRPO in-process, served vs in-process scores, the diffusers generators, GRPO under ZeRO-3, then GRPO with the
    served reward (last: on an H200 its loopback server, listing every log-prob, took 120 s and left the ZeRO-3
    sections no time). The 7B reward is built only for the sections that score with it."""
    steps = steps or (2 if dry_run else 3)
    scored = bool({"grpo", "parity", "served"} & set(only))
    parts = guarded(
        table,
        "rl setup",
        lambda: build_parts(table, work, dry_run=dry_run, reward_model=reward_model, steps=steps, scored=scored),
    )
    if parts is None:
        return
    if "grpo" in only:
        guarded(table, SECTIONS[0], lambda: grpo_section(table, parts, served=False))
    if "parity" in only:
        guarded(table, SECTIONS[2], lambda: parity_section(table, parts))
    if "generators" in only:
        guarded(table, SECTIONS[3], lambda: generator_section(table, parts))
    if "zero3" in only and importlib.util.find_spec("deepspeed") is not None:
        guarded(table, SECTIONS[4], lambda: zero3_section(table, parts, lora=False))
        guarded(table, SECTIONS[5], lambda: zero3_section(table, parts, lora=True))
    elif "zero3" in only:
        table.add(SECTIONS[4], "skipped", "deepspeed is not installed (pip install -e '.[deepspeed]')")
    if "served" in only:
        guarded(table, SECTIONS[1], lambda: grpo_section(table, parts, served=True))


def main(argv: list[str] | None = None) -> Table:
    args = arguments(
        __doc__,
        argv,
        gpu=True,
        reward_model={"help": "a VLM checkpoint to score with (default: build one)"},
        steps={"type": int, "help": "GRPO steps per run (default 3; dry run 2)"},
        budget_s={"type": float, "default": 420.0, "help": "start no section after this many seconds"},
        only={"default": ",".join(PARTS), "help": f"comma-separated sections to run: {','.join(PARTS)}"},
    )
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    if set(only) - set(PARTS):
        sys.exit(f"--only {sorted(set(only) - set(PARTS))}: the sections are {', '.join(PARTS)}")
    table = Table(args.budget_s)
    table.add("rl setup", "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (dry run)")
    with workdir(args.work, "rl_gpu_check_") as work:
        reward = Path(args.reward_model) if args.reward_model else None
        rl_sections(table, dry_run=args.dry_run, work=work, reward_model=reward, steps=args.steps, only=only)
    return table.finish(args.out, "rl_gpu_check.json")


if __name__ == "__main__":
    main()
