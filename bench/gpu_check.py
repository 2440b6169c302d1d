"""GPU check: scoring speed and where it goes, precision and SFT steps on a random-weight 7B-class Qwen2.5-VL.

    bash bench/gpu_check.sh                    # one GPU (H200: ~3-6 min); prints one table
    bash bench/gpu_check.sh --dry-run          # the same sections on a tiny config on the CPU (a test runs it)
    bash bench/gpu_check.sh --out DIR          # also writes DIR/gpu_check.json
    bash bench/gpu_check.sh --skip lora,zero3  # scoring only (bench/gpu_all.sh runs it so)

Scoring (the unoptimised path against the fast one): the profile before and after, images/s per batch size, % of
the bf16 peak, memory, prefix reuse, score differences; then SFT steps (LoRA on the 7B config, full under ZeRO-3 on a
smaller one). The model is Qwen2.5-VL-7B-Instruct's config (below) with random weights and the tiny offline
tokenizer. Every section is guarded: one that fails is a row of the table and the others still run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import (
    QWEN25_VL_7B_TEXT,
    QWEN25_VL_7B_VISION,
    ROOT,
    TINY_TEXT,
    TINY_VISION,
    Table,
    arguments,
    best_times,
    build_checkpoint,
    guarded,
    logger,
    noise_images,
    tensors,
    workdir,
)
from transformers import TrainerCallback

from reward.core.config import parse
from training.commands.sft_settings import SftSettings

# the smaller config for full fine-tuning under ZeRO-3: Qwen2.5-0.5B's language model, an 8-block ViT
SMALL_TEXT = {
    **QWEN25_VL_7B_TEXT,
    **{"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14},
    **{"num_key_value_heads": 2, "vocab_size": 151936, "max_window_layers": 24},
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [8, 12, 12]},  # head_dim 64
}
SMALL_VISION = {**QWEN25_VL_7B_VISION, "depth": 8, "out_hidden_size": 896, "fullatt_block_indexes": [3, 7]}
H200_BF16_PEAK_TFLOPS = 790.0  # dense bf16 matmul measured on this workplace's H200 (KINDS.md); datasheet ~990
WORDS = ("excellent", "good", "fair", "poor", "bad")
DIMENSIONS = ("layout", "harmony", "lighting", "distortion")


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], repeats: int = 2) -> tuple[float, Any]:
    """Best wall time of ``repeats`` runs after one warm-up (CUDA synchronised after each), and the last result."""
    fn()
    sync()
    [(best, _, result)] = best_times([lambda: (fn(), sync())[0]], repeats)
    return best, result


def matmul_flops_per_image(model: torch.nn.Module, n_tokens: int, n_patches: int) -> float:
    """2 x parameters x tokens over the linear layers (language model on every token, ViT on every patch, the
    output head on the answer position only); attention's own products are left out (< 2% at ~300 tokens)."""
    flops = 0.0
    head = model.get_output_embeddings()
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear):
            continue
        per_token = 2.0 * mod.weight.numel()
        flops += per_token * (1 if mod is head else n_patches if ".visual" in f".{name}" else n_tokens)
    return flops


def expected(logp: torch.Tensor) -> torch.Tensor:
    from reward.rewards.scoring import expected_value

    return expected_value(logp, torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0]))


