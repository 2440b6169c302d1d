"""``training/grpo_scorer.py``: GRPO on the scorer itself, as Q-Insight (arXiv:2503.22679) and VisualQuality-R1
(arXiv:2505.14460) train theirs: trl's ``GRPOTrainer`` with the VLM as the policy (its processor as the processing
class, the image column), rewarded by :mod:`training.scorer_rewards`.

``run`` reads set-up -> train -> report. The scorer folder it writes (``out/scorer``) is the SFT scorers' format
(:mod:`reward.rewards.scorer_folder`) with a ``reasoning`` entry: ``reward=reasoning-iqa reward.model=out/scorer``
scores with it by sampling or in one forward pass (:mod:`reward.rewards.reasoning_iqa`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from reward.core.config import resume_mode
from reward.core.errors import UserError
from reward.core.outputs import Output, check_output, may_change_keys
from reward.core.summary import log_summary
from reward.data.files import atomic_write_json
from reward.rewards.reasoning_iqa import scorer_meta
from reward.vlm.loading import loading_of
from training.commands.grpo_scorer_data import Rows, mos_range
from training.commands.grpo_scorer_settings import GrpoScorerSettings
from training.shared.deepspeed import uses_deepspeed
from training.shared.launch import require_trained, resume_checkpoint, start_output, trl_config
from training.shared.trainable import (
    freeze_vision,
    load_dtype,
    load_for_training,
    lora_config,
)

logger = logging.getLogger(__name__)


def run(settings: GrpoScorerSettings, callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Plan, or set up, train, report; returns the result (also ``out/grpo_scorer_result.json``)."""
    if settings.plan:
        from training.commands.grpo_scorer_plan import grpo_scorer_plan
        from training.shared.plan import report_plan

        return report_plan(grpo_scorer_plan(settings))
    data = read_data(settings)  # every row checked before the output folder is made and any model loads
    output = check_output(
        settings.out,
        "grpo_scorer",
        {k: v for k, v in asdict(settings).items() if k not in ("out", "plan", "plan_for")},
        {"model": settings.model.path, "data.train": settings.data.train},
        resume=resume_mode(settings.resume),
        overwrite=settings.overwrite,
        may_change=may_change_keys(GrpoScorerSettings),
        resume_hint="resume=auto",
    )
    trainer, train_s = train(settings, data[0], output, callbacks or [])
    result = report(settings, data, output, trainer, train_s)
    trainer.accelerator.end_training()  # the process groups destroyed (a launched process ends: cli.main)
    return result


def read_data(settings: GrpoScorerSettings) -> tuple[Rows, Rows | None]:
    """The training rows and the test rows (rated on the training rows' dimension), read and checked now."""
    train = Rows(settings.data, settings.prompt, settings.seed, "train")
    test = settings.data.test and Rows(settings.data, settings.prompt, settings.seed, "test", dimension=train.dim)
    return train, test or None


def reward_functions(settings: GrpoScorerSettings) -> list[Any]:
    """trl reward functions of ``settings.rewards``, each reading answers as the prompt's release does; the ranking
    reward over the whole step's images (``ranking_scope=step``) or each process's own (``process``)."""
    from reward.integrations.trl_step import whole_step
    from training.scorer_rewards import degradation_reward, format_reward, ranking_reward, score_reward

    ranking = ranking_reward(settings.prompt)
    made = {
        "score": score_reward(settings.threshold, settings.prompt),
        "format": format_reward(settings.prompt),
        "degradation": degradation_reward,
        "ranking": whole_step(ranking, ("mos", "image_id")) if settings.ranking_scope == "step" else ranking,
    }
    return [made[name] for name in settings.rewards]


def check_step(rows: Rows, config: Any) -> None:
    """Refuse, before any model loads, data with fewer images than one step asks for (trl's sampler would make no
    step of them)."""
    images = config.generation_batch_size // config.num_generations
    if rows.n < images:
        raise UserError(
            f"data.train: {rows.n} rows of {rows.dim!r}, fewer than the {images} images of one step "
            f"({config.generation_batch_size} answers, {config.num_generations} per image, over "
            f"{max(1, config.world_size)} process(es)): add rows, or lower trainer.per_device_train_batch_size"
        )


