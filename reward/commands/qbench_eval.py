"""What ``perceptual-rewards qbench-eval`` does: the Q-Bench+ harness, one task per run.

- ``task=a1``: perception questions -> ``metrics.json`` (accuracy overall, by type and concern, singles and pairs),
  ``metrics.md``, ``answers.jsonl`` (chosen letter and its probability per question), ``skipped.jsonl``.
- ``task=a2``: descriptions -> ``descriptions.jsonl``; with ``a2.judge.base_url`` also ``metrics.json`` / ``.md``.
- ``task=a3``: a reward over IQA manifests -> ``leaderboard.json`` / ``.md`` (SRCC/PLCC per dataset, mean), with
  ``a3.released=DIR`` Q-Bench's released outputs as rows of the same table (no model needed); ``reward=qbench`` also
  writes its per-image outputs as Q-Bench released them, ``IQA_outputs/NAME/DATASET.json``.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import MISSING

from reward.core.config import BATCH, TOKENS
from reward.core.errors import UserError
from reward.core.outputs import Output, check_output, path_inputs
from reward.core.summary import log_summary
from reward.data.files import atomic_write_json, atomic_write_jsonl, atomic_write_text, json_safe
from reward.data.manifest import allow_absolute_paths_field, image_paths, image_root_field
from reward.eval.evaluation import EvalSettings
from reward.qbench import a1_perception, a1_questions, a2_description, a3_released
from reward.rewards.registry import get_reward, reward_config
from reward.vlm import load_vlm
from reward.vlm.hub import check_models
from reward.vlm.loading import ModelLoading, loading_of

logger = logging.getLogger(__name__)

TASKS = ("a1", "a2", "a3")


@dataclass
class HarnessModel(ModelLoading):
    """The VLM of A1 and A2 (and of reward=qbench in A3 unless reward.model is set); loading knobs from
    :class:`reward.vlm.ModelLoading`."""

    path: str | None = field(default=None, metadata={"help": "checkpoint directory"})
    adapter: str | None = field(
        default=None, metadata={"help": "a LoRA adapter directory trained on path, merged into the weights (in fp32)"}
    )
    merge_adapter: bool = field(
        default=True, metadata={"help": "false: keep the adapter unmerged (exactly the training computation, slower)"}
    )


@dataclass
class A1Settings:
    mode: str = field(
        default="logprob",
        metadata={
            "help": "logprob: the letters' log-probs (one pass) | generate: lmms-eval's greedy reply, parsed",
            "choices": a1_perception.MODES,
        },
    )
    prompt: str = field(
        default="paper",
        metadata={
            "help": "paper: Q-Bench+'s layout (\"The first image: <image>\" ...) + lmms-eval's answer instruction"
            " | paper-exact: the layout alone, as the paper prints it | lmms: lmms-eval's own prompt",
            "choices": a1_perception.LAYOUTS,
        },
    )
    max_new_tokens: int = field(
        default=32, metadata={"help": "generate: reply length (lmms-eval's 32)", "range": TOKENS}
    )
    shuffle: bool = field(
        default=True,
        metadata={"help": "shuffle the candidates (with seed); false: the file's order (as lmms-eval asks)"},
    )
    system: str | None = field(default=None, metadata={"help": "optional system prompt"})


@dataclass
class A2Settings:
    max_new_tokens: int = field(default=256, metadata={"help": "description length", "range": TOKENS})
    system: str | None = None
    judge: a2_description.A2JudgeSettings = field(
        default_factory=a2_description.A2JudgeSettings, metadata={"help": "base_url null: descriptions only"}
    )


@dataclass
class A3Settings:
    ensemble: bool = field(
        default=False,
        metadata={"help": "reward=qbench only: all six Table VIII synonym variants from one forward pass"},
    )
    temperature: float = field(
        default=100.0,
        metadata={
            "help": "reward=qbench's softmax temperature: 100 as Q-Bench's released notebook (its published "
            "table); 1: eq. 1 literally",
            "range": (0, None, True),
        },
    )
    released: str | None = field(
        default=None,
        metadata={"help": "Q-Bench's leaderboards/IQA_outputs folder: each MODEL/DATASET.json becomes a row"},
    )
    name: str | None = field(
        default=None,
        metadata={"help": "the scored model's row and IQA_outputs folder name (default: the model folder's name)"},
    )


@dataclass
class QbenchEvalSettings:
    groups: ClassVar[dict] = {"reward": reward_config}

    task: str = field(default="a1", metadata={"help": "a1 | a2 | a3", "choices": TASKS})
    data: Any = field(
        default=None,
        metadata={
            "help": "a1: LLVisionQA JSON/JSONL; a2: golden descriptions; a3: [A.jsonl,B.jsonl] or {name: path} "
            "(none: a3.released)"
        },
    )
    out: str = field(default=MISSING, metadata={"help": "output folder"})
    seed: int = field(default=0, metadata={"help": "a1: the candidates' shuffle"})
    skip_bad: bool = field(default=False, metadata={"help": "true: skip (and count) bad rows instead of failing"})
    image_root: str | None = image_root_field()
    allow_absolute_paths: bool = allow_absolute_paths_field()
    batch_size: int = field(default=16, metadata={"help": "questions / images per forward pass", "range": BATCH})
    model: HarnessModel = field(default_factory=HarnessModel)
    a1: A1Settings = field(default_factory=A1Settings)
    a2: A2Settings = field(default_factory=A2Settings)
    a3: A3Settings = field(default_factory=A3Settings)
    reward: Any = field(default=None, metadata={"help": "a3: reward=NAME (default qbench on model.path)"})
    overwrite: bool = field(
        default=False, metadata={"help": "true: an out/ holding another run is moved aside to out.old-<time>"}
    )

    def problems(self) -> list[str]:
        found = []
        if self.data is None and not (self.task == "a3" and self.a3.released):
            found.append(f"task={self.task} needs data=FILE (task=a3: data=[...] and/or a3.released=DIR)")
        name = dict(self.reward or {}).get("name") or "qbench"
        if self.task == "a3" and self.a3.ensemble and name != "qbench":
            found.append(f"a3.ensemble=true reads the good/poor synonyms of reward=qbench, not reward={name}")
        return found


def _load_model(settings: QbenchEvalSettings, output: Output | None = None) -> Any:
    """The harness VLM, its files checked first, loaded once the output folder is made."""
    if not settings.model.path:
        raise UserError(f"task={settings.task} needs a VLM: pass model.path=CHECKPOINT_DIR")
    check_models({"model.path": settings.model.path, "model.adapter": settings.model.adapter})
    if output is not None:
        output.create()
    model = settings.model
    kwargs = {"adapter": model.adapter, "merge_adapter": model.merge_adapter}
    return load_vlm(model.path, loading_of(model), batch_size=settings.batch_size, **kwargs)


def run(settings: QbenchEvalSettings) -> dict[str, Any]:
    """Run the configured task; returns its metrics (A2 without a judge: the number of descriptions)."""
    if settings.task == "a3":  # a1 / a2 read their question file first (its problems are named before the model's)
        check_models({"model.path": settings.model.path, "model.adapter": settings.model.adapter})
    record = {k: v for k, v in dataclasses.asdict(settings).items() if k not in ("out", "overwrite")}
    named = {"data": settings.data, "reward": settings.reward or {}, "a3_released": settings.a3.released}
    inputs = {"model": settings.model.path, **path_inputs(named)}
    output = check_output(settings.out, "qbench_eval", record, inputs, overwrite=settings.overwrite, resume_hint=None)
    reading = {"skip_bad": settings.skip_bad, **image_paths(settings)}  # how the data files are read
    result = {"a1": run_a1, "a2": run_a2, "a3": run_a3}[settings.task](settings, output, reading)
    output.finish()
    return result


def _write(out: Path, title: str, metrics: dict[str, Any], table: str, facts: dict[str, Any], **files: Path) -> None:
    """``metrics.json`` and ``metrics.md`` beside ``files``, and the closing summary."""
    atomic_write_text(out / "metrics.md", table)
    atomic_write_json(out / "metrics.json", metrics)
    log_summary(title, facts, {**files, "metrics": out / "metrics.json", "table": out / "metrics.md"})


def run_a1(settings: QbenchEvalSettings, output: Output, reading: dict[str, Any]) -> dict[str, Any]:
    """A1: the questions are read (and refused) before the output folder is made and the model loads."""
    a1, model, out = settings.a1, settings.model, Path(settings.out)
    questions, skipped = a1_questions.load_questions(settings.data, **reading)
    vlm = _load_model(settings, output)
    asked = {"system": a1.system, "shuffle": a1.shuffle, "mode": a1.mode, "max_new_tokens": a1.max_new_tokens}
    asked |= {"seed": settings.seed, "batch_size": settings.batch_size, "layout": a1.prompt}
    answers = a1_perception.answer_questions(vlm, questions, **asked)
    metrics = a1_perception.perception_metrics(answers) | {"skipped": len(skipped), "run": output.provenance()}
    generate = a1.mode == "generate"
    metrics["protocol"] = {  # how the numbers were made: compare only with tables made the same way
        **{k: getattr(a1, k) for k in ("mode", "prompt", "shuffle")},
        "seed": settings.seed,
        "max_new_tokens": a1.max_new_tokens if generate else None,
        "parser": "lmms-eval (an unparseable reply counts as wrong)" if generate else None,
        "system": a1.system,
        "model": model.path,
        "adapter": model.adapter,
        "adapter_merged": model.merge_adapter if model.adapter else None,
        **{k: getattr(model, k) for k in ("dtype", "min_pixels", "max_pixels")},
    }
    atomic_write_jsonl(out / "answers.jsonl", [a.record() for a in answers])
    if skipped:
        atomic_write_jsonl(out / "skipped.jsonl", [vars(row) for row in skipped])
    title = f"A1 perception ({a1.mode}, {a1.prompt} prompt): {settings.data}"
    table = a1_perception.format_metrics(metrics, title=title)
    logger.info("%d questions (%d skipped)\n%s", len(answers), len(skipped), table)
    facts = {"questions": len(answers), "skipped": len(skipped), "accuracy": metrics["accuracy"]}
    _write(out, "qbench_eval a1", metrics, table, facts, answers=out / "answers.jsonl")
    return metrics


def run_a2(settings: QbenchEvalSettings, output: Output, reading: dict[str, Any]) -> dict[str, Any]:
    """A2: the descriptions are read (and refused) before the output folder is made and the model loads."""
    a2, js, out = settings.a2, settings.a2.judge, Path(settings.out)
    rows, skipped = a2_description.load_descriptions(settings.data, **reading)
    vlm = _load_model(settings, output)
    asked = {"max_new_tokens": a2.max_new_tokens, "system": a2.system, "batch_size": settings.batch_size}
    texts = a2_description.describe(vlm, rows, **asked)
    per_row = a2_description.judge(texts, rows, js) if js.base_url else [{} for _ in rows]
    records = [
        {"row": i, "line": r.line, "img_path": [str(p) for p in r.images], "description": o, "golden": r.golden} | s
        for i, (r, o, s) in enumerate(zip(rows, texts, per_row, strict=True))
    ]
    atomic_write_jsonl(out / "descriptions.jsonl", records)
    if not js.base_url:
        logger.warning(
            "no judge configured (a2.judge.base_url is null): wrote %d descriptions to %s and skipped the scoring; "
            "set a2.judge.base_url=URL a2.judge.model=NAME to score them",
            len(records),
            out / "descriptions.jsonl",
        )
        log_summary(
            "qbench_eval a2",
            {"descriptions": len(records), "scored": "no"},
            {"descriptions": out / "descriptions.jsonl"},
        )
        return {"descriptions": len(records), "skipped": len(skipped), "scored": False}
    parts = a2_description.description_metrics(per_row, rows)
    metrics: dict[str, Any] = {**parts, "skipped": len(skipped), "scored": True, "run": output.provenance()}
    table = a2_description.format_description_table(parts)
    logger.info("A2 with judge %s (%d rounds)\n%s", js.model, js.rounds, table)
    facts = {"descriptions": len(records), "judge": js.model}
    _write(out, "qbench_eval a2", metrics, table, facts, descriptions=out / "descriptions.jsonl")
    return metrics


def run_a3(settings: QbenchEvalSettings, output: Output, reading: dict[str, Any]) -> dict[str, Any]:
    """A3: the datasets' names and folders (and the released files) are checked before the output folder is made and
    the reward loads."""
    from reward.qbench import a3_leaderboard  # torch and SciPy: once the settings are checked

    a3, out = settings.a3, Path(settings.out)
    released = a3_released.read_released(a3.released) if a3.released else {}
    reward_cfg = dict(settings.reward or {})
    name = reward_cfg.pop("name", None) or "qbench"
    if settings.data is not None and name == "qbench" and not reward_cfg.get("model"):
        if not settings.model.path:
            raise UserError("task=a3 with reward=qbench needs a VLM: pass model.path=CHECKPOINT_DIR")
        reward_cfg.update(vars(loading_of(settings.model)), model=settings.model.path)  # the harness model, its knobs
    datasets = a3_leaderboard.dataset_names(settings.data) if settings.data is not None else {}
    output.create()
    result, record, label = None, None, a3.name or Path(str(reward_cfg.get("model") or name)).name
    if datasets:
        reward = get_reward(name, reward_cfg | ({"temperature": a3.temperature} if name == "qbench" else {}))
        record = getattr(reward, "record", None)  # e.g. sa-iqa's fusion: mean | bradley-terry
        if a3.ensemble:
            reward = a3_leaderboard.SynonymTable(reward)
        elif name == "qbench" and tuple(reward.cfg.positive) + tuple(reward.cfg.negative) == ("good", "poor"):
            reward = a3_leaderboard.GoodPoorLogits(reward, a3.temperature)
        result = a3_leaderboard.leaderboard(reward, datasets, EvalSettings(batch_size=settings.batch_size, **reading))
        for dataset, objs in result.pop("per_image", {}).items():  # shared the way Q-Bench shared its own
            a3_released.write_released(out / "IQA_outputs" / label / f"{dataset}.json", objs)
        if released:  # the scored model's rows are named by the model beside the released ones
            for table in (*result["datasets"].values(), result["mean"]):
                for v in list(table):
                    table[label if v == "score" else f"{label}:{v}"] = table.pop(v)
    if released:
        result = a3_leaderboard.add_released(result, released, a3.temperature)
    result["protocol"] = {  # how the numbers were made: compare only with tables made the same way
        "temperature": a3.temperature,
        "score": "exp(g/T) / (exp(g/T) + exp(p/T)) of the good/poor logits (Q-Bench's released notebook; T=1: eq. 1)",
        "subsets": a3_released.RELEASED_SUBSETS,  # datasets whose cell averages blocks of this many images
        "released": a3.released,
        "released_words": a3_released.RELEASED_WORDS if released else None,
        "reward": record,
    }
    result["run"] = output.provenance()
    title = f"A3 assessment: reward {name} (SRCC/PLCC, T={a3.temperature:g})" if datasets else "A3 assessment"
    table = a3_leaderboard.format_leaderboard(result, title=title + (f", released {a3.released}" if released else ""))
    atomic_write_text(out / "leaderboard.md", table)
    atomic_write_json(out / "leaderboard.json", json_safe(result))
    logger.info("\n%s", table)
    files = {"leaderboard": out / "leaderboard.json", "table": out / "leaderboard.md"}
    log_summary("qbench_eval a3", {"reward": name, "datasets": len(datasets)}, files)
    return result