class Scoring:
    """The scoring measurements on one loaded model, each a method run as a guarded section (``dry``: fewer images,
    batches and repeats, for the CPU dry run)."""

    def __init__(self, table: Table, ckpt: Path, side: int, peak: float | None, dry: bool) -> None:
        from scoring_paths import ScoringSpeed

        from reward.rewards.qbench import QBenchConfig, QBenchReward
        from reward.vlm import OptionQuery, load_vlm
        from reward.vlm.inputs import device_preprocessing, fast_image_processor

        self.table, self.side, self.peak, self.cuda = table, side, peak, torch.cuda.is_available()
        self.n_images, self.batches, self.workers = (16, (4, 8, 16), 2) if dry else (128, (16, 32, 64, 128), 8)
        self.repeats, self.n_prefix, self.n_mixed = (1, 4, 6) if dry else (2, 16, 16)
        self.n_prof = min(self.n_images, 64)
        self.vlm = vlm = load_vlm(ckpt, dtype="bfloat16", batch_size=16, device_map={"": 0} if self.cuda else None)
        self.old, self.fast, self.host = ScoringSpeed.unoptimised(), ScoringSpeed(), ScoringSpeed(preprocess="host")
        self.q_one = [OptionQuery("Rate the quality of the image.", WORDS, "The quality of the image is")]
        aesthetic = "the spatial aesthetic {} quality level of this image"
        self.q_dims = [
            OptionQuery(f"Please evaluate {aesthetic.format(d)}.", WORDS, aesthetic.format(d).capitalize() + " is")
            for d in DIMENSIONS
        ]
        self.imgs = [[im] for im in noise_images(self.n_images, side)]
        q = self.q_one[0]
        enc = vlm.processor(
            text=[vlm.render(1, q.question, q.response_prefix)], images=self.imgs[0], return_tensors="pt"
        )
        n_tokens, n_patches = len(enc["input_ids"][0]), int(enc["image_grid_thw"].prod(-1).sum())
        self.flops_per_image = matmul_flops_per_image(vlm.model, n_tokens, n_patches)
        table.add("setup", "tokens per query (image + text)", n_tokens)
        table.add("setup", "matmul GFLOP per image (2 x params x tokens)", self.flops_per_image / 1e9)
        self.image_processor = vlm.processor.image_processor
        self.why_not = device_preprocessing(
            fast_image_processor(self.image_processor) or self.image_processor, vlm.device
        )
        gpu_ip = "yes (torchvision)" if self.why_not is None else f"no: {self.why_not}"
        table.add("setup", "image processor on the GPU", gpu_ip)
        self.reward = QBenchReward(QBenchConfig(model="unused"), vlm=vlm)
        self.items = [(f"img{i}", g[0], i + 1) for i, g in enumerate(self.imgs)]
        self.best: dict[str, Any] = {"batch": self.batches[0], "rate": 0.0}

    def run(self) -> None:
        guarded(self.table, "profile before", self.profile_before)
        guarded(self.table, "images/s", self.images_per_s)
        guarded(self.table, "profile after", self.profile_after)
        guarded(self.table, "prefix reuse", self.prefix_reuse)
        guarded(self.table, "agreement", self.agreement)
        self.use(self.fast, self.vlm.batch_size)

    def use(self, speed: Any, batch: int) -> None:
        from scoring_paths import use_speed

        use_speed(self.vlm, speed).batch_size = batch

    def score_loop(self, items: list[Any], batch: int, workers: int, prepare: bool) -> Any:
        from reward.eval.parallel import score_images

        return score_images(self.reward, items, batch_size=batch, num_workers=workers, prepare_in_workers=prepare)

    def add_profile(self, section: str, prof: Any) -> None:
        for part, seconds in prof.parts():
            self.table.add(section, f"{part} (s, share)", f"{seconds:.3f}, {seconds / prof.total:.1%}")
        rate = self.n_prof / prof.total
        self.table.add(section, "total (s) / images/s while profiled", f"{prof.total:.3f} / {rate:.1f}")
        pad = prof.padding_share()
        self.table.add(section, "padding share of the tokens", "n/a" if pad is None else f"{pad:.1%}")

    def profile_before(self) -> None:
        from scoring_profile import profile_scoring

        self.use(self.old, 16)
        loop = self.items[: self.n_prof]
        self.score_loop(loop[:16], 16, 0, False)  # warm-up
        with profile_scoring(self.vlm.model) as prof:
            self.score_loop(loop, 16, self.workers, False)
        self.add_profile("profile before (unoptimised, batch 16)", prof)

    def images_per_s(self) -> None:
        table, vlm, imgs, best = self.table, self.vlm, self.imgs, self.best
        self.use(self.old, 16)
        t_old, _ = timed(lambda: vlm.option_logprobs(imgs[:64], self.q_one), self.repeats)
        rate_old = min(64, self.n_images) / t_old
        table.add("images/s", "unoptimised path, batch 16 (H200 before: 29.9)", rate_old)
        for b in self.batches:
            self.use(self.fast, b)
            if self.cuda:
                torch.cuda.reset_peak_memory_stats()
            t, _ = timed(lambda: vlm.option_logprobs(imgs, self.q_one), self.repeats)
            mem = torch.cuda.max_memory_allocated() / 2**30 if self.cuda else float("nan")
            table.add("images/s", f"fast path, batch {b} (peak GiB)", f"{self.n_images / t:.1f} ({mem:.1f})")
            if self.n_images / t > best["rate"]:
                best.update(batch=b, rate=self.n_images / t, memory=mem)
        tflops = self.flops_per_image * best["rate"] / 1e12
        table.add("images/s", "best batch size", best["batch"])
        table.add("images/s", "best / unoptimised batch 16", best["rate"] / rate_old)
        table.add("images/s", "achieved TFLOP/s at the best batch", tflops)
        if self.peak:
            table.add("images/s", f"fraction of the {self.peak:g} TFLOP/s bf16 peak (goal 0.5)", tflops / self.peak)
        table.add("memory", "peak GPU memory at the best batch (GiB)", best.get("memory", float("nan")))
        self.use(self.host, best["batch"])
        t_host, _ = timed(lambda: vlm.option_logprobs(imgs, self.q_one), repeats=1)
        table.add("images/s", "fast path, image processor on the host in the loop", self.n_images / t_host)
        # a batch for every worker (on the H200 one batch of 128 had one worker prepare it all, cold: 33-39 images/s)
        n_loop = max(len(self.items), self.workers * best["batch"])
        loop = [(f"img{j}", self.items[j % len(self.items)][1], j + 1) for j in range(n_loop)]
        for name, prepare in (("workers prepare the images (host processor)", True), ("workers decode only", False)):
            self.use(self.host if prepare else self.fast, best["batch"])
            t_loop, _ = timed(lambda p=prepare: self.score_loop(loop, best["batch"], self.workers, p), repeats=1)
            label = f"scoring loop ({self.workers} DataLoader workers, {n_loop} images), {name}"
            table.add("images/s", label, n_loop / t_loop)

    def profile_after(self) -> None:
        from scoring_profile import profile_scoring

        self.use(self.fast, self.best["batch"])
        with profile_scoring(self.vlm.model) as prof:
            self.vlm.option_logprobs(self.imgs[: self.n_prof], self.q_one)
        self.add_profile(f"profile after (fast path, batch {self.best['batch']})", prof)

    def prefix_reuse(self) -> None:
        some = self.imgs[: self.n_prefix]
        for name, speed in (("fast", self.fast), ("unoptimised", self.old)):
            self.use(speed, 16)
            t_plain, plain = timed(lambda: self.vlm.option_logprobs(some, self.q_dims, reuse_prefix=False), repeats=1)
            t_reuse, reuse = timed(lambda: self.vlm.option_logprobs(some, self.q_dims, reuse_prefix=True), repeats=1)
            label = f"4 dims x {self.n_prefix} images: plain / reuse time"
            label += " (H200 before: 2.34x)" if name == "fast" else ""
            self.table.add(f"prefix reuse, {name} path", label, t_plain / t_reuse)
            diff = (expected(plain.logprobs) - expected(reuse.logprobs)).abs().max().item()
            self.table.add(f"prefix reuse, {name} path", "max |score diff| reuse vs plain (1-5, bf16)", diff)

    def agreement(self) -> None:
        table, host, old = self.table, self.host, self.old  # host: the fast path with the same (PIL) image processor
        # three widths: three token counts, grouped, padded
        mixed = [[im] for im in noise_images(self.n_mixed, self.side, seed=1, mixed=True)]

        def score(speed: Any, batch: int) -> torch.Tensor:
            self.use(speed, batch)
            return expected(self.vlm.option_logprobs(mixed, self.q_one).logprobs)

        fast16, old16, fast1 = score(host, 16), score(old, 16), score(host, 1)
        label = "max |score diff| fast vs unoptimised, same image processor (1-5)"
        table.add("agreement bf16", label, (fast16 - old16).abs().max().item())
        table.add("agreement bf16", "max |score diff| batch 16 vs 1 (1-5)", (fast16 - fast1).abs().max().item())
        if self.why_not is None:
            gpu16 = score(self.fast, 16)
            processor = type(self.image_processor).__name__
            label_gpu = f"max |score diff| image processor on the GPU vs {processor} on the host"
            table.add("agreement bf16", label_gpu, (gpu16 - fast16).abs().max().item())
        self.vlm.model.float()
        try:
            f_fast, f_old, f_one = score(host, 16), score(old, 16), score(host, 1)
            # prefix reuse in fp32: on the H200 its bf16 gap (0.16) was twice bf16 vs fp32 (0.081); is it rounding?
            some, dims = self.imgs[: self.n_prefix], self.q_dims
            plain, reuse = (self.vlm.option_logprobs(some, dims, reuse_prefix=r).logprobs for r in (False, True))
            reuse_gap = (expected(plain) - expected(reuse)).abs().max().item()
        finally:
            self.vlm.model.to(torch.bfloat16)
        table.add("agreement fp32", label, (f_fast - f_old).abs().max().item())
        table.add("agreement fp32", "max |score diff| batch 16 vs 1 (1-5)", (f_fast - f_one).abs().max().item())
        table.add("agreement fp32", "max |score diff| prefix reuse vs plain (1-5)", reuse_gap)
        table.add("agreement bf16", "max |score diff| bf16 vs fp32 (1-5)", (fast16 - f_fast).abs().max().item())
        table.add("agreement bf16", "score spread (max-min) over images", (f_fast.max() - f_fast.min()).item())


