"""``training/sft.py``'s scorer: ``out/scorer`` written (merged, or the LoRA adapter and its base model; from
ZeRO-3's gathered weights), its model card, and its metrics on ``data.test`` (before training too, with
``eval_before``) and its A3 leaderboard over ``data.cross``."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reward.data.files import atomic_write_json
from reward.data.manifest import image_paths
from reward.vlm.loading import ModelLoading, merge_lora
from training.commands.sft_settings import SftSettings
from training.commands.sft_setup import Setup
from training.shared.cards import scorer_card, settings_command
from training.shared.deepspeed import uses_deepspeed, zero3_init_off
from training.shared.trainable import load_for_training, lora_config

if TYPE_CHECKING:
    import torch
    from huggingface_hub import ModelCard

logger = logging.getLogger(__name__)


def save_scorer(setup: Setup, model: Any, state_dict: dict[str, torch.Tensor] | None) -> Path:
    """``out/scorer``: the model (merged, or the LoRA adapter plus ``base_model``), processor and ``sa_iqa.json``.
    ``state_dict``: the full weights gathered from a ZeRO-3 run (whose ``model`` holds placeholders), loaded into a
    fresh CPU copy first."""
    from reward.rewards.scorer_folder import write_metadata

    settings, scorer_dir, meta = setup.settings, setup.out / "scorer", dict(setup.meta)
    scorer_dir.mkdir(parents=True, exist_ok=True)
    if state_dict is not None:
        model = rebuild_from_state(settings, state_dict, setup.args)
    if settings.lora.enabled and settings.merge_lora:  # the loader's merge: W + B A s in fp32, rounded once
        merge_lora(model)
        model = model.unload()
    elif settings.lora.enabled:
        local = Path(settings.model.path)
        meta["base_model"] = str(local.resolve()) if local.exists() else settings.model.path  # a hub id stays an id
    model.save_pretrained(scorer_dir)
    setup.processor.save_pretrained(scorer_dir)  # tokenizer, image processor, chat template
    write_metadata(scorer_dir, meta)  # the scorer folder's format: reward.rewards.scorer_folder
    logger.info("scorer written to %s", scorer_dir)
    return scorer_dir


def rebuild_from_state(settings: SftSettings, state_dict: dict[str, torch.Tensor], args: Any = None) -> Any:
    """A CPU copy of the trained model (with its LoRA adapter when there is one) holding ``state_dict``."""
    import torch

    with zero3_init_off(args):
        model = load_for_training(settings.model.path, torch.float32, ModelLoading(attn_implementation=None))
    if settings.lora.enabled:
        from peft import get_peft_model

        model = get_peft_model(model, lora_config(settings.lora))
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    if unexpected or [k for k in missing if "lora_" in k]:
        raise RuntimeError(
            f"the gathered weights do not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    return model


def sft_card(settings: SftSettings, given: SftSettings, meta: dict[str, Any], result: dict[str, Any]) -> ModelCard:
    """What the scorer's model card says: base model, data and split, dimensions, words, metrics, the command."""
    from dataclasses import asdict

    written = Path(settings.out) / "metrics.json"
    test_info = json.loads(written.read_text()).get("meta", {}).get("data") if written.is_file() else None
    data_info = {k: v for k, v in (("train", result.get("data_train")), ("test", test_info)) if v}
    return scorer_card(
        base_model=settings.model.path,
        dimensions=meta["dimensions"],
        level_words=settings.levels.words,
        level_values=settings.levels.values,
        train_data=settings.data.train,
        test_data=settings.data.test,
        command=settings_command("training/sft.py", "sft", SftSettings, asdict(given)),
        prompt_type=settings.prompt.type,
        adapter=settings.lora.enabled and not settings.merge_lora,
        metrics=result.get("metrics"),
        data_info=data_info,
        steps=result.get("global_step"),
        location=settings.hub_model_id if settings.push_to_hub and settings.hub_model_id else result["scorer"],
    )


