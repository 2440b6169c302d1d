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

from fusion.commands.fit import FusionSettings
from reward.commands.evaluate import EvaluateSettings
from reward.commands.evaluate import run as run_evaluate
from reward.core.cli import compose, main
from reward.core.config import parse
from reward.core.outputs import prepare_output
from reward.data.files import atomic_write_json, atomic_write_text, json_safe, read_records
from reward.eval.evaluation import format_table

logger = logging.getLogger("demo")
ROOT = Path(__file__).resolve().parent
SAMPLES = ROOT / "reward/assets/samples/ratings.jsonl"


def _count(default: int, what: str, most: int = 1_000_000) -> Any:
    return field(default=default, metadata={"help": what, "range": (1, most)})


@dataclass
class SftPart:
    enabled: bool = True
    steps: int = _count(600, "SFT steps of 16 fresh procedural images (a few minutes on 2 CPU cores)")
    test_scenes: int = _count(80, "held-out benchmark size")
    pairs: int = _count(2000, "preference pairs drawn over the benchmark's images (the fusion fits, section 3)", 10**7)


@dataclass
class Toggle:
    enabled: bool = True


@dataclass
class BonPart:
    enabled: bool = True
    tasks: int = _count(40, "procedural inpainting tasks reranked by the SFT scorer and by scene-proxy (Best-of-N)")
    n: int = _count(4, "candidates per task", 4096)


@dataclass
class GrpoPart:
    enabled: bool = True
    steps: int = _count(40, "GRPO steps of 2 prompts x 8 completions (tiny text policy, scene-proxy reward)")


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
    with open(log, "a", encoding="utf-8") as f:
        saved = os.dup(1), os.dup(2)
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in enumerate(saved, start=1):
                os.dup2(copy, fd)
                os.close(copy)


def _mean_srcc(metrics: dict[str, Any]) -> float:
    values = [m["srcc"] for d, m in metrics.items() if isinstance(m, dict) and d != "overall" and m.get("srcc")]
    return float(np.mean(values)) if values else float("nan")


def qbench_section(model: Path, out: Path) -> tuple[str, dict[str, Any]]:
    # resume=true: an interrupted demo continues scoring where it stopped (a new folder is simply made)
    cfg = compose(
        "evaluate", [f"reward.model={model}", f"data={SAMPLES}", f"out={out}", "resume=true"], schema=EvaluateSettings
    )
    metrics = run_evaluate(parse(EvaluateSettings, cfg))
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
        *(f"model.path={model}", "data.train=synthetic", f"data.test={bench.ratings}", f"out={out / 'sft'}"),
        *("eval_before=true", "prompt.type=2", f"trainer.max_steps={cfg.sft.steps}", "trainer.learning_rate=1e-3"),
        *("trainer.per_device_train_batch_size=16", "trainer.gradient_accumulation_steps=1"),
        *("trainer.lr_scheduler_type=constant", f"trainer.save_steps={cfg.sft.steps // 2}"),
        "trainer.logging_steps=25",
        f"seed={cfg.seed}",
    ]
    result = run_sft(parse(SftSettings, compose("sft", overrides, schema=SftSettings)))
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
    return text, {"before": before, "after": after, "scorer": result["scorer"], "summary": summary}


def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _unit(values: Any) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    return v / np.abs(v).sum()


