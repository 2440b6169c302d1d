"""What the bench scripts share: their options, random images and models, best-of timing, and the tables they print
(a GPU check's ``section | metric | value`` rows, where a section that fails is a row, not the end of the check).

The scripts run as ``python bench/NAME.py``, this folder first on ``sys.path``, so they import this as ``common``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
logger = logging.getLogger("bench")
QUICK = {"action": "store_true", "help": "tiny model only"}  # --quick of the speed benches

# the larger random Qwen2-VL of the speed benches (23M parameters); the tiny one is make_tiny_vlm's default
LARGE = {"hidden": 512, "layers": 8, "vision_embed": 256, "vision_depth": 4}
# Qwen2.5-VL-7B-Instruct's config.json where it differs from transformers' Qwen2_5_VLTextConfig defaults
# (architecture values; token ids come from the tiny tokenizer)
QWEN25_VL_7B_TEXT = {
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "max_position_embeddings": 128000,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "sliding_window": 32768,
    "max_window_layers": 28,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
}
# and its vision config where it differs from Qwen2_5_VLVisionConfig's defaults
QWEN25_VL_7B_VISION = {"hidden_size": 1280, "tokens_per_second": 2}
# a dry run's tiny config of the same architecture
TINY_TEXT = {
    **QWEN25_VL_7B_TEXT,
    **{"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4},
    **{"num_key_value_heads": 2, "vocab_size": 1024, "max_window_layers": 2},
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]},
}
TINY_VISION = {
    **QWEN25_VL_7B_VISION,
    **{"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64},
    **{"window_size": 56, "fullatt_block_indexes": [1]},
}


def arguments(doc: str, argv: Sequence[str] | None = None, *, gpu: bool = False, **options: dict) -> Any:
    """The script's options, ``NAME=dict(add_argument's keywords)`` each (``--NAME``, dashes for underscores), and,
    with ``gpu``, a GPU check's ``--dry-run``, ``--out`` (default ``$OUT``) and ``--work``. Log lines go to stdout; a
    dry run hides the GPU before torch first asks for it."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if gpu:
        parser.add_argument("--dry-run", action="store_true", help="tiny models on the CPU (checks the script)")
        parser.add_argument("--out", default=os.environ.get("OUT"), help="folder for the result files")
        parser.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    for name, kwargs in options.items():
        parser.add_argument("--" + name.replace("_", "-"), **kwargs)
    args = parser.parse_args(argv)
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s" if gpu else "%(message)s"
    logging.basicConfig(level=logging.INFO, format=fmt, stream=sys.stdout, force=True)
    for noisy in ("transformers", "accelerate", "deepspeed", "datasets", "httpx", "httpx2", "diffusers", "uvicorn"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if gpu and args.dry_run:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    return args


def noise_images(n: int, side: int, seed: int = 0, mixed: bool = False) -> list[Image.Image]:
    """``n`` random RGB images ``side`` px high; ``mixed``: three widths in turn (three token counts)."""
    rng = np.random.default_rng(seed)
    widths = [max(side - (28 * (i % 3) if mixed else 0), 28) for i in range(n)]
    return [Image.fromarray(rng.integers(0, 256, (side, w, 3), dtype=np.uint8)) for w in widths]


def speed_models(folder: Path, quick: bool) -> Iterator[tuple[str, Any, int]]:
    """The tiny random Qwen2-VL at 56 px and, unless ``quick``, the larger one at 448 px, loaded one at a time:
    ``(label with the parameter count, VLM, image side)``."""
    from reward.testing import make_tiny_vlm
    from reward.vlm import load_vlm

    configs = [("tiny (hidden 64, 2 layers, 56 px)", {}, 56)]
    if not quick:
        configs.append(("large (hidden 512, 8 layers, ViT 4x256, 448 px)", {**LARGE, "image_pixels": 448 * 448}, 448))
    for i, (label, kwargs, side) in enumerate(configs):
        vlm = load_vlm(make_tiny_vlm(folder / f"vlm{i}", **kwargs), batch_size=64)
        yield f"{label}, {sum(p.numel() for p in vlm.model.parameters()) / 1e6:.1f}M", vlm, side


def best_times(fns: Sequence[Callable[[], Any]], repeats: int) -> list[tuple[float, float, Any]]:
    """Each function's best wall and CPU seconds (this process, all its threads) over ``repeats`` rounds, run in turn
    so that the load of these shared machines hits all alike, and its last result."""
    best = [[float("inf"), float("inf"), None] for _ in fns]
    for _ in range(repeats):
        for fn, b in zip(fns, best, strict=True):
            w0, c0 = time.perf_counter(), time.process_time()
            b[2] = fn()
            b[1] = min(b[1], time.process_time() - c0)
            b[0] = min(b[0], time.perf_counter() - w0)
    return [(w, c, r) for w, c, r in best]


def markdown(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table (a ``|`` inside a cell becomes ``/``)."""
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(str(c).replace("|", "/") for c in line) + " |" for line in lines)


class Table:
    """A GPU check's rows of (section, metric, value), each logged as it comes, the whole table printed at the end;
    no section starts after ``budget_s``."""

    def __init__(self, budget_s: float = float("inf")) -> None:
        self.rows: list[tuple[str, str, str]] = []
        self.deadline = time.perf_counter() + budget_s

    def add(self, section: str, metric: str, value: Any) -> None:
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        self.rows.append((section, metric, text))
        logger.info("%s | %s | %s", section, metric, text)

    def finish(self, out: str | None, name: str) -> Table:
        """Print the whole table; with ``out``, also write its rows to ``out/name``."""
        print("\n" + markdown(("section", "metric", "value"), self.rows), flush=True)
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            (Path(out) / name).write_text(json.dumps(self.rows, indent=1))
        return self


def guarded(table: Table, section: str, fn: Callable[[], Any]) -> Any:
    """Run one section and return its result; a failure becomes a table row (and None), never the end of the check."""
    if time.perf_counter() > table.deadline:
        table.add(section, "skipped", "the --budget-s time was used up before it")
        return None
    logger.info("== %s", section)
    t0 = time.perf_counter()
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - every section must be reported, whatever breaks
        logger.error("%s failed:\n%s", section, traceback.format_exc())
        table.add(section, "FAILED", f"{type(err).__name__}: {str(err).splitlines()[0][:150] if str(err) else ''}")
        return None
    finally:
        table.add(section, "section seconds", round(time.perf_counter() - t0, 1))
        gc.collect()
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


@contextlib.contextmanager
def workdir(folder: str | None, prefix: str) -> Iterator[Path]:
    """``folder`` (made if missing), or a temporary folder removed afterwards."""
    if folder is None:
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            yield Path(tmp)
    else:
        Path(folder).mkdir(parents=True, exist_ok=True)
        yield Path(folder)


def build_checkpoint(
    out: Path,
    text: dict,
    vision: dict,
    pixels: int,
    seed: int = 0,
    *,
    family: str = "qwen2_5_vl",
    processor: dict | None = None,
) -> Path:
    """A random-weight bf16 checkpoint of ``family`` from config values over its config class's defaults, built on the
    GPU if any, with the tiny VLM's tokenizer, processor and chat template (the tokenizer's ids are a subset of any
    vocabulary here); ``processor``: image processor settings over the tiny one's."""
    import torch
    import transformers

    from reward.testing import make_tiny_vlm

    tiny = transformers.AutoConfig.from_pretrained(make_tiny_vlm(out, family=family, image_pixels=pixels))
    (out / "model.safetensors").unlink(missing_ok=True)  # the tiny weights: the real-size ones are saved in shards
    special = {k: getattr(tiny.text_config, k) for k in ("pad_token_id", "eos_token_id", "bos_token_id")}
    text = {**text, **special, "model_type": tiny.text_config.model_type}
    top = {k: v for k, v in tiny.to_dict().items() if "token_id" in k}
    cls = type(tiny)
    if "hidden_size" in cls.__annotations__:  # Ovis2's visual embedding table is sized from the top level
        top |= {"hidden_size": text.get("hidden_size", 4096), "vocab_size": text.get("vocab_size", 151936)}
    config = cls(text_config=text, vision_config=dict(vision), **top)
    if processor:  # Ovis2: the image side, and the visual tokens an image takes, follow the vision config
        ip = transformers.AutoImageProcessor.from_pretrained(out)
        type(ip)(**{**ip.to_dict(), **processor}).save_pretrained(out)
        v, file = config.vision_config, out / "processor_config.json"
        seq = (v.image_size // (v.patch_size * v.hidden_stride)) ** 2
        file.write_text(json.dumps({**json.loads(file.read_text()), "image_seq_length": seq}, indent=2))
    torch.manual_seed(seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with device:
        model = transformers.AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    logger.info(
        "built %.2fB parameters on %s; saving to %s", sum(p.numel() for p in model.parameters()) / 1e9, device, out
    )
    model.save_pretrained(out, max_shard_size="5GB")
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


def tensors(folder: Path) -> dict[str, Any]:
    """Every tensor of the ``*.safetensors`` files in ``folder``."""
    from safetensors.torch import load_file

    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(f).items()}