def check_ranking_share(settings: GrpoScorerSettings, config: Any) -> None:
    """Refuse, before any model loads, a launch whose ranking reward would see no two images to compare: each
    process's share (``ranking_scope=process``: whole groups of at least 2 images) or the whole step's (``step``)."""
    if "ranking" not in settings.rewards:
        return
    group, step = config.num_generations, config.generation_batch_size
    processes = max(1, config.world_size)
    share = step // processes
    fix = (
        f"set trainer.per_device_train_batch_size to a multiple of {group} of at least {2 * group} (the release: "
        f"{8 * group}, 8 images of {group} answers)"
    )
    if settings.ranking_scope == "process" and (share % group or share < 2 * group):
        raise UserError(
            f"ranking_scope=process: each of the {processes} process(es) ranks its own {share} answers, "
            f"{share / group:g} image(s) of {group} answers: the ranking reward needs whole groups of 2 images or "
            f"more; {fix}, or ranking_scope=step (every process's images ranked together)"
        )
    if step < 2 * group:
        raise UserError(
            f"the ranking reward compares images, and a step holds {step / group:g} image(s) of {group} answers "
            f"({processes} process(es)); {fix}"
        )


def train(settings: GrpoScorerSettings, rows: Rows, output: Output, callbacks: list[Any]) -> tuple[Any, float]:
    """trl's GRPOTrainer with the VLM as the policy on the training rows."""
    from trl import GRPOConfig, GRPOTrainer

    from reward.vlm import load_processor
    from reward.vlm.hub import check_models

    base = {"report_to": "none", "logging_steps": 1, "seed": settings.seed, "remove_unused_columns": False}
    config = trl_config(GRPOConfig, settings.trainer, out=settings.out, source=None, base=base)
    check_step(rows, config)
    check_ranking_share(settings, config)
    check_models({"model.path": settings.model.path})
    start_output(output, config)
    processor = load_processor(
        settings.model.path, min_pixels=settings.model.min_pixels, max_pixels=settings.model.max_pixels
    )
    lora, deepspeed = settings.lora.enabled, uses_deepspeed(config)
    dtype = load_dtype(settings.model.dtype, lora=lora, bf16=bool(config.bf16), deepspeed=deepspeed)
    model = load_for_training(settings.model.path, dtype, loading_of(settings.model))
    if settings.model.freeze_vision or settings.model.freeze_aligner:
        freeze_vision(model, vision=settings.model.freeze_vision, aligner=settings.model.freeze_aligner)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_functions(settings),
        args=config,
        train_dataset=rows.dataset(),
        processing_class=processor,
        peft_config=lora_config(settings.lora) if settings.lora.enabled else None,
        callbacks=callbacks,
    )
    start = time.perf_counter()
    step = trainer.train(resume_from_checkpoint=resume_checkpoint(output)).global_step
    require_trained(step, "GRPO", settings.trainer)
    return trainer, time.perf_counter() - start


def save_scorer(settings: GrpoScorerSettings, trainer: Any, folder: Path) -> dict[str, Any] | None:
    """The trained policy as a scorer folder (collective: ZeRO-3 gathers the weights; with LoRA, the adapter and its
    ``base_model``), its processor and ``sa_iqa.json`` with ``reasoning`` (main process; the others get ``None``)."""
    from reward.rewards.scorer_folder import write_metadata

    trainer.save_model(str(folder))
    if not trainer.accelerator.is_main_process:
        return None
    trainer.processing_class.save_pretrained(folder)
    record = {"trained_from": settings.model.path, "rewards": settings.rewards}
    record |= {"base_model": settings.model.path} if settings.lora.enabled else {}
    meta = scorer_meta(settings.prompt, mos_range(settings.data, settings.data.train), **record)
    write_metadata(folder, meta)
    return meta