def fusion_section(out: Path) -> tuple[str, dict[str, Any]]:
    from fusion.commands.fit import run as run_fit
    from reward.core.errors import UserError

    root = out / "benchmark"  # the benchmark of section 2
    meta = json.loads((root / "benchmark.json").read_text())["preference"]
    # the true levels as a scores file (image paths relative to its own folder, the benchmark's)
    true_levels = root / "true_levels.jsonl"
    rows = read_records(root / "levels.jsonl")
    atomic_write_text(true_levels, "".join(json.dumps({"image": r["image"], **r["levels"]}) + "\n" for r in rows))
    fits: dict[str, Any] = {}
    refused = None  # the fit's reason when the scorer's dimension scores order no pair (nothing usable to write)
    for name, scores in (("true_levels", true_levels), ("scorer", out / "sft" / "scores.jsonl")):
        target = out / "fusion" / ("fusion_weights.json" if name == "scorer" else "true_levels_weights.json")
        # bootstrap intervals for the scorer's weights (its chart); the true levels' fit needs none
        overrides = [f"pairs={root / 'pairs.jsonl'}", f"scores={scores}", f"out={target}"]
        overrides.append("bootstrap=100" if name == "scorer" else "bootstrap=0")
        # overwrite: only an interrupted demo leaves a weights file without its section (moved aside)
        try:
            fits[name] = run_fit(
                parse(FusionSettings, compose("fit", [*overrides, "overwrite=true"], schema=FusionSettings))
            )
        except UserError as err:
            if name != "scorer":
                raise
            refused = str(err)
    dims = list(fits["true_levels"].dimensions)
    generating = np.array([meta["weights"][d] for d in dims])
    fitted = {
        k: np.array([dict(zip(f.dimensions, f.weights, strict=True)).get(d, 0.0) for d in dims])
        for k, f in fits.items()
    }
    cos = {k: float(v @ generating / (np.linalg.norm(v) * np.linalg.norm(generating))) for k, v in fitted.items()}
    corr = {k: float(np.corrcoef(generating, v)[0, 1]) for k, v in fitted.items()}
    acc = {k: f.meta.get("heldout_accuracy") for k, f in fits.items()}
    g, t, truth_fit = _unit(generating), _unit(fitted["true_levels"]), fitted["true_levels"]
    sc = _unit(fitted["scorer"]) if "scorer" in fits else np.full(len(dims), np.nan)
    table = "\n".join(f"| {d} | {g[i]:.3f} | {t[i]:.3f} | {sc[i]:.3f} |" for i, d in enumerate(dims))
    bt = meta["bradley_terry_weights"]
    raw = ", ".join(f"{d} {truth_fit[i]:.2f} vs {bt[d]:.2f}" for i, d in enumerate(dims))
    n_pairs = fits["true_levels"].meta.get("n_pairs")
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
        f"Cosine with the generating weights: {cos['true_levels']:.3f} (true levels), {_fmt(cos.get('scorer'))} "
        f"(scorer); Pearson correlation over the four weights: {corr['true_levels']:.3f}, "
        f"{_fmt(corr.get('scorer'))}. "
        f"Held-out pair accuracy: {_fmt(acc['true_levels'])} (true levels), {_fmt(acc.get('scorer'))} (scorer). "
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
    weights = {"generating": g.tolist(), "true_levels": t.tolist(), "scorer": None if refused else sc.tolist()}
    data = {"cosine": cos, "correlation": corr, "heldout_accuracy": acc, "summary": summary, "refused": refused}
    return text, {**data, "weights": {**weights, "dimensions": dims}}


def judge_by_truth(rows: list[dict[str, Any]], level_jitter: float, by_prompt: bool = False) -> dict[str, Any]:
    """Best-of-N rows (``scores.jsonl``) judged by each ``procedural`` candidate's true utility (the benchmark's
    preference, default weights) at the levels it was painted at (known from its prompt and seed)."""
    from scipy.stats import binomtest

    from rl.generators import candidate_levels
    from training.procedural.synthetic import preference

    rows = [r for r in rows if "chosen" in r]
    utility = [
        [preference(candidate_levels(r["prompt"], c["seed"], level_jitter, by_prompt)[1]) for c in r["candidates"]]
        for r in rows
    ]
    chosen = np.array([u[r["chosen"]] for u, r in zip(utility, rows, strict=True)])
    rand = np.array([u[r["random"]] for u, r in zip(utility, rows, strict=True)])
    gain = chosen - rand
    wins, losses = int((gain > 1e-9).sum()), int((gain < -1e-9).sum())

    def mean(values: Any) -> float | None:
        return float(np.mean(values)) if len(values) else None

    return {
        "tasks": len(rows),
        "wins": wins,
        "ties": len(rows) - wins - losses,
        "losses": losses,
        "p_value": binomtest(wins, wins + losses, 0.5).pvalue if wins + losses else None,  # two-sided sign test
        "mean_chosen": mean(chosen),
        "mean_random": mean(rand),
        "mean_best": mean([max(u) for u in utility]),
    }


