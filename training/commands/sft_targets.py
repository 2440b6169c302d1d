"""``training/sft.py``'s label settings: the rule that turns each training row into its rating word and target
(``data.soft_targets``, ``score``, ``level_from``, ``level_range``, ``keep``, ``deqa_density``, ``prompt.questions``),
its checks, and ``targets_out=FILE``, which writes the rows as they will be trained (:mod:`training.sft_labels`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reward.core.errors import UserError
from reward.core.outputs import check_output_file
from reward.core.summary import log_summary
from reward.data.datasets import check_source
from training.sft_labels import LabelRule, rating_examples, soft_mode, words_best_first, write_targets


def label_problems(settings: Any, streams: Sequence[str]) -> list[str]:
    """The label rule (data.score, level_range, keep, deqa_density), the questions and the loss kind, checked
    (``streams``: the names of data.train's endless streams, which have no rows to label)."""
    data, loss, problems = settings.data, settings.loss, []
    if data.level_range is not None and (len(data.level_range) != 2 or not data.level_range[0] < data.level_range[1]):
        problems.append(f"data.level_range={data.level_range}: give [low, high] with low < high, or null")
    for name, bounds in data.keep.items():
        if len(bounds) != 2 or not bounds[0] < bounds[1]:
            problems.append(f"data.keep.{name}={bounds}: give [low, high] with low < high")
    if data.level_from not in (None, "mos") and soft_mode(data.soft_targets) is not None:
        problems.append(f"data.level_from={data.level_from} gives hard targets: leave data.soft_targets=false")
    if data.score != "mos" and soft_mode(data.soft_targets) is not None:
        problems.append(
            f"data.soft_targets={data.soft_targets} reads each row's std or votes, which are on the dataset's own "
            f"scale, not data.score={data.score}'s: use data.score=mos with soft targets"
        )
    custom = [k for k, v in (("data.keep", data.keep), ("data.level_range", data.level_range)) if v]
    custom += ["data.score"] if data.score != "mos" else []
    custom += ["prompt.questions"] if settings.prompt.questions else []
    if data.train in streams and custom:
        problems.append(f"{', '.join(custom)} apply to a ratings manifest or dataset, not data.train={data.train}")
    prompt = settings.prompt
    one = [
        k for k, v in (("prompt.questions", prompt.questions), ("prompt.response_prefix", prompt.response_prefix)) if v
    ]
    if one and prompt.dimensions is not None and len(prompt.dimensions) != 1:  # null: checked on the data's
        problems.append(f"{' and '.join(one)} replace the queries of one dimension: set prompt.dimensions=[NAME]")
    if loss.kind == "deqa":
        if int(settings.trainer.get("per_device_train_batch_size", 8)) < 2:
            problems.append("loss.kind=deqa pairs the examples of a batch: set trainer.per_device_train_batch_size>=2")
        if loss.rating_weight != 1.0:
            problems.append(
                "loss.rating_weight applies to loss.kind=nll; DeQA's weights are deqa_weight and fidelity_weight"
            )
        if data.train in streams or data.perception:
            problems.append(
                "loss.kind=deqa needs rating rows with a std: a ratings manifest or dataset, no perception"
            )
        if settings.trainer.get("remove_unused_columns"):
            problems.append("loss.kind=deqa reads the rows' soft targets: leave trainer.remove_unused_columns=false")
    if settings.targets_out is not None and (data.train in streams or data.perception):
        problems.append(
            "targets_out writes the rating rows of a ratings manifest or dataset (no stream, no perception)"
        )
    return problems


def label_kwargs(settings: Any, mos_range: tuple[float, float]) -> dict[str, Any]:
    """How the training rows are labelled (:class:`training.sft_labels.LabelRule` and what picks the rows)."""
    data = settings.data
    level_range = (float(data.level_range[0]), float(data.level_range[1])) if data.level_range else None
    rule = LabelRule(
        tuple(words_best_first(settings.levels.words, settings.levels.values)),
        mos_range,
        soft_mode(data.soft_targets),
        data.soft_std,
        level_range,
        drawn=settings.loss.kind != "deqa",
    )
    keep = {name: (float(b[0]), float(b[1])) for name, b in data.keep.items()}
    return {
        "rule": rule,
        "questions": list(settings.prompt.questions),
        "keep": keep,
        "score": data.score,
        "level_from": data.level_from,
        "density": data.deqa_density,
    }


def write_training_targets(
    settings: Any, queries: Mapping[str, Mapping[str, str]], mos_range: tuple[float, float]
) -> dict[str, Any]:
    """``targets_out=FILE``: every training row as it will be trained, one JSON line each (the scorer's ``queries``,
    the training source's ``mos_range``); no model loads, no output folder is made."""
    target = _targets_file(settings)
    kwargs = label_kwargs(settings, mos_range)
    kwargs |= {"seed": settings.seed, "skip_bad": settings.data.skip_bad, "columns": settings.data.columns}
    read = rating_examples(
        settings.data.train, queries, kwargs.pop("rule"), check_images=False, split="train", **kwargs
    )
    path = write_targets(target, read, words_best_first(settings.levels.words, settings.levels.values))
    facts = {"rows": len(read.examples), "skipped": read.skipped, "left out (data.keep)": read.kept_out}
    log_summary("sft targets", facts, {"targets": path})
    return {"targets_out": str(path), "rows": len(read.examples), "skipped": read.skipped, "kept_out": read.kept_out}


def _targets_file(settings: Any) -> Path:
    """``targets_out`` checked before anything is written: no input is, holds or contains it (and
    :func:`reward.core.outputs.check_output_file`)."""
    source = check_source(settings.data.train)
    inputs = {"data.train": source.folder if source else settings.data.train, "image_root": settings.image_root}
    inputs = {k: str(v) for k, v in inputs.items() if v}
    real = os.path.realpath(settings.targets_out) if str(settings.targets_out).strip() else ""
    for key, value in inputs.items():
        if real and Path(value).is_dir() and real.startswith(os.path.realpath(value) + os.sep):
            raise UserError(
                f"targets_out={settings.targets_out} lies inside the run's input {key}={value}; write elsewhere: "
                "pass another targets_out="
            )
    return check_output_file(
        settings.targets_out, overwrite=settings.overwrite, companions=(), key="targets_out", inputs=inputs
    )
