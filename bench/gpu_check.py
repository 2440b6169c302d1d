"""GPU check: scoring speed and where it goes, precision and SFT steps on a random-weight 7B-class Qwen2.5-VL.

    bash bench/gpu_check.sh                    # one GPU (H200: ~3-6 min); prints one table
    bash bench/gpu_check.sh --dry-run          # the same sections on a tiny config on the CPU (a test runs it)
    bash bench/gpu_check.sh --out DIR          # also writes DIR/gpu_check.json
    bash bench/gpu_check.sh --skip lora,zero3  # scoring only (bench/gpu_all.sh runs it so)

Scoring: the profile of the scoring loop before (the unoptimised path: image processor in the loop,
per-window vision attention) and after, images/s of the unoptimised path at batch 16 against the fast path at each
batch size, achieved TFLOP/s and the fraction of the bf16 peak at the best one, peak memory, the prefix-reuse
ratio, and the score differences (fast vs unoptimised, batch 16 vs 1, GPU vs PIL image processor, bf16 vs fp32).
The model is built from Qwen2.5-VL-7B-Instruct's config values (written below) with random weights (no
download); the tokenizer is the toolkit's tiny offline one (its ids are a subset of the 152k vocabulary). Every
section is guarded: one that fails prints its error in the table and the others still run.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from transformers import TrainerCallback

ROOT = Path(__file__).resolve().parents[1]
logger = logging.getLogger("bench.gpu_check")

# Qwen2.5-VL-7B-Instruct's config.json (architecture values; token ids come from the tokenizer)
QWEN25_VL_7B_TEXT = {
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 128000,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "sliding_window": 32768,
    "use_sliding_window": False,
    "max_window_layers": 28,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
}
QWEN25_VL_7B_VISION = {
    "depth": 32,
    "hidden_size": 1280,
    "intermediate_size": 3420,
    "num_heads": 16,
    "in_chans": 3,
    "out_hidden_size": 3584,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31],
    "tokens_per_second": 2,
    "hidden_act": "silu",
}
# the smaller config for full fine-tuning under ZeRO-3: Qwen2.5-0.5B's language model, an 8-block ViT
SMALL_TEXT = {
    **QWEN25_VL_7B_TEXT,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_window_layers": 24,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [8, 12, 12]},  # head_dim 64
}
SMALL_VISION = {**QWEN25_VL_7B_VISION, "depth": 8, "out_hidden_size": 896, "fullatt_block_indexes": [3, 7]}
# the dry run: a tiny config of the same architecture
TINY_TEXT = {
    **QWEN25_VL_7B_TEXT,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1024,
    "max_window_layers": 2,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]},
}
TINY_VISION = {
    **QWEN25_VL_7B_VISION,
    "depth": 2,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "out_hidden_size": 64,
    "window_size": 56,
    "fullatt_block_indexes": [1],
}

H200_BF16_PEAK_TFLOPS = 790.0  # dense bf16 matmul measured on this workplace's H200 (KINDS.md); datasheet ~990
WORDS = ("excellent", "good", "fair", "poor", "bad")
DIMENSIONS = ("layout", "harmony", "lighting", "distortion")


class Table:
    """Rows of (section, metric, value), printed once at the end."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str]] = []

    def add(self, section: str, metric: str, value: Any) -> None:
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        self.rows.append((section, metric, text))
        logger.info("%s | %s | %s", section, metric, text)

    def render(self) -> str:
        w0 = max([len(r[0]) for r in self.rows] + [7])
        w1 = max([len(r[1]) for r in self.rows] + [6])
        lines = [f"{'section':<{w0}}  {'metric':<{w1}}  value", f"{'-' * w0}  {'-' * w1}  -----"]
        lines += [f"{s:<{w0}}  {m:<{w1}}  {v}" for s, m, v in self.rows]
        return "\n".join(lines)

    def finish(self, out: str | None, name: str) -> Table:
        """Print the whole table; with ``out``, also write its rows to ``out/name``."""
        print("\n" + self.render(), flush=True)
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            (Path(out) / name).write_text(json.dumps(self.rows, indent=1))
        return self


