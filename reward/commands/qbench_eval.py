"""What ``reward/qbench_eval.py`` does: the Q-Bench+ harness, one task per run.

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

from reward.core.config import BATCH, TOKENS, parse
from reward.core.errors import ConfigError
from reward.core.outputs import Output, check_output, path_inputs
from reward.core.summary import log_summary
from reward.data.files import atomic_write_json, atomic_write_jsonl, atomic_write_text, json_safe
from reward.data.manifest import allow_absolute_paths_field, image_paths, image_root_field
from reward.eval.evaluation import EvalSettings
from reward.qbench.a2_description import A2JudgeSettings
from reward.rewards.registry import reward_config
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
        metadata={"help": "logprob: the letters' log-probs (one pass) | generate: lmms-eval's greedy reply, parsed"},
    )
    prompt: str = field(
        default="paper",
        metadata={
            "help": (
                "paper: Q-Bench+'s layout (\"The first image: <image>\" ...) + lmms-eval's answer instruction"
                " | paper-exact: the layout alone, as the paper prints it | lmms: lmms-eval's own prompt"
            )
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
    judge: A2JudgeSettings = field(
        default_factory=A2JudgeSettings, metadata={"help": "base_url null: descriptions only"}
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
            "help": (
                "reward=qbench's softmax temperature: 100 as Q-Bench's released notebook (its published "
                "table); 1: eq. 1 literally"
            ),
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

    task: str = field(default="a1", metadata={"help": "a1 | a2 | a3"})
    data: Any = field(
        default=None,
        metadata={
            "help": (
                "a1: LLVisionQA JSON/JSONL; a2: golden descriptions; a3: [A.jsonl,B.jsonl] or {name: path} "
                "(none: a3.released)"
            )
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


def _check_model(settings: QbenchEvalSettings) -> None:
    check_models({"model.path": settings.model.path, "model.adapter": settings.model.adapter})


def _load_model(settings: QbenchEvalSettings) -> Any:
    from reward.vlm import load_vlm

    if not settings.model.path:
        raise ConfigError(f"task={settings.task} needs a VLM: pass model.path=CHECKPOINT_DIR")
    return load_vlm(
        settings.model.path,
        loading_of(settings.model),
        batch_size=settings.batch_size,
        adapter=settings.model.adapter,
        merge_adapter=settings.model.merge_adapter,
    )


def run(cfg: Any) -> dict[str, Any]:
    """Run the configured task; returns its metrics (A2 without a judge: the number of descriptions)."""
    settings = parse(QbenchEvalSettings, cfg, where="")
    if settings.task not in TASKS:
        raise ConfigError(f"task={settings.task!r}: choose one of {', '.join(TASKS)}")
    if settings.task == "a3":  # a1 / a2 read their question file first (its problems are named before the model's)
        _check_model(settings)
    if settings.data is None and not (settings.task == "a3" and settings.a3.released):
        raise ConfigError(f"task={settings.task} needs data=FILE (task=a3: data=[...] and/or a3.released=DIR)")
    record = {k: v for k, v in dataclasses.asdict(settings).items() if k not in ("out", "overwrite")}
    data = (
        {"data": settings.data}
        if isinstance(settings.data, str)
        else {"data": dict(enumerate(settings.data))}
        if settings.data
        else {}
    )
    released = {"a3_released": settings.a3.released} if settings.a3.released else {}
    inputs = {
        "model": settings.model.path,
        **path_inputs(data),
        **path_inputs({"reward": settings.reward or {}, **released}),
    }
    output = check_output(settings.out, "qbench_eval", record, inputs, overwrite=settings.overwrite, resume_hint=None)
    result = {"a1": run_a1, "a2": run_a2, "a3": run_a3}[settings.task](settings, output)
    output.finish()
    return result


def run_a1(settings: QbenchEvalSettings, output: Output) -> dict[str, Any]:
    """A1: the questions are read (and refused) before the output folder is made and the model loads."""
    from reward.qbench.a1_perception import LAYOUTS, MODES, answer_questions, format_metrics, perception_metrics
    from reward.qbench.a1_questions import load_questions

    a1 = settings.a1
    problems = []
    if a1.mode not in MODES:
        problems.append(f"a1.mode={a1.mode!r}: choose one of {', '.join(MODES)}")
    if a1.prompt not in LAYOUTS:
        problems.append(f"a1.prompt={a1.prompt!r}: choose one of {', '.join(LAYOUTS)}")
    if a1.max_new_tokens < 1:
        problems.append(f"a1.max_new_tokens={a1.max_new_tokens}: at least 1")
    if problems:
        raise ConfigError("invalid a1 settings:\n  - " + "\n  - ".join(problems))
    questions, skipped = load_questions(
        settings.data,
        skip_bad=settings.skip_bad,
        **image_paths(settings),
    )
    _check_model(settings)
    output.create()
    vlm = _load_model(settings)
    answers = answer_questions(
        vlm,
        questions,
        seed=settings.seed,
        batch_size=settings.batch_size,
        system=a1.system,
        shuffle=a1.shuffle,
        mode=a1.mode,
        layout=a1.prompt,
        max_new_tokens=a1.max_new_tokens,
    )
    metrics = perception_metrics(answers)
    metrics["skipped"] = len(skipped)
    metrics["run"] = output.provenance()
    metrics["protocol"] = {  # how the numbers were made: compare only with tables made the same way
        "mode": a1.mode,
        "prompt": a1.prompt,
        "shuffle": a1.shuffle,
        "seed": settings.seed,
        "max_new_tokens": a1.max_new_tokens if a1.mode == "generate" else None,
        "parser": "lmms-eval (an unparseable reply counts as wrong)" if a1.mode == "generate" else None,
        "system": a1.system,
        "model": settings.model.path,
        "adapter": settings.model.adapter,
        "adapter_merged": settings.model.merge_adapter if settings.model.adapter else None,
        "dtype": settings.model.dtype,
        "min_pixels": settings.model.min_pixels,
        "max_pixels": settings.model.max_pixels,
    }
    out = Path(settings.out)
    atomic_write_jsonl(out / "answers.jsonl", [a.record() for a in answers])
    if skipped:
        atomic_write_jsonl(out / "skipped.jsonl", [vars(row) for row in skipped])
    table = format_metrics(metrics, title=f"A1 perception ({a1.mode}, {a1.prompt} prompt): {settings.data}")
    atomic_write_text(out / "metrics.md", table)
    atomic_write_json(out / "metrics.json", metrics)
    logger.info("%d questions (%d skipped)\n%s", len(answers), len(skipped), table)
    files = {"answers": out / "answers.jsonl", "metrics": out / "metrics.json", "table": out / "metrics.md"}
    log_summary(
        "qbench_eval a1", {"questions": len(answers), "skipped": len(skipped), "accuracy": metrics["accuracy"]}, files
    )
    return metrics


def run_a2(settings: QbenchEvalSettings, output: Output) -> dict[str, Any]:
    """A2: the descriptions are read (and refused) before the output folder is made and the model loads."""
    from reward.qbench.a2_description import (
        describe,
        description_metrics,
        format_description_table,
        judge,
        load_descriptions,
    )

    js = settings.a2.judge
    if js.rounds < 1:
        raise ConfigError(f"a2.judge.rounds={js.rounds}: at least one round is needed")
    rows, skipped = load_descriptions(
        settings.data,
        skip_bad=settings.skip_bad,
        **image_paths(settings),
    )
    _check_model(settings)
    output.create()
    vlm = _load_model(settings)
    outputs = describe(
        vlm, rows, max_new_tokens=settings.a2.max_new_tokens, system=settings.a2.system, batch_size=settings.batch_size
    )
    out = Path(settings.out)
    records = [
        {"row": i, "line": r.line, "img_path": [str(p) for p in r.images], "description": o, "golden": r.golden}
        for i, (r, o) in enumerate(zip(rows, outputs, strict=True))
    ]
    if not js.base_url:
        atomic_write_jsonl(out / "descriptions.jsonl", records)
        logger.warning(
            "no judge configured (a2.judge.base_url is null): wrote %d descriptions to %s and skipped "
            "the scoring; set a2.judge.base_url=URL a2.judge.model=NAME to score them",
            len(records),
            out / "descriptions.jsonl",
        )
        log_summary(
            "qbench_eval a2",
            {"descriptions": len(records), "scored": "no"},
            {"descriptions": out / "descriptions.jsonl"},
        )
        return {"descriptions": len(records), "skipped": len(skipped), "scored": False}
    per_row = judge(outputs, rows, js)
    for rec, scores in zip(records, per_row, strict=True):
        rec.update(scores)
    atomic_write_jsonl(out / "descriptions.jsonl", records)
    parts = description_metrics(per_row, rows)
    metrics: dict[str, Any] = {**parts, "skipped": len(skipped), "scored": True, "run": output.provenance()}
    table = format_description_table(parts)
    atomic_write_text(out / "metrics.md", table)
    atomic_write_json(out / "metrics.json", metrics)
    logger.info("A2 with judge %s (%d rounds)\n%s", js.model, js.rounds, table)
    files = {"descriptions": out / "descriptions.jsonl", "metrics": out / "metrics.json", "table": out / "metrics.md"}
    log_summary("qbench_eval a2", {"descriptions": len(records), "judge": js.model}, files)
    return metrics


def run_a3(settings: QbenchEvalSettings, output: Output) -> dict[str, Any]:
    """A3: the datasets' names and folders (and the released files) are checked before the output folder is made and
    the reward loads."""
    from reward.qbench.a3_leaderboard import (
        GoodPoorLogits,
        SynonymTable,
        add_released,
        dataset_names,
        format_leaderboard,
        leaderboard,
    )
    from reward.qbench.a3_released import RELEASED_SUBSETS, RELEASED_WORDS, read_released, write_released
    from reward.rewards.registry import get_reward

    if not settings.a3.temperature > 0:
        raise ConfigError(
            f"a3.temperature={settings.a3.temperature}: must be > 0 (100: the released notebook; 1: eq. 1)"
        )
    released = read_released(settings.a3.released) if settings.a3.released else {}
    reward_cfg = dict(settings.reward or {})
    name = reward_cfg.pop("name", None) or "qbench"
    if settings.data is not None and name == "qbench" and not reward_cfg.get("model"):
        if not settings.model.path:
            raise ConfigError("task=a3 with reward=qbench needs a VLM: pass model.path=CHECKPOINT_DIR")
        reward_cfg.update(vars(loading_of(settings.model)), model=settings.model.path)  # the harness model, its knobs
    datasets = dataset_names(settings.data) if settings.data is not None else {}
    if settings.a3.ensemble and name != "qbench":
        raise ConfigError(f"a3.ensemble=true reads the good/poor synonyms of reward=qbench, not reward={name}")
    output.create()
    result: dict[str, Any] | None = None
    record = None
    label = settings.a3.name or Path(str(reward_cfg.get("model") or name)).name
    if datasets:
        if name == "qbench":
            reward_cfg["temperature"] = settings.a3.temperature
        reward = get_reward(name, reward_cfg)
        record = getattr(reward, "record", None)  # e.g. sa-iqa's fusion: mean | bradley-terry
        if settings.a3.ensemble:
            reward = SynonymTable(reward)
        elif name == "qbench" and tuple(reward.cfg.positive) + tuple(reward.cfg.negative) == ("good", "poor"):
            reward = GoodPoorLogits(reward, settings.a3.temperature)
        result = leaderboard(
            reward,
            datasets,
            EvalSettings(
                batch_size=settings.batch_size,
                skip_bad=settings.skip_bad,
                **image_paths(settings),
            ),
        )
        for dataset, objs in result.pop("per_image", {}).items():  # shared the way Q-Bench shared its own
            write_released(Path(settings.out) / "IQA_outputs" / label / f"{dataset}.json", objs)
        if released:  # the scored model's rows are named by the model beside the released ones
            for table in (*result["datasets"].values(), result["mean"]):
                for v in list(table):
                    table[label if v == "score" else f"{label}:{v}"] = table.pop(v)
    if released:
        result = add_released(result, released, settings.a3.temperature)
    assert result is not None
    result["protocol"] = {  # how the numbers were made: compare only with tables made the same way
        "temperature": settings.a3.temperature,
        "score": "exp(g/T) / (exp(g/T) + exp(p/T)) of the good/poor logits (Q-Bench's released notebook; T=1: eq. 1)",
        "subsets": RELEASED_SUBSETS,  # datasets whose cell is the mean over consecutive blocks of this many images
        "released": settings.a3.released,
        "released_words": RELEASED_WORDS if released else None,
        "reward": record,
    }
    result["run"] = output.provenance()
    out = Path(settings.out)
    title = f"A3 assessment: reward {name} (SRCC/PLCC, T={settings.a3.temperature:g})" if datasets else "A3 assessment"
    table = format_leaderboard(result, title=title + (f", released {settings.a3.released}" if released else ""))
    atomic_write_text(out / "leaderboard.md", table)
    atomic_write_json(out / "leaderboard.json", json_safe(result))
    logger.info("\n%s", table)
    files = {"leaderboard": out / "leaderboard.json", "table": out / "leaderboard.md"}
    log_summary("qbench_eval a3", {"reward": name, "datasets": len(datasets)}, files)
    return result
