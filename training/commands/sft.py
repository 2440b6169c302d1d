"""What ``training/sft.py`` does: SA-IQA supervised fine-tuning with trl, read straight down as
:func:`run` -> :func:`~training.commands.sft_setup.set_up` -> :func:`train` -> :func:`report`.

Its settings and their checks are :mod:`training.commands.sft_settings` (every problem said before anything loads);
the set-up (inputs, output folder, rows, trl's config, the model) :mod:`training.commands.sft_setup`; what a row trains
on :mod:`training.sft_labels`; the scorer folder, its card and its evaluation :mod:`training.commands.sft_scorer`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reward.core.summary import log_summary
from reward.data.files import atomic_write_json
from training.commands.sft_scorer import (
    cross_leaderboard,
    evaluate,
    evaluate_before,
    push_scorer,
    save_scorer,
    sft_card,
)
from training.commands.sft_settings import SftSettings
from training.commands.sft_setup import Setup, checked_inputs, rating_ids, scorer_meta, set_up
from training.sft_labels import write_training_targets
from training.shared.cards import write_card
from training.shared.checkpoints import load_checkpoint_weights, restored_weights_quiet
from training.shared.deepspeed import gathered_state_dict, uses_deepspeed
from training.shared.launch import require_trained
from training.shared.trainable import lora_config

logger = logging.getLogger(__name__)


def run(settings: SftSettings, callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Plan (``plan=true``), write the training rows (``targets_out``), or set up, train, report; returns paths, final
    step and metrics (also ``out/sft_result.json``)."""
    resolved = checked_inputs(settings)  # the model and data there; prompt.dimensions=null: data.train's own
    if resolved.plan:  # no file needs to exist yet: the plan is made from the settings alone
        from training.commands.sft_plan import sft_plan
        from training.shared.plan import report_plan

        return report_plan(sft_plan(resolved))
    if resolved.targets_out is not None:  # the training rows only: no model, no output folder
        mos_range = resolved.data.mos_scale(resolved.data.train)
        return write_training_targets(resolved, scorer_meta(resolved)["queries"], mos_range)
    setup = set_up(resolved)
    trained = train(setup, callbacks or [])
    result = report(setup, trained, given=settings)
    trained.trainer.accelerator.end_training()  # the process groups destroyed (a launched process ends: cli.main)
    return result


@dataclass
class Trained:
    """What :func:`train` leaves for :func:`report`."""

    trainer: Any
    global_step: int
    train_loss: float
    metrics_before: dict[str, Any] | None  # eval_before: the untrained model's metrics on data.test
    main_process: bool  # the process that writes the run's files
    scorer: Path | None  # out/scorer, written by the main process (None on the others)


def train(setup: Setup, callbacks: list[Any]) -> Trained:
    """The untrained model evaluated first (``eval_before``), then trl's SFTTrainer (the loss of ``loss.kind``) from
    the last complete checkpoint of a resumed run; the scorer saved to ``out/scorer`` by the main process (gathering
    ZeRO-3's weights takes every process)."""

    settings, args, model = setup.settings, setup.args, setup.model
    metrics_before = evaluate_before(setup) if settings.eval_before and settings.data.test else None
    restored = bool(setup.resume_from) and not settings.lora.enabled and not uses_deepspeed(args)
    restored = restored and load_checkpoint_weights(model, setup.resume_from)
    if settings.loss.kind == "deqa":
        from reward.vlm.tokens import resolve_candidates
        from training.deqa_loss import deqa_trainer_class

        words = settings.levels.best_first()  # as the rows' soft targets
        prefix = next(iter(setup.meta["queries"].values()))["response_prefix"]
        ids = resolve_candidates(setup.processor.tokenizer, prefix, words)
        values, loss = sorted(settings.levels.values, reverse=True), settings.loss
        trainer_cls = deqa_trainer_class(
            ids, values, deqa_weight=loss.deqa_weight, fidelity_weight=loss.fidelity_weight
        )
    else:
        from training.rating_loss import weighted_trainer_class

        ids = rating_ids(setup.processor.tokenizer, setup.meta, settings)
        trainer_cls = weighted_trainer_class(settings.loss.rating_weight, ids)
    trainer = trainer_cls(
        model=model,
        args=args,
        train_dataset=setup.train_dataset,
        processing_class=setup.processor,
        peft_config=lora_config(settings.lora) if settings.lora.enabled else None,
        callbacks=callbacks,
    )
    with restored_weights_quiet() if restored else contextlib.nullcontext():  # its key warnings are moot
        train_out = trainer.train(resume_from_checkpoint=setup.resume_from)
    require_trained(train_out.global_step, "SFT", settings.trainer)  # no scorer from no step
    full_state = gathered_state_dict(trainer)  # ZeRO-3: every process takes part in gathering the weights
    main_process, scorer = trainer.is_world_process_zero(), None
    if main_process:
        scorer = save_scorer(setup, trainer.model, full_state)
    return Trained(trainer, train_out.global_step, train_out.training_loss, metrics_before, main_process, scorer)


def report(setup: Setup, trained: Trained, given: SftSettings) -> dict[str, Any]:
    """On the main process: the loss curve, the saved scorer evaluated on ``data.test`` (``out/metrics.json``) and
    ``data.cross`` (``out/cross/``), the model card (its command from ``given``, the settings as :func:`run`
    received them), the upload, ``sft_result.json`` and the closing summary. The other processes write nothing and
    return what they know."""
    settings, out = setup.settings, setup.out
    result: dict[str, Any] = {"skipped_train_rows": setup.skipped, "output_dir": str(out)}
    result["run"] = setup.output.provenance()
    described = getattr(getattr(setup.train_dataset, "info", None), "description", None)
    if described and described.startswith("{"):  # a dataset by name: its scale, split rule and seed
        result["data_train"] = json.loads(described)
    if trained.metrics_before is not None:
        result["metrics_before"] = trained.metrics_before
    result |= {"global_step": trained.global_step, "train_loss": trained.train_loss}
    if not trained.main_process or trained.scorer is None:
        return result
    from training.curves import write_train_curve  # matplotlib: imported when drawn, not when settings are checked

    result["train_curve"] = write_train_curve(trained.trainer.state.log_history, out)["png"]
    result["scorer"] = str(trained.scorer)
    if settings.data.test or settings.data.cross:  # scored through the folder exactly as reward=sa-iqa loads it
        from reward.rewards.sa_iqa import build

        reward = build({"model": str(trained.scorer), "batch_size": settings.eval_batch_size})
        if settings.data.test:
            result["metrics"] = evaluate(reward, settings, out)
        if settings.data.cross:
            result["cross"] = cross_leaderboard(reward, settings, out / "cross")
    card = sft_card(settings, given, setup.meta, result)
    result["model_card"] = str(write_card(trained.scorer, card))
    write_card(out, card)  # in place of trl's template in the output folder
    if settings.push_to_hub and settings.hub_model_id:
        result["pushed"] = push_scorer(trained.scorer, settings.hub_model_id, message=f"SA-IQA scorer: {out.name}")
    path = atomic_write_json(out / "sft_result.json", result)
    setup.output.finish()
    srcc = (result.get("metrics") or {}).get("overall", {}).get("srcc")
    facts = {"steps": result["global_step"], "train loss": result["train_loss"], "test SRCC": srcc}
    files = {k: result.get(k) for k in ("scorer", "model_card", "train_curve")}
    metrics = out / "metrics.json" if settings.data.test else None
    files |= {"metrics": metrics, "result": path, "pushed": result.get("pushed")}
    log_summary("sft", facts, files)
    return result