class _StepTimer(TrainerCallback):
    """Trainer callback: wall time of each optimizer step."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
        sync()
        self.times.append(-time.perf_counter())

    def on_step_end(self, *args: Any, **kwargs: Any) -> None:
        sync()
        self.times[-1] += time.perf_counter()


def sft_lora(table: Table, ckpt: Path, work: Path, steps: int, batch: int, size: int) -> None:
    from training.commands.sft import run as run_sft

    name = "SFT LoRA (7B config)"
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    timer = _StepTimer()
    trainer = {"max_steps": steps, "per_device_train_batch_size": batch, "gradient_accumulation_steps": 1}
    trainer |= {"learning_rate": 1e-4, "logging_steps": 1, "save_steps": 10_000, "save_strategy": "no"}
    cfg = {
        "out": str(work / "sft-lora"),
        "merge_lora": False,
        "model": {"path": str(ckpt)},
        "lora": {"enabled": True, "r": 16},
        "prompt": {"type": 1, "dimensions": list(DIMENSIONS)},
        "data": {"train": "synthetic", "synthetic_size": size},
        "trainer": {**trainer, "report_to": "none"},
    }
    result = run_sft(parse(SftSettings, cfg), callbacks=[timer])
    table.add(name, "steps done", result.get("global_step"))
    table.add(name, "mean train loss", float(result.get("train_loss", float("nan"))))
    if len(timer.times) > 1:
        table.add(name, f"s/step (batch {batch}, after the first)", float(np.mean(timer.times[1:])))
    if torch.cuda.is_available():
        table.add(name, "peak GPU memory (GiB)", torch.cuda.max_memory_allocated() / 2**30)
    table.add(name, "adapter written", (Path(result["scorer"]) / "adapter_model.safetensors").is_file())


def sft_zero3(table: Table, ckpt: Path, work: Path, steps: int, batch: int, size: int, bf16: bool) -> None:
    """Full fine-tuning under ``accelerate launch --use_deepspeed --zero_stage 3`` (one process): the scorer written
    with every tensor's full shape, changed by training, loaded back by ``reward=sa-iqa``."""
    name = "SFT full ZeRO-3 (small)"
    if importlib.util.find_spec("deepspeed") is None:
        table.add(name, "skipped", "deepspeed not installed (carry its wheel)")
        return
    out = work / "sft-zero3"
    cmd = [
        *(sys.executable, "-m", "accelerate.commands.launch", "--use_deepspeed", "--zero_stage", "3"),
        *("--num_processes", "1", "--mixed_precision", "bf16" if bf16 else "no", "--zero3_save_16bit_model", "true"),
        *("--zero3_init_flag", "false", "--gradient_accumulation_steps", "1"),
        str(ROOT / "training/sft.py"),
        *(f"model.path={ckpt}", "data.train=synthetic", f"data.synthetic_size={size}", f"out={out}"),
        *(f"trainer.max_steps={steps}", "+trainer.save_strategy=no", f"trainer.per_device_train_batch_size={batch}"),
        *("trainer.gradient_accumulation_steps=1", "trainer.learning_rate=1e-4", "trainer.logging_steps=1"),
        "prompt.type=1",
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=work, env={**os.environ, "DS_BUILD_OPS": "0"})
    table.add(name, "launch + steps + save seconds", time.perf_counter() - t0)
    if proc.returncode != 0:
        logger.error("ZeRO-3 run failed:\n%s", proc.stderr[-4000:])
        lines = [ln for ln in proc.stderr.splitlines() if "Error" in ln or "Could not" in ln] or [""]
        raise RuntimeError(f"accelerate launch exited {proc.returncode}: {lines[0][:150]}")
    result = json.loads((out / "sft_result.json").read_text())
    table.add(name, "steps done / mean loss", f"{result['global_step']} / {result['train_loss']:.4f}")
    trained, initial = tensors(out / "scorer"), tensors(ckpt)
    full = [k for k in initial if k in trained and trained[k].shape == initial[k].shape]
    table.add(name, "scorer tensors with full shapes", f"{len(full)}/{len(initial)}")
    table.add(
        name, "tensors changed by training", sum(not torch.equal(trained[k].float(), initial[k].float()) for k in full)
    )
    from reward.rewards.sa_iqa import build

    reward = build({"model": str(out / "scorer"), "batch_size": 4, "dtype": "bfloat16" if bf16 else "float32"})
    scores = reward.score(noise_images(2, 112)).scores
    table.add(name, "reward=sa-iqa loads it; scores", [round(float(s), 3) for s in scores])


