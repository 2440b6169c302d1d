"""The main job on the embedded default, offline, on CPU: `make demo` (or `python demo.py out=demo_out`).

1. builds a tiny random Qwen2-VL checkpoint (real architecture, offline),
2. scores the bundled sample images with `reward=qbench` (Q-Bench+ zero-shot),
3. generates a procedural interior benchmark and fine-tunes the tiny VLM on it with SA-IQA SFT
   (`training/sft.py`), evaluating it before and after,
4. fits Bradley-Terry fusion weights of the four dimensions on the benchmark's preference pairs,
5. reranks inpainted candidates with Best-of-N (`rl/best_of_n.py`) and trains a tiny prompt-expansion policy
   with GRPO against a procedural reward (`rl/grpo.py`),
and writes everything with a report to `out/report.md`.

The demo folder follows the output policy of every command: `make demo` again with the same settings resumes it
(a section finished earlier is read back from `out/sections/`, an interrupted one continues: SFT from its last
checkpoint); other settings there are refused (`overwrite=true` moves the old folder aside).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from reward.commands.evaluate import run as run_evaluate
from reward.core.cli import compose, main
from reward.core.config import parse, store_schema
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
    steps: int = 600  # SFT steps of 16 fresh procedural images (a few minutes on 2 CPU cores)
    test_scenes: int = 80  # held-out benchmark size


@dataclass
class Toggle:
    enabled: bool = True


@dataclass
class BonPart:
    enabled: bool = True
    tasks: int = 20  # procedural inpainting tasks reranked by the SFT scorer (Best-of-N)
    n: int = 4  # candidates per task


@dataclass
class GrpoPart:
    enabled: bool = True
    steps: int = 40  # GRPO steps of 2 prompts x 8 completions (tiny text policy, scene-proxy reward)


@dataclass
class DemoSettings:
    out: str = "demo_out"  # everything goes here (the tiny models in out/models)
    seed: int = 0
    sft: SftPart = field(default_factory=SftPart)
    fusion: Toggle = field(default_factory=Toggle)
    bon: BonPart = field(default_factory=BonPart)
    grpo: GrpoPart = field(default_factory=GrpoPart)
    overwrite: bool = False  # true: an out/ holding another demo run is moved aside to out.old-<time>


store_schema("demo_schema", DemoSettings)


def _compose(name: str, overrides: list[str]) -> DictConfig:
    return compose(name, overrides)


def qbench_section(model: Path, out: Path) -> tuple[str, dict[str, Any]]:
    # resume=true: an interrupted demo continues scoring where it stopped (a new folder is simply made)
    cfg = _compose("evaluate", [f"reward.model={model}", f"data={SAMPLES}", f"out={out}", "resume=true"])
    metrics = run_evaluate(cfg)
    text = (
        "## 1. Zero-shot Q-Bench+ scores of the bundled samples (`reward=qbench`)\n\n"
        f"`python reward/evaluate.py reward=qbench reward.model={model} data={SAMPLES.relative_to(ROOT)} "
        f"out={out}`\n\n"
        "A random tiny model knows nothing about quality: these numbers show the pipeline, not a result.\n\n"
        f"```\n{format_table(metrics)}\n```\n\n![lighting]({out.name}/scatter_lighting.png)\n"
    )
    return text, metrics


def sft_section(model: Path, out: Path, cfg: DictConfig) -> tuple[str, dict[str, Any]]:
    from training.commands.sft import run as run_sft
    from training.procedural.synthetic import write_benchmark

    bench = write_benchmark(out / "benchmark", cfg.sft.test_scenes, size=64, seed=cfg.seed + 1)
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
    result = run_sft(_compose("sft", overrides))
    before, after = result["metrics_before"], result["metrics"]
    rows = ["| dimension | SRCC before | SRCC after | PLCC after |", "|---|---|---|---|"]
    for dim in after:
        if isinstance(after[dim], dict):
            rows.append(f"| {dim} | {before[dim]['srcc']:.3f} | {after[dim]['srcc']:.3f} | {after[dim]['plcc']:.3f} |")
    text = (
        "## 2. SA-IQA fine-tuning of the tiny VLM on procedural interiors (`training/sft.py`)\n\n"
        f"Fresh scenes every step, {cfg.sft.steps} steps of 16, prompt type 2 (the `<dimension>` tag first lets "
        "the tiny model tell the dimensions apart); "
        f"held-out benchmark of {cfg.sft.test_scenes} scenes.\n\n"
        + "\n".join(rows)
        + f"\n\n![lighting after](sft/scatter_lighting.png)\n\nScorer: `{result['scorer']}` "
        "(load it with `reward=sa-iqa reward.model=...`).\n"
    )
    return text, {"before": before, "after": after, "bench": str(bench.root), "scorer": result["scorer"]}


def fusion_section(out: Path, scorer: str, bench: str) -> str:
    from fusion.commands.fit import run as run_fit

    cfg = _compose(
        "fusion",
        [
            f"pairs={Path(bench) / 'pairs.jsonl'}",
            f"scores={out / 'sft' / 'scores.jsonl'}",
            f"scores_root={bench}",
            f"out={out / 'fusion' / 'fusion_weights.json'}",
            "overwrite=true",  # only an interrupted demo leaves a weights file without its section: moved aside
        ],
    )
    run_fit(cfg)
    weights = json.loads((out / "fusion" / "fusion_weights.json").read_text())
    table = "\n".join(f"| {d} | {w:.3f} |" for d, w in zip(weights["dimensions"], weights["weights"], strict=True))
    pref = json.loads((Path(bench) / "benchmark.json").read_text()).get("preference", {})
    truth = {d: round(w, 3) for d, w in pref.get("bradley_terry_weights", {}).items()}
    return (
        "## 3. Bradley-Terry fusion of the four dimensions (`fusion/fit.py`)\n\n"
        f"Fitted on the benchmark's preference pairs with the fine-tuned scorer's dimension scores. The pairs were "
        f"drawn from true levels with Bradley-Terry weights {truth}; the fitted weights can only recover them as far "
        f"as the scorer's dimension scores track the true levels (table above).\n\n"
        f"| dimension | weight |\n|---|---|\n{table}\n\n"
        "![weights](fusion/fusion_weights.png)\n"
    )


def _section(out: Path, name: str, build: Callable[[], tuple[str, dict[str, Any]]]) -> tuple[str, dict[str, Any]]:
    """A report section and its results: read back when an earlier run of this demo finished it, else built and
    recorded in ``out/sections/NAME.json`` (atomically, after the section's own outputs)."""
    record = out / "sections" / f"{name}.json"
    if record.is_file():
        saved = json.loads(record.read_text())
        logger.info("%s: finished by an earlier run of this demo (%s), not redone", name, record)
        return saved["text"], saved["data"]
    text, data = build()
    atomic_write_json(record, {"text": text, "data": json_safe(data)})
    return text, data


def run(cfg: DictConfig) -> None:
    s = parse(DemoSettings, cfg, where="")
    settings = {k: v for k, v in dataclasses.asdict(s).items() if k not in ("out", "overwrite")}
    output = prepare_output(s.out, "demo", settings, resume=True, overwrite=s.overwrite, resume_hint=None)
    out = Path(s.out).resolve()
    if output.resumed:
        logger.info("%s holds this demo run: resuming it (finished sections are read back)", out)
    model = make_tiny_vlm(out / "models" / "tiny-qwen2-vl", seed=cfg.seed)
    logger.info("tiny Qwen2-VL checkpoint: %s", model)
    sections = ["# perceptual-rewards demo\n", f"Config:\n\n```yaml\n{OmegaConf.to_yaml(cfg)}```\n"]
    text, _ = _section(out, "qbench", lambda: qbench_section(model, out / "qbench"))
    sections.append(text)
    scorer = None
    if cfg.sft.enabled:
        text, sft = _section(out, "sft", lambda: sft_section(model, out, cfg))
        sections.append(text)
        scorer = sft["scorer"]
        if cfg.fusion.enabled:
            text, _ = _section(out, "fusion", lambda: (fusion_section(out, sft["scorer"], sft["bench"]), {}))
            sections.append(text)
    if cfg.bon.enabled:
        from rl.demo import bon_section

        fusion = out / "fusion" / "fusion_weights.json"
        weights = str(fusion) if fusion.exists() else None
        text, _ = _section(out, "best_of_n", lambda: (bon_section(out, cfg, scorer, weights), {}))
        sections.append(text)
    if cfg.grpo.enabled:
        from reward.testing import make_tiny_lm
        from rl.demo import grpo_section

        policy = make_tiny_lm(out / "models" / "tiny-lm", seed=cfg.seed)
        text, _ = _section(out, "grpo", lambda: (grpo_section(out, cfg, policy), {}))
        sections.append(text)
    atomic_write_text(out / "report.md", "\n".join(sections))
    logger.info("report: %s", out / "report.md")


if __name__ == "__main__":
    main("demo", run, doc=__doc__)
