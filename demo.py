"""The main job on the embedded default, offline, on CPU: `make demo` (or `python demo.py out=demo_out`).

Every section runs on data whose truth is known, and its caption says what its numbers show:

1. builds a tiny random Qwen2-VL checkpoint (real architecture, offline) and scores the bundled sample images with
   `reward=qbench` (Q-Bench+ zero-shot): the pipeline, not a result (a random model knows nothing of quality),
2. generates a procedural interior benchmark (true levels 1-5 per dimension) and fine-tunes the tiny VLM on it with
   SA-IQA SFT (`training/sft.py`), evaluating it before and after,
3. fits Bradley-Terry fusion weights on the benchmark's preference pairs, once on the true levels (the generating
   weights are recovered) and once on the fine-tuned scorer's dimension scores (as a user would),
4. reranks inpainted candidates with Best-of-N (`rl/best_of_n.py`), judged by the candidates' true quality,
5. trains a tiny prompt-expansion policy with GRPO against a procedural reward (`rl/grpo.py`),
and writes everything with a report to `out/report.md`. The console gets one line per section; each section's own
output (command logs, trainer progress, library warnings) goes to `out/logs/SECTION.log`.

The demo folder follows the output policy of every command: `make demo` again with the same settings resumes it
(a section finished earlier is read back from `out/sections/`, an interrupted one continues: SFT from its last
checkpoint); other settings there are refused (`overwrite=true` moves the old folder aside).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.core.cli import compose, main
from reward.core.config import at_least, parse
from reward.core.outputs import prepare_output
from reward.data.files import atomic_write_json, atomic_write_text, json_safe
from reward.eval.evaluation import format_table
from reward.testing import make_tiny_vlm

logger = logging.getLogger("demo")
ROOT = Path(__file__).resolve().parent
SAMPLES = ROOT / "reward/assets/samples/ratings.jsonl"


@dataclass
class SftPart:
    enabled: bool = True
    steps: int = field(
        default=600,
        metadata={
            "help": "SFT steps of 16 fresh procedural images (a few minutes on 2 CPU cores)",
            "range": at_least(1, 1_000_000),
        },
    )
    test_scenes: int = field(default=80, metadata={"help": "held-out benchmark size", "range": at_least(1, 1_000_000)})
    pairs: int = field(
        default=2000,
        metadata={
            "help": "preference pairs drawn over the benchmark's images (the fusion fits, section 3)",
            "range": at_least(1, 10_000_000),
        },
    )


@dataclass
class Toggle:
    enabled: bool = True


@dataclass
class BonPart:
    enabled: bool = True
    tasks: int = field(
        default=40,
        metadata={
            "help": "procedural inpainting tasks reranked by the SFT scorer and by scene-proxy (Best-of-N)",
            "range": at_least(1, 1_000_000),
        },
    )
    n: int = field(default=4, metadata={"help": "candidates per task", "range": at_least(1, 4096)})


@dataclass
class GrpoPart:
    enabled: bool = True
    steps: int = field(
        default=40,
        metadata={
            "help": "GRPO steps of 2 prompts x 8 completions (tiny text policy, scene-proxy reward)",
            "range": at_least(1, 1_000_000),
        },
    )


@dataclass
class DemoSettings:
    out: str = field(default="demo_out", metadata={"help": "everything goes here (the tiny models in out/models)"})
    seed: int = 0
    sft: SftPart = field(default_factory=SftPart)
    fusion: Toggle = field(default_factory=Toggle)
    bon: BonPart = field(default_factory=BonPart)
    grpo: GrpoPart = field(default_factory=GrpoPart)
    overwrite: bool = field(
        default=False, metadata={"help": "true: an out/ holding another demo run is moved aside to out.old-<time>"}
    )


@contextlib.contextmanager
def _quiet(log: Path) -> Iterator[None]:
    """Everything a section writes to the console (command logs, trainer progress and log dicts, library warnings,
    worker processes) goes to ``log`` instead: the file descriptors 1 and 2 themselves are redirected."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        with open(log, "a", encoding="utf-8") as f:
            os.dup2(f.fileno(), 1)
            os.dup2(f.fileno(), 2)
            try:
                yield
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _mean_srcc(metrics: dict[str, Any]) -> float:
    values = [m["srcc"] for d, m in metrics.items() if isinstance(m, dict) and d != "overall" and m.get("srcc")]
    return float(np.mean(values)) if values else float("nan")