DEADLINE = [float("inf")]  # perf_counter time after which no new section starts (--budget-s)


def guarded(table: Table, section: str, fn: Callable[[], None]) -> None:
    """Run one section; a failure becomes a table row, never the end of the check."""
    if time.perf_counter() > DEADLINE[0]:
        table.add(section, "skipped", "the --budget-s time was used up before it")
        return
    logger.info("== %s", section)
    t0 = time.perf_counter()
    try:
        fn()
    except Exception as err:  # noqa: BLE001 - every section must be reported, whatever breaks
        logger.error("%s failed:\n%s", section, traceback.format_exc())
        table.add(section, "FAILED", f"{type(err).__name__}: {str(err).splitlines()[0][:150] if str(err) else ''}")
    finally:
        table.add(section, "section seconds", round(time.perf_counter() - t0, 1))
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def build_checkpoint(out: Path, text: dict, vision: dict, pixels: int, device: torch.device, seed: int = 0) -> Path:
    """A random-weight Qwen2.5-VL checkpoint directory from config values, with the offline tokenizer."""
    from transformers import AutoModelForImageTextToText, Qwen2_5_VLConfig
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from reward.testing import CHAT_TEMPLATE, make_tokenizer

    tok = make_tokenizer()
    ids = {
        k: tok.convert_tokens_to_ids(t)
        for k, t in (
            ("image_token_id", "<|image_pad|>"),
            ("video_token_id", "<|video_pad|>"),
            ("vision_start_token_id", "<|vision_start|>"),
            ("vision_end_token_id", "<|vision_end|>"),
        )
    }
    text = {
        **text,
        "pad_token_id": tok.pad_token_id,
        "eos_token_id": tok.eos_token_id,
        "bos_token_id": tok.convert_tokens_to_ids("<|endoftext|>"),
    }
    config = Qwen2_5_VLConfig(text_config=text, vision_config=dict(vision), **ids)
    torch.manual_seed(seed)
    with device:
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("built %.2fB parameters on %s; saving to %s", n_params / 1e9, device, out)
    model.save_pretrained(out, max_shard_size="5GB")
    del model
    tok.save_pretrained(out)
    Qwen2VLImageProcessorPil(min_pixels=pixels, max_pixels=pixels, patch_size=14).save_pretrained(out)
    (out / "processor_config.json").write_text(json.dumps({"processor_class": "Qwen2_5_VLProcessor"}))
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return out


