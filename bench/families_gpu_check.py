"""GPU check: the backbones of the field's 2026 scorers at a real size, random weights, through the product path.

    python bench/families_gpu_check.py --out DIR   # one GPU (H200: ~4 min); bench/gpu_all.sh runs it as a stage
    python bench/families_gpu_check.py --dry-run   # the same sections on the tiny checkpoints on the CPU

Per family: the checkpoint built on the GPU and saved, loaded as ``reward=`` loads it (``load_vlm``), images/s at batch
16 and 64 with peak memory, prefix reuse against plain scoring (time, max score gap), every score finite. Then two GRPO
steps of ``training/grpo_scorer.py`` (LoRA, 2 images of 4 answers a step) on the first family at its size. Sizes:
Qwen3.5 at transformers' default ``Qwen3_5Config`` (9.4B: Gated DeltaNet and full attention layers, a 248k
vocabulary); Ovis2 with Qwen2.5-7B's language model and transformers' default Ovis2 ViT at 448 px (2x2 patches a
visual token). The tokenizer, processor and chat template are the tiny checkpoint's (its ids are a subset of any
vocabulary here).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from common import QWEN25_VL_7B_TEXT, Table, arguments, build_checkpoint, guarded, noise_images, workdir
from gpu_check import DIMENSIONS, WORDS, expected, timed

# family -> (text_config, vision_config) values over the config class's defaults; the image processor's settings
FAMILIES: dict[str, tuple[dict, dict, dict]] = {
    "qwen3_5": ({}, {"out_hidden_size": 4096}, {}),  # the vision config's default (3584) is not the text's 4096
    "ovis2": (
        {k: v for k, v in QWEN25_VL_7B_TEXT.items() if k not in ("rope_parameters", "sliding_window")},
        {"image_size": 448, "hidden_stride": 2},
        {"size": {"height": 448, "width": 448}},
    ),
}


def build(out: Path, family: str, side: int, dry: bool) -> Path:
    """The tiny checkpoint of ``family``; unless ``dry``, with random bf16 weights of the real-size config."""
    if dry:
        from reward.testing import make_tiny_vlm

        return make_tiny_vlm(out, family=family, image_pixels=side * side)
    text, vision, processor = FAMILIES[family]
    return build_checkpoint(out, text, vision, side * side, family=family, processor=processor)


def score(table: Table, name: str, ckpt: Path, side: int, dry: bool) -> None:
    """Load as ``reward=`` does and score: images/s and memory per batch size, prefix reuse, finite scores."""
    from reward.vlm import OptionQuery, load_vlm

    cuda = torch.cuda.is_available()
    vlm = load_vlm(ckpt, dtype="bfloat16", batch_size=16, device_map={"": 0} if cuda else None)
    table.add(name, "parameters (B) / dtype", f"{sum(p.numel() for p in vlm.model.parameters()) / 1e9:.2f} / bf16")
    one = [OptionQuery("Rate the quality of the image.", WORDS, "The quality of the image is")]
    aesthetic = "the spatial aesthetic {} quality level of this image"
    dims = [
        OptionQuery(f"Please evaluate {aesthetic.format(d)}.", WORDS, aesthetic.format(d).capitalize() + " is")
        for d in DIMENSIONS
    ]
    n = 8 if dry else 64
    imgs = [[im] for im in noise_images(n, side)]
    for batch in (4, 8) if dry else (16, 64):
        vlm.batch_size = batch
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        took, out = timed(lambda: vlm.option_logprobs(imgs, one), repeats=1)
        memory = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
        table.add(name, f"images/s at batch {batch} (peak GiB)", f"{n / took:.1f} ({memory:.1f})")
    scores = expected(out.logprobs)
    spread = f"{bool(scores.isfinite().all())} / {(scores.max() - scores.min()).item():.3f}"
    table.add(name, f"scores finite / spread over {n} images (1-5)", spread)
    vlm.batch_size = 16
    some = imgs[:8]
    t_plain, plain = timed(lambda: vlm.option_logprobs(some, dims, reuse_prefix=False), repeats=1)
    t_reuse, reuse = timed(lambda: vlm.option_logprobs(some, dims, reuse_prefix=True), repeats=1)
    table.add(name, "prefix reuse, 4 dims x 8 images: plain / reuse time", t_plain / t_reuse)
    gap = (expected(plain.logprobs) - expected(reuse.logprobs)).abs().max().item()
    table.add(name, "prefix reuse: max |score diff| vs plain (1-5, bf16)", gap)


def grpo_scorer_steps(table: Table, name: str, ckpt: Path, work: Path, dry: bool) -> None:
    """Two GRPO steps on the scorer (LoRA), as ``training/grpo_scorer.py`` runs them."""
    from reward.core.config import parse
    from training.commands.grpo_scorer import GrpoScorerSettings, run

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    # 2 images of 4 answers a step: the ranking reward compares images (one image a step is refused)
    trainer = {"max_steps": 2, "per_device_train_batch_size": 8, "num_generations": 4, "save_strategy": "no"}
    trainer |= {"max_completion_length": 8 if dry else 64, "bf16": cuda, "logging_steps": 1}
    cfg = {
        "out": str(work / f"grpo-scorer-{name}"),
        "model": {"path": str(ckpt), "dtype": "bfloat16" if cuda else "float32"},
        "data": {"train": "synthetic", "rows": 16, "synthetic_size": 64 if dry else 448},
        "lora": {"enabled": True},
        "trainer": trainer,
    }
    result = run(parse(GrpoScorerSettings, cfg))
    section = f"{name} GRPO scorer (LoRA)"
    table.add(section, "steps done / train seconds", f"{result['global_step']} / {result['train_s']}")
    table.add(section, "reward first / last", f"{result.get('reward_first')} / {result.get('reward_last')}")
    if cuda:
        table.add(section, "peak GPU memory (GiB)", torch.cuda.max_memory_allocated() / 2**30)
    table.add(section, "adapter written", (Path(result["scorer"]) / "adapter_model.safetensors").is_file())


def main(argv: list[str] | None = None) -> Table:
    budget = {"type": float, "default": 300.0, "help": "start no section after this many seconds"}
    args = arguments(__doc__, argv, gpu=True, budget_s=budget)
    table = Table(args.budget_s)
    table.add("families", "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (dry run)")
    side = 112 if args.dry_run else 448
    with workdir(args.work, "families_gpu_check_") as work:
        for i, family in enumerate(FAMILIES):
            ckpt = work / family
            built = guarded(table, f"{family} build", lambda f=family, c=ckpt: build(c, f, side, args.dry_run))
            if built is None:
                continue
            guarded(table, family, lambda f=family, c=ckpt: score(table, f, c, side, args.dry_run))
            if i == 0:
                steps = lambda f=family, c=ckpt: grpo_scorer_steps(table, f, c, work, args.dry_run)  # noqa: E731
                guarded(table, f"{family} GRPO scorer", steps)
            shutil.rmtree(ckpt, ignore_errors=True)  # disk for the next family
    return table.finish(args.out, "families_gpu_check.json")


if __name__ == "__main__":
    main()