def qbench_section(model: Path, out: Path) -> tuple[str, dict[str, Any]]:
    # resume=true: an interrupted demo continues scoring where it stopped (a new folder is simply made)
    cfg = compose(
        "evaluate", [f"reward.model={model}", f"data={SAMPLES}", f"out={out}", "resume=true"], schema=EvaluateSettings
    )
    metrics = run_evaluate(cfg)
    text = (
        "## 1. Zero-shot Q-Bench+ scores of the bundled samples (`reward=qbench`)\n\n"
        f"`python reward/evaluate.py reward=qbench reward.model={model} data={SAMPLES.relative_to(ROOT)} "
        f"out={out}`\n\n"
        "What it shows: the scoring pipeline end to end (ratings manifest in, PLCC/SRCC/KRCC/HOR and scatter plots "
        "out). What it does not: the model is a tiny *random* VLM that knows nothing about quality, so these "
        "correlations are noise on 12 images and no claim about Q-Bench+ on real models.\n\n"
        f"```\n{format_table({k: v for k, v in metrics.items() if k != 'meta'})}\n```\n\n"
        f"![lighting]({out.name}/scatter_lighting.png)\n"
    )
    summary = f"zero-shot Q-Bench+ on {SAMPLES.parent.name}: overall SRCC {metrics['overall']['srcc']:.3f}"
    return text, {"summary": summary}


def sft_section(model: Path, out: Path, cfg: DictConfig) -> tuple[str, dict[str, Any]]:
    from training.commands.sft import SftSettings
    from training.commands.sft import run as run_sft
    from training.procedural.synthetic import write_benchmark

    bench = write_benchmark(out / "benchmark", cfg.sft.test_scenes, size=64, seed=cfg.seed + 1, n_pairs=cfg.sft.pairs)
    overrides = [
        f"model.path={model}",
        "data.train=synthetic",
        f"data.test={bench.ratings}",
        f"out={out / 'sft'}",
        "eval_before=true",
        "prompt.type=2",
        f"trainer.max_steps={cfg.sft.steps}",
        "trainer.learning_rate=1e-3",
        "trainer.per_device_train_batch_size=16",
        "trainer.gradient_accumulation_steps=1",
        "trainer.lr_scheduler_type=constant",
        f"trainer.save_steps={cfg.sft.steps // 2}",
        "trainer.logging_steps=25",
        f"trainer.seed={cfg.seed}",
        f"data.synthetic_seed={cfg.seed}",
    ]
    result = run_sft(compose("sft", overrides, schema=SftSettings))
    before, after = result["metrics_before"], result["metrics"]
    rows = ["| dimension | SRCC before | SRCC after | PLCC after |", "|---|---|---|---|"]
    for dim in after:
        if isinstance(after[dim], dict):
            rows.append(f"| {dim} | {before[dim]['srcc']:.3f} | {after[dim]['srcc']:.3f} | {after[dim]['plcc']:.3f} |")
    text = (
        "## 2. SA-IQA fine-tuning of the tiny VLM on procedural interiors (`training/sft.py`)\n\n"
        f"Fresh scenes every step, {cfg.sft.steps} steps of 16, prompt type 2 (the `<dimension>` tag first lets "
        "the tiny model tell the dimensions apart); "
        f"held-out benchmark of {cfg.sft.test_scenes} scenes whose four levels (1-5) are known, MOS = level + "
        "noise.\n\n"
        + "\n".join(rows)
        + "\n\nWhat it shows: SA-IQA's recipe (rating words, expected value over the five words) teaches a VLM "
        "trained from scratch to read levels it never saw on held-out images, per dimension. What it does not: "
        "the scenes are drawn procedurally with strong, monotone effects; the SRCC says nothing about real "
        "photos or real checkpoints.\n\n"
        f"![lighting after](sft/scatter_lighting.png)\n\nScorer: `{result['scorer']}` "
        "(load it with `reward=sa-iqa reward.model=...`).\n"
    )
    summary = (
        f"SA-IQA SFT, {cfg.sft.steps} steps: mean held-out SRCC {_mean_srcc(before):.3f} -> {_mean_srcc(after):.3f}"
    )
    return text, {
        "before": before,
        "after": after,
        "bench": str(bench.root),
        "scorer": result["scorer"],
        "summary": summary,
    }