def evaluate_before(setup: Setup) -> dict[str, Any]:
    """The untrained model's metrics on ``data.test`` (every process scores: under ZeRO-3 the forward pass takes
    them all; the main process writes ``out/before/``)."""
    from reward.rewards.sa_iqa import SaIqaReward
    from reward.vlm import VLM

    settings, args, model = setup.settings, setup.args, setup.model
    if settings.model.device_map is None and not uses_deepspeed(args):
        model.to(args.device)  # score on the training device, not on the CPU the weights were loaded to
    vlm = VLM(model.eval(), setup.processor, batch_size=settings.eval_batch_size)
    metrics = evaluate(SaIqaReward(vlm, setup.meta), settings, setup.out / "before", write=args.process_index == 0)
    model.train()
    return metrics


def evaluate(reward: Any, settings: SftSettings, out: Path, *, write: bool = True) -> dict[str, Any]:
    """The metrics of ``reward`` on ``data.test``, written to ``out`` (metrics.json, scores, plots) when ``write``."""
    from reward.data import load_ratings
    from reward.eval.evaluation import EvalSettings, evaluate_rows, format_table, write_results
    from training.sft_labels import keep_rows, with_score

    data, mos_range = settings.data, settings.data.mos_scale(settings.data.test)
    eval_settings = EvalSettings(batch_size=settings.eval_batch_size, skip_bad=data.skip_bad, mos_range=mos_range)
    where = {"columns": data.columns, "mos_range": mos_range, **image_paths(settings)}
    read = {"skip_bad": data.skip_bad, "check_images": False, "default_split": "test", "skip_key": "data.skip_bad"}
    rows = load_ratings(data.test, **read, **where)
    tested = with_score(rows.rows, settings.data.score, rows.source)  # the MOS trained on, the rows kept
    keep = {name: (float(b[0]), float(b[1])) for name, b in settings.data.keep.items()}
    tested, kept_out = keep_rows(tested, keep, rows.source)
    result = evaluate_rows(reward, tested, eval_settings, score_range=(1.0, 5.0), source=rows.source)
    if rows.info:  # a dataset by name: its scale, split rule and seed, the file read
        result.meta["data"] = rows.info | {"score": settings.data.score, "kept_out": kept_out}
    if write:
        write_results(out, result, eval_settings, (1.0, 5.0), title="sa-iqa")
    logger.info("SA-IQA on %s\n%s", settings.data.test, format_table(result.metrics))
    return result.metrics


def cross_leaderboard(reward: Any, settings: SftSettings, out: Path) -> dict[str, Any]:
    """Q-Bench's A3 leaderboard of the trained scorer over ``data.cross``: SRCC/PLCC per dataset and their mean."""
    from reward.data.files import atomic_write_text, json_safe
    from reward.eval.evaluation import EvalSettings
    from reward.qbench.a3_leaderboard import dataset_names, format_leaderboard, leaderboard

    paths = {"image_root": settings.image_root, "allow_absolute_paths": settings.allow_absolute_paths}
    board = leaderboard(
        reward, dataset_names(list(settings.data.cross)), EvalSettings(batch_size=settings.eval_batch_size, **paths)
    )
    table = format_leaderboard(board, title="cross-dataset: the trained scorer (SRCC/PLCC)")
    atomic_write_text(out / "leaderboard.md", table)
    atomic_write_json(out / "leaderboard.json", json_safe(board))
    logger.info("\n%s", table)
    return board


def push_scorer(folder: str | Path, repo_id: str, *, message: str) -> str:
    """``push_to_hub=true``: create ``repo_id`` if needed and upload the scorer ``folder`` (model, processor,
    ``sa_iqa.json``, model card; never the run's checkpoints and optimizer states) to it in one commit; returns the
    commit's URL. :meth:`SftSettings.push_problems` checked it with the other settings, before any model loaded."""
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo_id, exist_ok=True)
    commit = api.upload_folder(repo_id=repo_id, folder_path=str(folder), commit_message=message)
    logger.info("pushed %s to %s (%s)", folder, repo_id, commit)
    return str(commit)