def main(argv: list[str] | None = None) -> Table:
    skip = {"help": "comma-separated sections to skip: scoring,lora,zero3", "default": ""}
    budget = {"type": float, "default": 420.0, "help": "start no section after this many seconds"}
    args = arguments(__doc__, argv, gpu=True, skip=skip, budget_s=budget)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    cuda = torch.cuda.is_available()
    table = Table(args.budget_s)
    import transformers

    gpu = torch.cuda.get_device_name(0) if cuda else "none (dry run)" if args.dry_run else "none"
    table.add("setup", "device", gpu)
    table.add("setup", "torch / transformers", f"{torch.__version__} / {transformers.__version__}")
    peak = H200_BF16_PEAK_TFLOPS if cuda and "H200" in gpu else None
    dry = args.dry_run
    text, vision = (TINY_TEXT, TINY_VISION) if dry else (QWEN25_VL_7B_TEXT, QWEN25_VL_7B_VISION)
    side = 112 if dry else 448  # 448 px: 256 visual tokens per image
    with workdir(args.work, "gpu_check_") as work:
        big = work / "qwen2.5-vl-7b-random"
        guarded(table, "build 7B-class model", lambda: build_checkpoint(big, text, vision, side * side))
        if "scoring" not in skip:
            guarded(table, "scoring", lambda: Scoring(table, big, side, peak, dry).run())
        if "lora" not in skip:
            guarded(table, "SFT LoRA (7B config)", lambda: sft_lora(table, big, work, 4 if cuda else 2, 4, side))
        if "zero3" not in skip:
            small = work / "qwen2.5-vl-small-random"
            small_text, small_vision = (TINY_TEXT, TINY_VISION) if dry else (SMALL_TEXT, SMALL_VISION)

            def zero3() -> None:
                build_checkpoint(small, small_text, small_vision, side * side, seed=1)
                sft_zero3(table, small, work, 4 if cuda else 2, 4, side, bf16=cuda)

            guarded(table, "SFT full ZeRO-3 (small)", zero3)
    return table.finish(args.out, "gpu_check.json")


if __name__ == "__main__":
    main()