def _unit(values: Any) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    return v / np.abs(v).sum()


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def fusion_section(out: Path, bench: str) -> tuple[str, dict[str, Any]]:
    from fusion.commands.fit import FusionSettings
    from fusion.commands.fit import run as run_fit
    from reward.core.errors import UserError

    root = Path(bench)
    meta = json.loads((root / "benchmark.json").read_text())["preference"]
    # the true levels as a scores file (image paths relative to its own folder, the benchmark's)
    true_levels = root / "true_levels.jsonl"
    rows = [json.loads(line) for line in (root / "levels.jsonl").read_text().splitlines() if line.strip()]
    atomic_write_text(true_levels, "".join(json.dumps({"image": r["image"], **r["levels"]}) + "\n" for r in rows))
    fits: dict[str, Any] = {}
    refused = None  # the fit's reason when the scorer's dimension scores order no pair (nothing usable to write)
    for name, scores in (("true_levels", true_levels), ("scorer", out / "sft" / "scores.jsonl")):
        target = out / "fusion" / ("fusion_weights.json" if name == "scorer" else "true_levels_weights.json")
        # bootstrap intervals for the scorer's weights (its chart); the true levels' fit needs none
        boot = "bootstrap=100" if name == "scorer" else "bootstrap=0"
        overrides = [f"pairs={root / 'pairs.jsonl'}", f"scores={scores}", f"out={target}", boot]
        # overwrite: only an interrupted demo leaves a weights file without its section (moved aside)
        try:
            fits[name] = run_fit(compose("fit", [*overrides, "overwrite=true"], schema=FusionSettings))
        except UserError as err:
            if name != "scorer":
                raise
            refused = str(err)
    dims = list(fits["true_levels"].dimensions)
    generating = np.array([meta["weights"][d] for d in dims])
    truth_fit = np.array(fits["true_levels"].weights)
    scorer_w = dict(zip(fits["scorer"].dimensions, fits["scorer"].weights, strict=True)) if "scorer" in fits else {}
    scorer_fit = np.array([scorer_w.get(d, 0.0) for d in dims])
    fitted = {"true_levels": truth_fit, **({"scorer": scorer_fit} if "scorer" in fits else {})}
    cos = {k: _cosine(generating, v) for k, v in fitted.items()}
    corr = {k: float(np.corrcoef(generating, v)[0, 1]) for k, v in fitted.items()}
    acc = {k: f.meta.get("heldout_accuracy") for k, f in fits.items()}
    g, t = _unit(generating), _unit(truth_fit)
    sc = _unit(scorer_fit) if "scorer" in fits else np.full(len(dims), np.nan)
    table = "\n".join(f"| {d} | {g[i]:.3f} | {t[i]:.3f} | {sc[i]:.3f} |" for i, d in enumerate(dims))
    bt = meta["bradley_terry_weights"]
    raw = ", ".join(f"{d} {truth_fit[i]:.2f} vs {bt[d]:.2f}" for i, d in enumerate(dims))
    n_pairs = fits["true_levels"].meta.get("n_pairs")

    def fmt(x: Any) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    no_weights = f"The fit on the scorer's scores wrote no weights: {refused}.\n\n" if refused else ""

    text = (
        "## 3. Bradley-Terry fusion of the four dimensions (`fusion/fit.py`)\n\n"
        f"The benchmark's {n_pairs} preference pairs were drawn from the true levels by a known rule: image a is "
        "preferred when the weighted sum of its levels, plus logistic noise, is higher (a tie within a margin). "
        "Two fits on the same pairs:\n\n"
        f"- on the true levels (`python fusion/fit.py pairs={root / 'pairs.jsonl'} scores={true_levels}`): "
        "what the fit recovers when the dimension scores are right;\n"
        f"- on the fine-tuned scorer's dimension scores, evaluate's `scores.jsonl` used as written "
        f"(`python fusion/fit.py pairs={root / 'pairs.jsonl'} scores={out / 'sft' / 'scores.jsonl'}`): "
        "what a user gets with this scorer.\n\n"
        "| dimension | generating weight | fitted on true levels | fitted on scorer scores |\n|---|---|---|---|\n"
        f"{table}\n\n"
        "Weights are shown normalised to sum 1 (a ranking does not change with their scale). "
        f"Cosine with the generating weights: {cos['true_levels']:.3f} (true levels), {fmt(cos.get('scorer'))} "
        f"(scorer); Pearson correlation over the four weights: {corr['true_levels']:.3f}, "
        f"{fmt(corr.get('scorer'))}. "
        f"Held-out pair accuracy: {fmt(acc['true_levels'])} (true levels), {fmt(acc.get('scorer'))} (scorer). "
        f"Unnormalised, the fit on true levels gives {raw} (generating weight / noise scale): the scale is larger "
        "because the generator makes a tie by a margin, which Davidson's tie model reads differently; the "
        "direction is what fuses.\n\n"
        "What it shows: given dimension scores that are right, the Bradley-Terry fit with ties recovers how the "
        "pairs were made. What it does not: the scorer's fit measures this tiny scorer, not the fusion; it can "
        "only be as close as its dimension scores track the levels (section 2): where a dimension's SRCC is low, "
        "its weight moves to the dimensions it is confused with.\n\n"
        f"{no_weights}" + ("" if refused else "![weights](fusion/fusion_weights.png)\n")
    )
    summary = f"Bradley-Terry fusion: cosine with the generating weights {cos['true_levels']:.3f} on true levels, " + (
        f"{cos['scorer']:.3f} on the scorer's scores" if not refused else "no usable weights on the scorer's"
    )
    data = {"cosine": cos, "correlation": corr, "heldout_accuracy": acc, "summary": summary, "refused": refused}
    scorer = None if refused else sc.tolist()
    data["weights"] = {"generating": g.tolist(), "true_levels": t.tolist(), "scorer": scorer, "dimensions": dims}
    return text, data