def _best_of_n(out: Path, cfg: DictConfig, tasks: Path, name: str, reward: list[str]) -> tuple[str, dict[str, Any]]:
    from rl.commands.best_of_n import BestOfNSettings
    from rl.commands.best_of_n import run as run_best_of_n

    # jitter_by_prompt: candidate j of each task moves on its own (else alike in every task: 4 patterns, not 40 tasks)
    overrides = [*reward, "generator.jitter_by_prompt=true", f"data={tasks}", f"out={out / name}", f"n={cfg.bon.n}"]
    overrides += [f"seed={cfg.seed}", "overwrite=true"]  # overwrite: a demo run again moves the earlier one aside
    c = compose("best_of_n", overrides, schema=BestOfNSettings)
    run_best_of_n(parse(BestOfNSettings, c))
    truth = judge_by_truth(
        read_records(out / name / "scores.jsonl"), float(c.generator.level_jitter), bool(c.generator.jitter_by_prompt)
    )
    return "python rl/best_of_n.py " + " ".join(overrides[:-1]), truth


def bon_section(out: Path, cfg: DictConfig, scorer: str | None, fusion: str | None) -> tuple[str, dict[str, Any]]:
    """Best-of-N with the fine-tuned SA-IQA scorer (fused) and with scene-proxy, judged by the true levels."""
    from training.procedural.synthetic import write_inpainting_tasks

    # 80% masks: the candidate's painted room covers most of the image, so its levels are what a reward can see
    tasks = write_inpainting_tasks(out / "rl_tasks", cfg.bon.tasks, size=64, seed=cfg.seed + 2, mask_fraction=0.8)
    pickers: list[tuple[str, str, list[str]]] = []
    if scorer:
        fused = [f"reward.fusion={fusion}"] if fusion else []
        what = "the fine-tuned SA-IQA scorer" + (
            ", fused with the weights of section 3 (its own scores)" if fusion else ""
        )
        pickers.append(("best_of_n", what, ["reward=sa-iqa", f"reward.model={scorer}", *fused]))
        true_fit = Path(fusion).with_name("true_levels_weights.json") if fusion else None
        if true_fit is not None and true_fit.is_file():  # the scorer alone: its dimensions fused the right way
            what = "the same scorer, fused with the weights fitted on the true levels (section 3)"
            reward = ["reward=sa-iqa", f"reward.model={scorer}", f"reward.fusion={true_fit}"]
            pickers.append(("best_of_n_true_weights", what, reward))
    pickers.append(("best_of_n_scene_proxy", "`scene-proxy` (hand-made image statistics)", ["reward=scene-proxy"]))
    lines, commands, data = [], [], {}
    for name, what, reward in pickers:
        command, t = _best_of_n(out, cfg, tasks, name, reward)
        data[name] = t
        lines.append(
            f"| {what} | {t['wins']} / {t['ties']} / {t['losses']} | {_fmt(t['p_value'])} | "
            f"{_fmt(t['mean_chosen'])} | {_fmt(t['mean_random'])} | {_fmt(t['mean_best'])} |"
        )
        commands.append(f"- `{command}`")
    sheets = sorted((out / pickers[0][0]).glob("sheets/*.png"))  # one per task, named after it
    text = (
        f"## 4. Best-of-{cfg.bon.n} reranking of inpainted candidates (`rl/best_of_n.py`)\n\n"
        f"{cfg.bon.tasks} procedural inpainting tasks (80% masks), {cfg.bon.n} candidates each from the `procedural` "
        "generator, which paints the prompt's quality levels, each moved one step up or down at random (drawn "
        "anew for every task and candidate): every "
        "candidate's true levels are known. The judge is that truth: the utility that generated the preference pairs "
        "of section 3 (0.4 layout + 0.3 harmony + 0.2 lighting + 0.1 distortion, on levels 1-5), for the reward's "
        "pick against a random pick of the same task (a tie when both are equally good, e.g. the same candidate). "
        "The p-value is a two-sided sign test of wins against losses. The best possible mean (an oracle's pick) "
        "bounds what any reward can reach here.\n\n"
        "| picked by | wins / ties / losses vs random | p | true utility: chosen | random | best possible |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(lines) + "\n\n" + "\n".join(commands) + "\n\n"
        "What it shows: whether a reward's pick beats chance by the truth the rewards never see; the SA-IQA rows "
        "separate the scorer from its fusion weights. What it does not: "
        "the candidates differ only by one-step level moves on procedural rooms, and the scorer is the tiny VLM of "
        "section 2; neither number is a claim about diffusion models or real scorers.\n\n"
        + "".join(f"![contact sheet]({p.relative_to(out)})\n" for p in sheets[:1])
    )
    short = {"best_of_n": "SA-IQA", "best_of_n_true_weights": "SA-IQA (true weights)"}
    counts = ", ".join(f"{short.get(k, 'scene-proxy')} {t['wins']}/{t['ties']}/{t['losses']}" for k, t in data.items())
    data["summary"] = f"Best-of-{cfg.bon.n} vs a random pick by true levels, wins/ties/losses: {counts}"
    return text, data