def images(n: int, side: int, seed: int = 0, mixed: bool = False) -> list[list[Image.Image]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        w = side - (28 * (i % 3) if mixed else 0)
        out.append([Image.fromarray(rng.integers(0, 256, (side, max(w, 28), 3), dtype=np.uint8))])
    return out


def timed(fn: Callable[[], Any], repeats: int = 2) -> tuple[float, Any]:
    """Best wall time of ``repeats`` runs after one warm-up, and the last result."""
    result = fn()
    best = float("inf")
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        result = fn()
        sync()
        best = min(best, time.perf_counter() - t0)
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


def scoring_sections(
    table: Table,
    ckpt: Path,
    side: int,
    n_images: int,
    peak: float | None,
    batches: tuple[int, ...],
    workers: int,
    small: bool = False,
) -> None:
    """The scoring measurements: the profile before and after, images/s per batch size against the unoptimised path,
    % of peak, memory, prefix reuse and the score differences the faster path makes (``small``: fewer images and
    repeats, for the CPU dry run)."""
    from reward.eval.parallel import score_images
    from reward.rewards.qbench import QBenchConfig, QBenchReward
    from reward.vlm import OptionQuery, load_vlm
    from reward.vlm.inputs import device_preprocessing, fast_image_processor
    from reward.vlm.model import ScoringSpeed
    from reward.vlm.profile import profile_scoring

    cuda = torch.cuda.is_available()
    vlm = load_vlm(ckpt, dtype="bfloat16", batch_size=16, device_map={"": 0} if cuda else None)
    old, fast = ScoringSpeed.unoptimised(), ScoringSpeed()
    q_one = [OptionQuery("Rate the quality of the image.", WORDS, "The quality of the image is")]
    q_dims = [
        OptionQuery(
            f"Please evaluate the spatial aesthetic {d} quality level of this image.",
            WORDS,
            f"The spatial aesthetic {d} quality level of this image is",
        )
        for d in DIMENSIONS
    ]
    imgs = images(n_images, side)
    enc = vlm.processor(
        text=[vlm.render(1, q_one[0].question, q_one[0].response_prefix)], images=imgs[0], return_tensors="pt"
    )
    n_tokens, n_patches = len(enc["input_ids"][0]), int(enc["image_grid_thw"].prod(-1).sum())
    flops_per_image = matmul_flops_per_image(vlm.model, n_tokens, n_patches)
    table.add("setup", "tokens per query (image + text)", n_tokens)
    table.add("setup", "matmul GFLOP per image (2 x params x tokens)", flops_per_image / 1e9)
    image_processor = vlm.processor.image_processor
    why_not = device_preprocessing(fast_image_processor(image_processor) or image_processor, vlm.device)
    table.add("setup", "image processor on the GPU", "yes (torchvision)" if why_not is None else f"no: {why_not}")
    reward = QBenchReward(QBenchConfig(model="unused"), vlm=vlm)
    items = [(f"img{i}", g[0], i + 1) for i, g in enumerate(imgs)]
    best: dict[str, Any] = {"batch": batches[0], "rate": 0.0}
    repeats, n_prefix, n_mixed = (1, 4, 6) if small else (2, 16, 16)

    def use(speed: ScoringSpeed, batch: int) -> None:
        vlm.speed, vlm.batch_size = speed, batch

    def add_profile(section: str, prof: Any) -> None:
        for part, seconds in prof.parts():
            table.add(section, f"{part} (s, share)", f"{seconds:.3f}, {seconds / prof.total:.1%}")
        table.add(
            section, "total (s) / images/s while profiled", f"{prof.total:.3f} / {prof_images[0] / prof.total:.1f}"
        )
        pad = prof.padding_share()
        table.add(section, "padding share of the tokens", "n/a" if pad is None else f"{pad:.1%}")

    prof_images = [min(n_images, 64)]

    def profile_before() -> None:
        use(old, 16)
        loop = items[: prof_images[0]]
        score_images(reward, loop[:16], batch_size=16, num_workers=0, prepare_in_workers=False)  # warm-up
        with profile_scoring(vlm.model) as prof:
            score_images(reward, loop, batch_size=16, num_workers=workers, prepare_in_workers=False)
        add_profile("profile before (unoptimised, batch 16)", prof)

    def throughput() -> None:
        use(old, 16)
        t_old, _ = timed(lambda: vlm.option_logprobs(imgs[:64], q_one), repeats)
        rate_old = min(64, n_images) / t_old
        table.add("images/s", "unoptimised path, batch 16 (H200 before: 29.9)", rate_old)
        for b in batches:
            use(fast, b)
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            t, _ = timed(lambda: vlm.option_logprobs(imgs, q_one), repeats)
            mem = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
            table.add("images/s", f"fast path, batch {b} (peak GiB)", f"{n_images / t:.1f} ({mem:.1f})")
            if n_images / t > best["rate"]:
                best.update(batch=b, rate=n_images / t, memory=mem)
        tflops = flops_per_image * best["rate"] / 1e12
        table.add("images/s", "best batch size", best["batch"])
        table.add("images/s", "best / unoptimised batch 16", best["rate"] / rate_old)
        table.add("images/s", "achieved TFLOP/s at the best batch", tflops)
        if peak:
            table.add("images/s", f"fraction of the {peak:g} TFLOP/s bf16 peak (goal 0.5)", tflops / peak)
        table.add("memory", "peak GPU memory at the best batch (GiB)", best.get("memory", float("nan")))
        use(ScoringSpeed(preprocess="host"), best["batch"])
        t_host, _ = timed(lambda: vlm.option_logprobs(imgs, q_one), repeats=1)
        table.add("images/s", "fast path, image processor on the host in the loop", n_images / t_host)
        for name, prepare in (("workers prepare the images (host processor)", True), ("workers decode only", False)):
            use(ScoringSpeed(preprocess="host") if prepare else fast, best["batch"])
            t_loop, _ = timed(
                lambda p=prepare: score_images(
                    reward, items, batch_size=best["batch"], num_workers=workers, prepare_in_workers=p
                ),
                repeats=1,
            )
            table.add("images/s", f"scoring loop ({workers} DataLoader workers), {name}", n_images / t_loop)

    def profile_after() -> None:
        use(fast, best["batch"])
        with profile_scoring(vlm.model) as prof:
            vlm.option_logprobs(imgs[: prof_images[0]], q_one)
        add_profile(f"profile after (fast path, batch {best['batch']})", prof)

    def prefix_reuse() -> None:
        some = imgs[:n_prefix]
        for name, speed in (("fast", fast), ("unoptimised", old)):
            use(speed, 16)
            t_plain, plain = timed(lambda: vlm.option_logprobs(some, q_dims, reuse_prefix=False), repeats=1)
            t_reuse, reuse = timed(lambda: vlm.option_logprobs(some, q_dims, reuse_prefix=True), repeats=1)
            label = f"4 dims x {n_prefix} images: plain / reuse time"
            label += " (H200 before: 2.34x)" if name == "fast" else ""
            table.add(f"prefix reuse, {name} path", label, t_plain / t_reuse)
            diff = (expected(plain.logprobs) - expected(reuse.logprobs)).abs().max().item()
            table.add(f"prefix reuse, {name} path", "max |score diff| reuse vs plain (1-5, bf16)", diff)

    def agreement() -> None:
        mixed = images(n_mixed, side, seed=1, mixed=True)  # three widths: three token counts, grouped, padded
        host = ScoringSpeed(preprocess="host")  # the fast path with the same (PIL) image processor as before

        def score(speed: ScoringSpeed, batch: int) -> torch.Tensor:
            use(speed, batch)
            return expected(vlm.option_logprobs(mixed, q_one).logprobs)

        fast16, old16, fast1 = score(host, 16), score(old, 16), score(host, 1)
        label = "max |score diff| fast vs unoptimised, same image processor (1-5)"
        table.add("agreement bf16", label, (fast16 - old16).abs().max().item())
        table.add("agreement bf16", "max |score diff| batch 16 vs 1 (1-5)", (fast16 - fast1).abs().max().item())
        if why_not is None:
            gpu16 = score(fast, 16)
            label_gpu = f"max |score diff| image processor on the GPU vs {type(image_processor).__name__} on the host"
            table.add("agreement bf16", label_gpu, (gpu16 - fast16).abs().max().item())
        vlm.model.float()
        try:
            f_fast, f_old, f_one = score(host, 16), score(old, 16), score(host, 1)
        finally:
            vlm.model.to(torch.bfloat16)
        table.add("agreement fp32", label, (f_fast - f_old).abs().max().item())
        table.add("agreement fp32", "max |score diff| batch 16 vs 1 (1-5)", (f_fast - f_one).abs().max().item())
        table.add("agreement bf16", "max |score diff| bf16 vs fp32 (1-5)", (fast16 - f_fast).abs().max().item())
        table.add("agreement bf16", "score spread (max-min) over images", (f_fast.max() - f_fast.min()).item())

    guarded(table, "profile before", profile_before)
    guarded(table, "images/s", throughput)
    guarded(table, "profile after", profile_after)
    guarded(table, "prefix reuse", prefix_reuse)
    guarded(table, "agreement", agreement)
    vlm.speed = fast


class _StepTimer(TrainerCallback):
    """Trainer callback: wall time of each optimizer step."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._t0 = 0.0

    def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
        sync()
        self._t0 = time.perf_counter()

    def on_step_end(self, *args: Any, **kwargs: Any) -> None:
        sync()
        self.times.append(time.perf_counter() - self._t0)


def sft_lora(table: Table, ckpt: Path, work: Path, steps: int, batch: int, size: int) -> None:
    from training.commands.sft import run as run_sft

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    timer = _StepTimer()
    cfg = {
        "output_dir": str(work / "sft-lora"),
        "merge_lora": False,
        "model": {"path": str(ckpt)},
        "lora": {"enabled": True, "r": 16},
        "prompt": {"type": 1, "dimensions": list(DIMENSIONS)},
        "data": {"train": "synthetic", "synthetic_size": size},
        "trainer": {
            "max_steps": steps,
            "per_device_train_batch_size": batch,
            "gradient_accumulation_steps": 1,
            "learning_rate": 1e-4,
            "logging_steps": 1,
            "save_steps": 10_000,
            "save_strategy": "no",
            "report_to": "none",
        },
    }
    result = run_sft(cfg, callbacks=[timer])
    table.add("SFT LoRA (7B config)", "steps done", result.get("global_step"))
    table.add("SFT LoRA (7B config)", "mean train loss", float(result.get("train_loss", float("nan"))))
    if len(timer.times) > 1:
        table.add("SFT LoRA (7B config)", f"s/step (batch {batch}, after the first)", float(np.mean(timer.times[1:])))
    if torch.cuda.is_available():
        table.add("SFT LoRA (7B config)", "peak GPU memory (GiB)", torch.cuda.max_memory_allocated() / 2**30)
    adapter = Path(result["scorer"]) / "adapter_model.safetensors"
    table.add("SFT LoRA (7B config)", "adapter written", adapter.is_file())


ZERO3 = """\
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  zero_stage: 3
  offload_optimizer_device: none
  offload_param_device: none
  gradient_accumulation_steps: 1
  zero3_init_flag: false
  zero3_save_16bit_model: true
mixed_precision: '{mp}'
num_machines: 1
num_processes: 1
machine_rank: 0
use_cpu: false
"""


def sft_zero3(table: Table, ckpt: Path, work: Path, steps: int, batch: int, size: int, bf16: bool) -> None:
    import importlib.util

    from safetensors.torch import load_file

    if importlib.util.find_spec("deepspeed") is None:
        table.add("SFT full ZeRO-3 (small)", "skipped", "deepspeed not installed (carry its wheel)")
        return
    (work / "zero3.yaml").write_text(ZERO3.format(mp="bf16" if bf16 else "no"))
    out = work / "sft-zero3"
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(work / "zero3.yaml"),
        str(ROOT / "training/sft.py"),
        f"model.path={ckpt}",
        "data.train=synthetic",
        f"data.synthetic_size={size}",
        f"out={out}",
        f"trainer.max_steps={steps}",
        "+trainer.save_strategy=no",
        f"trainer.per_device_train_batch_size={batch}",
        "trainer.gradient_accumulation_steps=1",
        "trainer.learning_rate=1e-4",
        "trainer.logging_steps=1",
        "prompt.type=1",
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=work, env={**os.environ, "DS_BUILD_OPS": "0"})
    table.add("SFT full ZeRO-3 (small)", "launch + steps + save seconds", time.perf_counter() - t0)
    if proc.returncode != 0:
        logger.error("ZeRO-3 run failed:\n%s", proc.stderr[-4000:])
        lines = [ln for ln in proc.stderr.splitlines() if "Error" in ln or "Could not" in ln] or [""]
        raise RuntimeError(f"accelerate launch exited {proc.returncode}: {lines[0][:150]}")
    result = json.loads((out / "sft_result.json").read_text())
    table.add(
        "SFT full ZeRO-3 (small)", "steps done / mean loss", f"{result['global_step']} / {result['train_loss']:.4f}"
    )
    scorer = out / "scorer"
    trained = {}
    for f in sorted(scorer.glob("*.safetensors")):
        trained.update(load_file(f))
    initial = {}
    for f in sorted(ckpt.glob("*.safetensors")):
        initial.update(load_file(f))
    empty = [k for k in initial if k not in trained or trained[k].shape != initial[k].shape]
    table.add(
        "SFT full ZeRO-3 (small)", "scorer tensors with full shapes", f"{len(initial) - len(empty)}/{len(initial)}"
    )
    changed = sum(not torch.equal(trained[k].float(), initial[k].float()) for k in initial if k in trained)
    table.add("SFT full ZeRO-3 (small)", "tensors changed by training", changed)
    from reward.rewards.sa_iqa import build

    reward = build({"path": str(scorer), "batch_size": 4, "dtype": "bfloat16" if bf16 else "float32"})
    scores = reward.score([g[0] for g in images(2, 112)]).scores
    table.add("SFT full ZeRO-3 (small)", "reward=sa-iqa loads it; scores", [round(float(s), 3) for s in scores])


def main(argv: list[str] | None = None) -> Table:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="tiny config on the CPU (checks the script)")
    parser.add_argument("--out", default=os.environ.get("OUT"), help="folder for gpu_check.json")
    parser.add_argument("--skip", default="", help="comma-separated sections to skip: scoring,lora,zero3")
    parser.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="start no section after this many seconds")
    args = parser.parse_args(argv)
    DEADLINE[0] = time.perf_counter() + args.budget_s
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stdout, force=True
    )
    for name in ("transformers", "accelerate", "deepspeed", "datasets", "httpx"):
        logging.getLogger(name).setLevel(logging.WARNING)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if args.dry_run:  # before CUDA is first asked about: this process, the trainer and the launch stay on the CPU
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    table = Table()
    import transformers

    gpu = torch.cuda.get_device_name(0) if cuda else "none (dry run)" if args.dry_run else "none"
    table.add("setup", "device", gpu)
    table.add("setup", "torch / transformers", f"{torch.__version__} / {transformers.__version__}")
    peak = H200_BF16_PEAK_TFLOPS if cuda and "H200" in gpu else None
    text, vision = (TINY_TEXT, TINY_VISION) if args.dry_run else (QWEN25_VL_7B_TEXT, QWEN25_VL_7B_VISION)
    side = 112 if args.dry_run else 448  # 448 px: 256 visual tokens per image
    n_images = 16 if args.dry_run else 128
    batches = (4, 8, 16) if args.dry_run else (16, 32, 64, 128)
    workers = 2 if args.dry_run else 8
    ctx = tempfile.TemporaryDirectory(prefix="gpu_check_") if args.work is None else contextlib.nullcontext(args.work)
    with ctx as work_dir:
        work = Path(work_dir)
        work.mkdir(parents=True, exist_ok=True)
        big = work / "qwen2.5-vl-7b-random"
        guarded(table, "build 7B-class model", lambda: build_checkpoint(big, text, vision, side * side, device))
        if "scoring" not in skip:
            guarded(
                table,
                "scoring",
                lambda: scoring_sections(table, big, side, n_images, peak, batches, workers, small=args.dry_run),
            )
        if "lora" not in skip:
            guarded(table, "SFT LoRA (7B config)", lambda: sft_lora(table, big, work, 4 if cuda else 2, 4, side))
        if "zero3" not in skip:
            small = work / "qwen2.5-vl-small-random"
            small_text, small_vision = (TINY_TEXT, TINY_VISION) if args.dry_run else (SMALL_TEXT, SMALL_VISION)

            def zero3() -> None:
                build_checkpoint(small, small_text, small_vision, side * side, device, seed=1)
                sft_zero3(table, small, work, 4 if cuda else 2, 4, side, bf16=cuda)

            guarded(table, "SFT full ZeRO-3 (small)", zero3)
    return table.finish(args.out, "gpu_check.json")


if __name__ == "__main__":
    main()
