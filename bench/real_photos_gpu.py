"""Real distortions learned with GPU compute: the tiny-real-photos-gpu recipe, held-out SRCC per type beside BRISQUE.

    python bench/real_photos_gpu.py --out DIR                 # one GPU: train within --budget-s (default 210 s)
    python bench/real_photos_gpu.py --out DIR --dry-run       # the same steps on the CPU, a few training steps

Trains the tiny ``small`` VLM from scratch with ``training/sft.py +recipe=tiny-real-photos-gpu`` within the budget,
the held-out SRCC every ``--every`` steps (the curve); then the final SRCC on the held-out set of docs/photos.md,
overall and per distortion type beside BRISQUE, and the scorer loaded back by ``reward/evaluate.py`` on the CPU.
Writes ``real_photos.json`` (the table's rows, the curve, the metrics) and ``real_photos_curve.png`` to --out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import ROOT, Table, arguments, logger, workdir
from transformers import TrainerCallback

from reward.core.config import parse

GOAL = 0.6  # held-out SRCC per distortion type
BRISQUE_REFERENCE = ROOT / "bench" / "brisque_heldout.json"


def per_type_srcc(rows: list[dict[str, Any]], pred: dict[str, float]) -> dict[str, float]:
    """SRCC against the MOS overall and per distortion type (that type's images with the pristine ones).

    >>> rows = [{"image": "a", "mos": 4.7, "distortion": "pristine"}, {"image": "b", "mos": 3.0, "distortion": "blur"},
    ...         {"image": "c", "mos": 2.0, "distortion": "blur"}, {"image": "d", "mos": 1.0, "distortion": "noise"}]
    >>> per_type_srcc(rows, {"a": 9.0, "b": 8.0, "c": 1.0, "d": 5.0})
    {'overall': 0.8, 'blur': 1.0, 'noise': 1.0}
    """
    from reward.eval.metrics import srcc

    scored = [r for r in rows if r["image"] in pred]
    out = {"overall": round(srcc([pred[r["image"]] for r in scored], [r["mos"] for r in scored]), 4)}
    for kind in sorted({r["distortion"] for r in scored} - {"pristine"}):
        part = [r for r in scored if r["distortion"] in ("pristine", kind)]
        out[kind] = round(srcc([pred[r["image"]] for r in part], [r["mos"] for r in part]), 4)
    return out


class HeldoutCurve(TrainerCallback):
    """Every ``every`` steps (and at the end), the held-out SRCC of the model being trained, scored in place."""

    def __init__(
        self, rows: list[dict[str, Any]], images: list[Any], meta: dict[str, Any], model_dir: Path, every: int
    ) -> None:
        from reward.vlm import load_processor

        self.rows, self.images, self.meta, self.every = rows, images, meta, every
        self.processor = load_processor(model_dir)  # its own: scoring pads on the left, whatever training does
        self.curve: list[dict[str, Any]] = []

    def score(self, model: Any, step: int) -> None:
        from reward.rewards.sa_iqa import SaIqaReward
        from reward.vlm import VLM

        was_training = model.training
        model.eval()
        reward = SaIqaReward(VLM(model, self.processor, batch_size=512), self.meta)
        scores = torch.cat([reward.score(self.images[i : i + 512]).scores for i in range(0, len(self.images), 512)])
        model.train(was_training)
        pred = {r["image"]: float(s) for r, s in zip(self.rows, scores, strict=True)}
        point = {"step": step, **per_type_srcc(self.rows, pred)}
        self.curve.append(point)
        logger.info("held-out SRCC at step %d: %s", step, point)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.every == 0:
            self.score(kwargs["model"], state.global_step)


class TimeBudget(TrainerCallback):
    """Stop training once ``seconds`` of wall time have passed since the first step."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.start = seconds, 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.start = self.start or time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.elapsed > self.seconds:
            control.should_training_stop = True

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start if self.start else 0.0


def image_digest(image: Any) -> str:
    """sha256 of an image's RGB pixels (the held-out image a recorded BRISQUE score belongs to)."""
    return hashlib.sha256(np.asarray(image.convert("RGB")).tobytes()).hexdigest()


def brisque_raw(rows: list[dict[str, Any]], images: list[Any], reference: Path = BRISQUE_REFERENCE) -> np.ndarray:
    """BRISQUE of each held-out image (lower is better; NaN where undefined): computed with the ``brisque``
    package where it imports, else read from ``reference`` (written here with ``--write-brisque``; the GPU image
    lacks libsvm), for images whose pixels match the recorded digests."""
    try:
        from training.procedural.photos import brisque_scores

        return brisque_scores(images)
    except (ImportError, OSError) as err:  # no brisque package, or its libsvm library missing
        if not reference.is_file():
            raise RuntimeError(f"BRISQUE: {err}, and no recorded scores in {reference}") from err
    recorded = json.loads(reference.read_text())["images"]
    out = []
    for row, image in zip(rows, images, strict=True):
        entry = recorded.get(row["image"])
        if entry is None or entry["sha256"] != image_digest(image):
            raise RuntimeError(f"BRISQUE: {row['image']} differs from the image scored in {reference}")
        out.append(np.nan if entry["brisque"] is None else entry["brisque"])
    logger.info("BRISQUE: the brisque package is missing; %d recorded scores of identical images used", len(out))
    return np.array(out, dtype=float)


def brisque_per_type(rows: list[dict[str, Any]], raw: np.ndarray) -> dict[str, float]:
    """BRISQUE (negated: higher is better; undefined on flat images, ranked worst) per type, as per_type_srcc."""
    failed = ~np.isfinite(raw)
    pred = -np.where(failed, np.nanmax(raw[~failed]) + 1.0, raw) if (~failed).any() else np.zeros(len(raw))
    return per_type_srcc(rows, {r["image"]: float(p) for r, p in zip(rows, pred, strict=True)})


def heldout_set(work: Path, dry_run: bool) -> Path:
    """The held-out set of docs/photos.md (2 crops of each held-out photo; 1 in a dry run)."""
    from training.procedural.photos import write_heldout

    return write_heldout(work / "heldout", crop=112, side=224, crops_per_photo=1 if dry_run else 2)


def write_brisque_reference(path: Path) -> None:
    """Record BRISQUE of every image of the GPU run's held-out set, with each image's digest."""
    from reward.data import load_image
    from reward.data.files import atomic_write_json, read_records

    with tempfile.TemporaryDirectory() as tmp:
        manifest = heldout_set(Path(tmp), dry_run=False)
        rows = read_records(manifest)
        images = [load_image(manifest.parent / r["image"]) for r in rows]
        raw = brisque_raw(rows, images, reference=Path("/nonexistent"))
    entries = {
        r["image"]: {"sha256": image_digest(im), "brisque": None if not np.isfinite(v) else round(float(v), 6)}
        for r, im, v in zip(rows, images, raw, strict=True)
    }
    atomic_write_json(path, {"what": "BRISQUE of bench/real_photos_gpu.py's held-out set", "images": entries})
    logger.info("BRISQUE of %d held-out images written to %s: %s", len(rows), path, brisque_per_type(rows, raw))


def reload_on_cpu(scorer: Path, manifest: Path, out: Path) -> dict[str, Any]:
    """``reward/evaluate.py reward=sa-iqa`` on the CPU (no GPU visible) with the trained scorer; its metrics."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [sys.executable, str(ROOT / "reward/evaluate.py"), "reward=sa-iqa", f"reward.model={scorer}"]
    cmd += ["reward.device=cpu", "reward.dtype=float32", f"data={manifest}", f"out={out}", "batch_size=64"]
    cmd.append("num_workers=2")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"reward/evaluate.py on the CPU exited {proc.returncode}: {proc.stderr[-800:]}")
    return json.loads((out / "metrics.json").read_text())


def plot_curve(curve: list[dict[str, Any]], brisque: dict[str, float], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    steps = [p["step"] for p in curve]
    for key in curve[0]:
        if key != "step":
            ax.plot(steps, [p[key] for p in curve], marker="o", lw=2 if key == "overall" else 1, label=key)
    ax.axhline(GOAL, color="k", ls=":", lw=1)
    if "overall" in brisque:
        ax.axhline(brisque["overall"], color="grey", ls="--", lw=1, label="BRISQUE overall")
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out SRCC")
    ax.legend(fontsize=7, ncol=2)
    fig.savefig(path, dpi=100, bbox_inches="tight")


def run(args: argparse.Namespace, work: Path) -> Table:
    from reward.core.cli import compose
    from reward.data import load_image
    from reward.data.files import read_records
    from reward.testing import make_tiny_vlm
    from training.commands.sft import SftSettings
    from training.commands.sft import run as run_sft
    from training.prompts import scorer_metadata

    table, section = Table(), "real photos"
    t0 = time.perf_counter()
    manifest = heldout_set(work, args.dry_run)
    rows = read_records(manifest)
    images = [load_image(manifest.parent / r["image"]) for r in rows]
    try:
        brisque = brisque_per_type(rows, brisque_raw(rows, images))
    except RuntimeError as err:
        logger.error("%s", err)
        table.add(section, "BRISQUE", str(err)[:200])
        brisque = {}
    logger.info("held-out set: %d images; BRISQUE %s (%.1f s)", len(rows), brisque, time.perf_counter() - t0)
    model = make_tiny_vlm(work / "model", preset="small")
    meta = scorer_metadata(["quality"], prompt_type=1, definitions={})
    curve = HeldoutCurve(rows, images, meta, model, args.every)
    budget = TimeBudget(args.budget_s)
    overrides = ["+recipe=tiny-real-photos-gpu", f"model.path={model}", f"out={work / 'run'}", f"data.test={manifest}"]
    overrides.append("eval_batch_size=256")
    if args.dry_run:
        overrides += ["trainer.max_steps=4", "trainer.per_device_train_batch_size=4"]
        overrides += ["trainer.dataloader_num_workers=2", "trainer.logging_steps=2"]
    cfg = compose("sft", overrides=overrides, schema=SftSettings)
    t_train = time.perf_counter()
    result = run_sft(parse(SftSettings, cfg), callbacks=[curve, budget])
    wall = time.perf_counter() - t_train
    steps = int(result["global_step"])
    batch = int(cfg.trainer.per_device_train_batch_size)
    scored = read_records(work / "run" / "scores.jsonl")
    final = per_type_srcc(rows, {r["image"]: float(r["score"]) for r in scored if r.get("score") is not None})
    if not curve.curve or curve.curve[-1]["step"] != steps:
        curve.curve.append({"step": steps, **final})
    table.add(section, "steps done (batch)", f"{steps} ({batch})")
    table.add(section, "training wall seconds (budget)", f"{budget.elapsed:.0f} ({args.budget_s:.0f})")
    table.add(section, "examples/s", f"{steps * batch / max(budget.elapsed, 1e-9):.1f}")
    table.add(section, "SFT run incl. final evaluation, seconds", f"{wall:.1f}")
    table.add(section, "held-out images", len(rows))
    for key in final:
        table.add(section, f"SRCC {key}: VLM / BRISQUE", f"{final[key]:.3f} / {brisque.get(key, float('nan')):.3f}")
    per_type = {k: v for k, v in final.items() if k != "overall"}
    reached = all(v >= GOAL for v in per_type.values())
    table.add(section, f"every type >= {GOAL}", "yes" if reached else f"no (min {min(per_type.values()):.3f})")
    table.add(
        section, "curve: step -> overall SRCC", ", ".join(f"{p['step']}: {p['overall']:.2f}" for p in curve.curve)
    )
    cpu = reload_on_cpu(Path(result["scorer"]), manifest, work / "cpu_eval")
    srcc = f"{cpu['quality']['srcc']:.4f} / {result['metrics']['quality']['srcc']:.4f}"
    table.add(section, "reloaded on CPU (reward=sa-iqa): SRCC / in the run", srcc)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot_curve(curve.curve, brisque, out / "real_photos_curve.png")
    payload = {"rows": table.rows, "curve": curve.curve, "final": final, "brisque": brisque, "cpu_metrics": cpu}
    (out / "real_photos.json").write_text(json.dumps(payload, indent=1))
    return table


def main(argv: list[str] | None = None) -> None:
    args = arguments(
        __doc__,
        argv,
        gpu=True,
        budget_s={"type": float, "default": 210.0, "help": "training wall-clock budget"},
        every={"type": int, "default": 250, "help": "held-out SRCC every this many steps"},
        write_brisque={"help": "only record BRISQUE of the held-out set to this file"},
    )
    if args.write_brisque:
        return write_brisque_reference(Path(args.write_brisque))
    args.out = args.out or "real_photos_out"
    args.every = min(args.every, 2) if args.dry_run else args.every
    with workdir(args.work, "real_photos_") as work:
        run(args, work).finish(None, "")


if __name__ == "__main__":
    main()