def grpo_section(out: Path, cfg: DictConfig) -> tuple[str, dict[str, Any]]:
    """A short GRPO run of the tiny text policy against scene-proxy (full fine-tuning, procedural generator)."""
    from reward.testing import make_tiny_lm
    from rl.commands.grpo import run as run_grpo
    from rl.commands.grpo_settings import GrpoSettings
    from training.procedural.synthetic import write_inpainting_tasks

    tasks = write_inpainting_tasks(out / "grpo_tasks", 40, size=64, seed=cfg.seed + 3, mask_fraction=0.8)
    policy = make_tiny_lm(out / "models" / "tiny-lm", seed=cfg.seed)
    overrides = [
        *("reward=scene-proxy", "generator=procedural", f"policy.path={policy}", f"data={tasks}"),
        *(f"out={out / 'grpo'}", "resume=never", "overwrite=true"),  # a demo run again: the earlier one moved aside
        *(f"trainer.max_steps={cfg.grpo.steps}", "trainer.num_generations=8"),
        *("trainer.per_device_train_batch_size=16", "trainer.gradient_accumulation_steps=1"),
        *("trainer.learning_rate=5e-3", "trainer.beta=0", "trainer.max_completion_length=16"),
        *(f"trainer.save_steps={cfg.grpo.steps}", f"eval.every={max(1, cfg.grpo.steps // 3)}"),
        *("eval_tasks=6", f"seed={cfg.seed}"),
    ]
    r = run_grpo(parse(GrpoSettings, compose("grpo", overrides, schema=GrpoSettings)))
    means = [m for _, m, _ in r["train_curve"]["scene-proxy"]]
    k = max(1, min(10, len(means) // 3))
    first, last = sum(means[:k]) / k, sum(means[-k:]) / k
    t = r["timing"]["shares"]
    text = (
        "## 5. GRPO prompt expansion (`rl/grpo.py`)\n\n"
        f"`accelerate launch rl/grpo.py {' '.join(overrides)}`\n\n"
        f"A tiny random text policy (full fine-tuning) learns which words make the procedural inpainter paint better "
        f"rooms for `scene-proxy` in {cfg.grpo.steps} steps of 2 prompts x 8 completions: mean reward (normalised "
        f"to [0, 1]) of the first {k} steps {first:.3f}, of the last {k} steps {last:.3f}. Step time: "
        f"{100 * t['policy_generation']:.0f}% policy sampling, {100 * t['inpainting']:.0f}% inpainting, "
        f"{100 * t['reward']:.0f}% reward, {100 * t['update_and_rest']:.0f}% the update.\n\n"
        "What it shows: the GRPO loop (policy, generator, reward, update) raising the reward it is trained on. What "
        "it does not: `scene-proxy` is a hand-made image statistic and the reward being optimised, not an "
        "independent judge; a run this short is noisy (docs/grpo.md gives three seeds of 100 steps).\n\n"
        "![reward curve](grpo/reward_curve.png)\n\n![first vs last step](grpo/samples_first_last.png)\n"
    )
    summary = f"GRPO, {cfg.grpo.steps} steps: mean scene-proxy reward {first:.3f} -> {last:.3f}"
    return text, {"first": first, "last": last, "summary": summary}


def _section(sections: list[str], out: Path, index: int, name: str, build: Callable[[], Any]) -> dict[str, Any]:
    """A report section (appended to ``sections``) and its results: read back from ``out/sections/NAME.json`` when an
    earlier run finished it, else built (console output in ``out/logs/NAME.log``) and recorded there."""
    record = out / "sections" / f"{name}.json"
    if record.is_file():
        saved = json.loads(record.read_text())
        logger.info("%d/5 %s: finished by an earlier run of this demo (%s), not redone", index, name, record)
        sections.append(saved["text"])
        return saved["data"]
    log = out / "logs" / f"{name}.log"
    try:
        with _quiet(log):
            text, data = build()
    except BaseException:
        logger.error("%d/5 %s failed; its output: %s", index, name, log)
        raise
    atomic_write_json(record, {"text": text, "data": json_safe(data)})
    logger.info("%d/5 %s (log: %s)", index, data.get("summary", name), log.relative_to(out.parent))
    sections.append(text)
    return data


def run(cfg: DictConfig) -> None:
    s = parse(DemoSettings, cfg, where="")
    cfg = OmegaConf.structured(s)  # every setting with its default, for the sections and the report
    settings = {k: v for k, v in dataclasses.asdict(s).items() if k not in ("out", "overwrite")}
    output = prepare_output(s.out, "demo", settings, resume=True, overwrite=s.overwrite, resume_hint=None)
    out = Path(s.out).resolve()
    if output.resumed:
        logger.info("%s holds this demo run: resuming it (finished sections are read back)", out)
    model = out / "models" / "tiny-qwen2-vl"
    from reward.testing import make_tiny_vlm  # torch: once the settings are checked

    with _quiet(out / "logs" / "models.log"):
        make_tiny_vlm(model, seed=cfg.seed)  # (reused as it is when an earlier run built it)
    sections = ["# perceptual-rewards demo\n", f"Config:\n\n```yaml\n{OmegaConf.to_yaml(cfg)}```\n"]
    _section(sections, out, 1, "qbench", lambda: qbench_section(model, out / "qbench"))
    scorer = fusion = None
    if cfg.sft.enabled:
        scorer = _section(sections, out, 2, "sft", lambda: sft_section(model, out, cfg))["scorer"]
        if cfg.fusion.enabled:
            _section(sections, out, 3, "fusion", lambda: fusion_section(out))
            weights = out / "fusion" / "fusion_weights.json"  # absent when the fit found no usable weights
            fusion = str(weights) if weights.is_file() else None
    if cfg.bon.enabled:
        _section(sections, out, 4, "best_of_n", lambda: bon_section(out, cfg, scorer, fusion))
    if cfg.grpo.enabled:
        _section(sections, out, 5, "grpo", lambda: grpo_section(out, cfg))
    atomic_write_text(out / "report.md", "\n".join(sections))
    logger.info("report: %s", out / "report.md")


if __name__ == "__main__":
    main("demo", run, schema=DemoSettings, doc=__doc__)