def held_out_srcc(settings: GrpoScorerSettings, scorer: Path, mode: str, rows: Rows | None = None) -> float | None:
    """SRCC of the saved scorer on ``data.test`` (``rows``: read already), loaded as ``reward=reasoning-iqa`` loads
    it."""
    from reward.eval.metrics import srcc
    from reward.rewards.reasoning_iqa import build

    if not settings.data.test:
        return None
    rows = rows or Rows(settings.data, settings.prompt, settings.seed, "test")
    reward = build({"model": str(scorer), "mode": mode, "batch_size": settings.eval_batch_size})
    items = [rows[i] for i in range(rows.n)]
    scores = reward.score([it["image"] for it in items]).scores.numpy()
    ok = np.isfinite(scores)
    return float(srcc(scores[ok], np.array([it["mos"] for it in items])[ok])) if ok.sum() > 2 else None


def reward_spread(history: list[dict[str, Any]]) -> tuple[int, str | None]:
    """How many logged steps had a reward spread within some group (trl's ``frac_reward_zero_std`` < 1), and the
    warning of a run that never had one (every answer of every group rewarded alike: no advantage, nothing learned)."""
    spread = sum(1 for h in history if h.get("frac_reward_zero_std", 1.0) < 1.0)
    if history and not spread:
        return 0, (
            f"no reward spread in any of {len(history)} logged steps: every group's answers earned the same rewards, "
            "so GRPO had no advantage to learn from (answers that never parse? rewards that cannot differ?)"
        )
    return spread, None


def report(
    settings: GrpoScorerSettings, data: tuple[Rows, Rows | None], output: Output, trainer: Any, train_s: float
) -> dict[str, Any]:
    """The scorer folder and its card, the test SRCC, ``grpo_scorer_result.json`` and the closing summary."""
    from training.shared.cards import scorer_card, settings_command, write_card

    out, (rows, test) = Path(settings.out), data
    result: dict[str, Any] = {"global_step": trainer.state.global_step, "train_s": round(train_s, 1)}
    result |= {
        "dimension": rows.dim,
        "train_rows": rows.n,
        "skipped_rows": rows.skipped + (test.skipped if test else 0),
    }
    history = [h for h in trainer.state.log_history if "reward" in h]
    if history:
        result["reward_first"], result["reward_last"] = history[0]["reward"], history[-1]["reward"]
    result["spread_steps"], warning = reward_spread(history)
    if warning:
        logger.warning("%s", warning)
        result["warning"] = warning
    scorer = out / "scorer"
    meta = save_scorer(settings, trainer, scorer)
    if meta is None:
        return result
    result["scorer"], result["test_srcc"] = str(scorer), held_out_srcc(settings, scorer, "expected", test)
    card = scorer_card(
        base_model=settings.model.path,
        dimensions={"quality": ""},
        level_words=meta["level_words"],
        level_values=meta["level_values"],
        train_data=settings.data.train,
        test_data=settings.data.test,
        command=settings_command("training/grpo_scorer.py", "grpo_scorer", GrpoScorerSettings, asdict(settings)),
        prompt_type=settings.prompt,
        metrics={"quality": {"srcc": result["test_srcc"]}} if result["test_srcc"] is not None else None,
        steps=result["global_step"],
        location=str(scorer),
        method=f"trained by GRPO on its own answers ({settings.prompt} prompt; rewards {', '.join(settings.rewards)}; "
        f"the data's {rows.dim!r} ratings)",
        reward_name="reasoning-iqa",
    )
    result["model_card"] = str(write_card(scorer, card))
    result["run"] = output.provenance()
    path = atomic_write_json(out / "grpo_scorer_result.json", result)
    output.finish()
    facts = {"steps": result["global_step"], "dimension": rows.dim, "rows": rows.n, "skipped": result["skipped_rows"]}
    facts |= {"test SRCC": result["test_srcc"], "WARNING": warning}
    log_summary("grpo_scorer", facts, {"scorer": scorer, "model_card": result["model_card"], "result": path})
    return result
