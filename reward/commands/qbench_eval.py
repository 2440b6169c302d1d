"""What ``reward/qbench_eval.py`` does, as a function of its config (tests call :func:`run_qbench` directly).

- ``task=a1``: perception questions -> ``metrics.json`` (accuracy overall, by type and concern, singles and pairs),
  ``metrics.md``, ``answers.jsonl`` (chosen letter and its probability per question), ``skipped.jsonl``.
- ``task=a2``: descriptions -> ``descriptions.jsonl``; with ``a2.judge.base_url`` also ``metrics.json`` / ``.md``.
- ``task=a3``: a reward over IQA manifests -> ``leaderboard.json`` / ``.md`` (SRCC/PLCC per dataset, mean).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from reward.core.config import from_mapping, to_plain
from reward.data.files import atomic_write_json, atomic_write_jsonl, atomic_write_text
from reward.eval.evaluation import EvalSettings

logger = logging.getLogger(__name__)

TASKS = ("a1", "a2", "a3")


def _load_model(c: dict[str, Any]) -> Any:
    from reward.vlm import load_vlm

    m = c.get("model") or {}
    if not m.get("path"):
        raise ValueError(f"task={c['task']} needs a VLM: pass model.path=CHECKPOINT_DIR")
    return load_vlm(
        m["path"],
        dtype=m.get("dtype", "auto"),
        device=m.get("device"),
        batch_size=int(c.get("batch_size", 16)),
        adapter=m.get("adapter"),
    )


def _check(c: dict[str, Any]) -> None:
    problems = []
    if c.get("task") not in TASKS:
        problems.append(f"task={c.get('task')!r}: choose one of {', '.join(TASKS)}")
    if not c.get("data"):
        problems.append("no data given: pass data=FILE (a3: data=[A.jsonl,B.jsonl])")
    if not c.get("out"):
        problems.append("no output folder given: pass out=DIR")
    if problems:
        raise ValueError("invalid qbench_eval config:\n  - " + "\n  - ".join(problems))


def run_qbench(cfg: Any) -> dict[str, Any]:
    """Run the configured task; returns its metrics (A2 without a judge: the number of descriptions)."""
    c = to_plain(cfg)
    _check(c)
    return {"a1": run_a1, "a2": run_a2, "a3": run_a3}[c["task"]](c)


def run_a1(c: dict[str, Any]) -> dict[str, Any]:
    from reward.qbench.a1_perception import answer_questions, format_metrics, perception_metrics
    from reward.qbench.a1_questions import load_questions

    a1 = c.get("a1") or {}
    questions, skipped = load_questions(c["data"], skip_bad=bool(c.get("skip_bad", False)))
    vlm = _load_model(c)
    answers = answer_questions(
        vlm,
        questions,
        seed=int(c.get("seed", 0)),
        batch_size=int(c.get("batch_size", 16)),
        system=a1.get("system"),
        shuffle=bool(a1.get("shuffle", True)),
    )
    metrics = perception_metrics(answers)
    metrics["skipped"] = len(skipped)
    out = Path(c["out"])
    atomic_write_jsonl(out / "answers.jsonl", [a.record() for a in answers])
    if skipped:
        atomic_write_jsonl(out / "skipped.jsonl", [vars(s) for s in skipped])
    table = format_metrics(metrics, title=f"A1 perception: {c['data']}")
    atomic_write_text(out / "metrics.md", table)
    atomic_write_json(out / "metrics.json", metrics)
    logger.info("%d questions (%d skipped)\n%s", len(answers), len(skipped), table)
    return metrics


def run_a2(c: dict[str, Any]) -> dict[str, Any]:
    from reward.qbench.a2_description import (
        JudgeSettings,
        describe,
        description_metrics,
        format_description_table,
        judge,
        load_descriptions,
    )

    a2 = dict(c.get("a2") or {})
    js = from_mapping(JudgeSettings, a2.get("judge") or {}, where="a2.judge", ignore=())
    if js.rounds < 1:
        raise ValueError(f"a2.judge.rounds={js.rounds}: at least one round is needed")
    rows, skipped = load_descriptions(c["data"], skip_bad=bool(c.get("skip_bad", False)))
    vlm = _load_model(c)
    outputs = describe(
        vlm,
        rows,
        max_new_tokens=int(a2.get("max_new_tokens", 256)),
        system=a2.get("system"),
        batch_size=int(c.get("batch_size", 16)),
    )
    out = Path(c["out"])
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
        return {"descriptions": len(records), "skipped": len(skipped), "scored": False}
    per_row = judge(outputs, rows, js)
    for rec, s in zip(records, per_row, strict=True):
        rec.update(s)
    atomic_write_jsonl(out / "descriptions.jsonl", records)
    metrics: dict[str, Any] = {**description_metrics(per_row, rows), "skipped": len(skipped), "scored": True}
    table = format_description_table({k: v for k, v in metrics.items() if isinstance(v, dict)})
    atomic_write_text(out / "metrics.md", table)
    atomic_write_json(out / "metrics.json", metrics)
    logger.info("A2 with judge %s (%d rounds)\n%s", js.model, js.rounds, table)
    return metrics


def run_a3(c: dict[str, Any]) -> dict[str, Any]:
    from reward.qbench.a3_leaderboard import SynonymTable, dataset_names, format_leaderboard, leaderboard
    from reward.rewards.registry import get_reward

    a3 = c.get("a3") or {}
    reward_cfg = dict(c.get("reward") or {})
    name = reward_cfg.pop("name", None) or "qbench"
    if name == "qbench" and not reward_cfg.get("model"):
        reward_cfg["model"] = (c.get("model") or {}).get("path")
        if not reward_cfg["model"]:
            raise ValueError("task=a3 with reward=qbench needs a VLM: pass model.path=CHECKPOINT_DIR")
    datasets = dataset_names(c["data"])
    reward = get_reward(name, reward_cfg)
    if a3.get("ensemble"):
        if name != "qbench":
            raise ValueError(f"a3.ensemble=true reads the good/poor synonyms of reward=qbench, not reward={name}")
        qc = reward.cfg
        reward = SynonymTable(reward.vlm, qc.prompt, qc.response_prefix, system=qc.system, temperature=qc.temperature)
    settings = EvalSettings(batch_size=int(c.get("batch_size", 16)), skip_bad=bool(c.get("skip_bad", False)))
    result = leaderboard(reward, datasets, settings)
    out = Path(c["out"])
    table = format_leaderboard(result, title=f"A3 assessment: reward {name} (SRCC/PLCC)")
    atomic_write_text(out / "leaderboard.md", table)
    atomic_write_json(out / "leaderboard.json", _json_safe(result))
    logger.info("\n%s", table)
    return result


def _json_safe(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    return None if isinstance(v, float) and v != v else v