def _section(
    out: Path, index: int, name: str, build: Callable[[], tuple[str, dict[str, Any]]]
) -> tuple[str, dict[str, Any]]:
    """A report section and its results: read back when an earlier run of this demo finished it, else built (its
    console output in ``out/logs/NAME.log``) and recorded in ``out/sections/NAME.json`` (atomically, after the
    section's own outputs). One console line either way."""
    record = out / "sections" / f"{name}.json"
    if record.is_file():
        saved = json.loads(record.read_text())
        logger.info("%d/5 %s: finished by an earlier run of this demo (%s), not redone", index, name, record)
        return saved["text"], saved["data"]
    log = out / "logs" / f"{name}.log"
    try:
        with _quiet(log):
            text, data = build()
    except BaseException:
        logger.error("%d/5 %s failed; its output: %s", index, name, log)
        raise
    atomic_write_json(record, {"text": text, "data": json_safe(data)})
    logger.info("%d/5 %s (log: %s)", index, data.get("summary", name), log.relative_to(out.parent))
    return text, data


def run(cfg: DictConfig) -> None:
    s = parse(DemoSettings, cfg, where="")
    settings = {k: v for k, v in dataclasses.asdict(s).items() if k not in ("out", "overwrite")}
    output = prepare_output(s.out, "demo", settings, resume=True, overwrite=s.overwrite, resume_hint=None)
    out = Path(s.out).resolve()
    if output.resumed:
        logger.info("%s holds this demo run: resuming it (finished sections are read back)", out)
    model = out / "models" / "tiny-qwen2-vl"
    if not ((model / "config.json").exists() and (model / "tokenizer.json").exists()):  # else reused as it is
        with _quiet(out / "logs" / "models.log"):
            make_tiny_vlm(model, seed=cfg.seed)
    sections = ["# perceptual-rewards demo\n", f"Config:\n\n```yaml\n{OmegaConf.to_yaml(cfg)}```\n"]
    text, _ = _section(out, 1, "qbench", lambda: qbench_section(model, out / "qbench"))
    sections.append(text)
    scorer = None
    fusion = None
    if cfg.sft.enabled:
        text, sft = _section(out, 2, "sft", lambda: sft_section(model, out, cfg))
        sections.append(text)
        scorer = sft["scorer"]
        if cfg.fusion.enabled:
            text, _ = _section(out, 3, "fusion", lambda: fusion_section(out, sft["bench"]))
            sections.append(text)
            weights = out / "fusion" / "fusion_weights.json"  # absent when the fit found no usable weights
            fusion = str(weights) if weights.is_file() else None
    if cfg.bon.enabled:
        from rl.demo import bon_section

        text, _ = _section(out, 4, "best_of_n", lambda: bon_section(out, cfg, scorer, fusion))
        sections.append(text)
    if cfg.grpo.enabled:
        from rl.demo import grpo_section

        def grpo() -> tuple[str, dict[str, Any]]:
            from reward.testing import make_tiny_lm

            return grpo_section(out, cfg, make_tiny_lm(out / "models" / "tiny-lm", seed=cfg.seed))

        text, _ = _section(out, 5, "grpo", grpo)
        sections.append(text)
    atomic_write_text(out / "report.md", "\n".join(sections))
    logger.info("report: %s", out / "report.md")


if __name__ == "__main__":
    main("demo", run, schema=DemoSettings, doc=__doc__)
