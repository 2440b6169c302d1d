"""``training/sft.py``'s set-up: the inputs checked (the model and the data there, ``prompt.dimensions=null`` read from
data.train), the output folder's decision, the scorer's queries, the training rows, trl's config and the model to
train (:class:`Setup`), each before the next and all before the first step."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from reward.core.config import resume_mode
from reward.core.errors import MissingInputError, UserError
from reward.core.outputs import Output, check_output, may_change_keys
from reward.data.datasets import check_source
from reward.data.manifest import image_paths
from reward.vlm.hub import check_models, missing_model
from reward.vlm.loading import loading_of
from training.commands.sft_settings import SftSettings
from training.prompts import DEFAULT_DIMENSIONS, resolve_definitions, scorer_metadata
from training.sft_labels import label_kwargs
from training.shared.deepspeed import start_deepspeed_comm, uses_deepspeed
from training.shared.launch import SFT_BATCH, resume_checkpoint, start_output, trl_config
from training.shared.trainable import freeze_vision, load_dtype, load_for_training
from training.streams import STREAMS

logger = logging.getLogger(__name__)


def checked_inputs(settings: SftSettings) -> SftSettings:
    """The model and the data there (:func:`check_inputs`: said at once, before any library loads), and
    ``prompt.dimensions=null`` made the dimensions ``data.train`` rates, in order of first appearance: a manifest's or
    dataset's own (read without decoding an image), the synthetic stream's four, the photos' one. ``plan=true``
    checks none: its model and data may not exist yet."""
    if settings.plan:
        return settings
    check_inputs(settings)
    if settings.prompt.dimensions:
        return settings
    data = settings.data
    if data.train in STREAMS:
        from training.procedural.photos import DIMENSION

        found = list(DEFAULT_DIMENSIONS) if data.train == "synthetic" else [DIMENSION]
    else:
        from reward.data import load_ratings

        where = {"columns": data.columns, **image_paths(settings)}
        rows = load_ratings(data.train, skip_bad=True, check_images=False, default_split="train", **where).rows
        found = list(dict.fromkeys(row.dimension for row in rows))
        logger.info("prompt.dimensions: %s, the dimensions data.train rates (%d rows)", found, len(rows))
    if (settings.prompt.questions or settings.prompt.response_prefix) and len(found) != 1:
        raise UserError(
            f"prompt.questions / prompt.response_prefix replace the queries of one dimension, and data.train "
            f"rates {found}: set prompt.dimensions=[NAME]"
        )
    return replace(settings, prompt=replace(settings.prompt, dimensions=found))


def check_inputs(settings: SftSettings) -> None:
    """The model, the training and test data exist: fail now, not after training (a missing data.test would)."""
    sources = [("data.train", settings.data.train), ("data.test", settings.data.test)]
    sources += [(f"data.cross[{i}]", v) for i, v in enumerate(settings.data.cross)]
    sources = sources[:1] if settings.targets_out is not None else sources  # targets_out reads data.train only
    named = {v for _, v in sources if check_source(v)}  # NAME:FOLDER: name, split, folder checked
    model = None if settings.targets_out is not None else missing_model(settings.model.path, "model.path")
    missing = [
        f"{key}={value}: no such file or folder (a ratings manifest or a datasets folder)"
        for key, value in sources
        if value and value not in STREAMS and value not in named and not Path(value).exists()
    ]
    if model or missing:
        raise MissingInputError("\n".join([*([model] if model else []), *missing]))


def check_output_folder(settings: SftSettings) -> Output:
    """The output folder's decision (new, or the same run resumed) or a refusal, before anything is loaded."""
    record = {k: v for k, v in asdict(settings).items() if k not in ("out", "plan", "plan_for", "targets_out")}
    inputs = {"model": settings.model.path, "data.train": settings.data.train}
    flags = {"resume": resume_mode(settings.resume), "overwrite": settings.overwrite, "resume_hint": "resume=auto"}
    return check_output(settings.out, "sft", record, inputs, may_change=may_change_keys(SftSettings), **flags)


@dataclass
class Setup:
    """What :func:`set_up` builds for ``train`` and ``report`` (:mod:`training.commands.sft`)."""

    settings: SftSettings
    out: Path
    output: Output
    meta: dict[str, Any]  # the scorer's sa_iqa.json: dimensions, rendered queries, level words
    processor: Any
    train_dataset: Any
    skipped: int  # bad rows of data.train, skipped and counted
    args: Any  # trl.SFTConfig
    model: Any
    resume_from: str | None  # the checkpoint a resumed run continues from


def set_up(settings: SftSettings) -> Setup:
    """Every check before a model loads (the output folder, each level word one token after every query, the
    training data), then trl's arguments (this launch's processes), the output folder and the model (the one precision
    rule's dtype, vision tower and aligner frozen as set)."""
    from reward.vlm import load_processor, thinking_off

    out = Path(settings.out)
    meta = scorer_meta(settings)
    check_models({"model.path": settings.model.path})  # a folder that holds no model, an uncached Hub id offline
    output = check_output_folder(settings)  # already complete, or refused: said before transformers loads
    processor = load_processor(
        settings.model.path, min_pixels=settings.model.min_pixels, max_pixels=settings.model.max_pixels
    )
    if thinking_off(processor):
        logger.info("chat template: thinking switched off for training (the answer follows the prompt directly)")
    rating_ids(processor.tokenizer, meta, settings)  # each level word one token after every prefix, or fail now
    train_dataset, skipped = training_rows(settings, meta["queries"])
    from trl import SFTConfig

    base = {"report_to": "none", "save_strategy": "steps", "logging_first_step": True}
    base |= {"max_length": None, "remove_unused_columns": False}  # never cut the image tokens; soft targets read mos
    args = trl_config(SFTConfig, settings.trainer, out=out, source=SFT_BATCH, base=base, fixed={"seed": settings.seed})
    start_output(output, args)
    resume_from = resume_checkpoint(output)
    lora, deepspeed = settings.lora.enabled, uses_deepspeed(args)
    if deepspeed:
        start_deepspeed_comm(args)  # on CPU launches too (refusing a stale build lock), before any zero.Init
    dtype = load_dtype(settings.model.dtype, lora=lora, bf16=bool(args.bf16), deepspeed=deepspeed)
    model = load_for_training(settings.model.path, dtype, loading_of(settings.model))
    if settings.model.freeze_vision or settings.model.freeze_aligner:
        freeze_vision(model, vision=settings.model.freeze_vision, aligner=settings.model.freeze_aligner)
    return Setup(settings, out, output, meta, processor, train_dataset, skipped, args, model, resume_from)


def scorer_meta(settings: SftSettings) -> dict[str, Any]:
    """The scorer's ``sa_iqa.json`` metadata: its dimensions, their rendered queries, the level words and values; a
    dimension prompt types 3-4 have no definition of is asked in plain words, said once here."""
    dims = settings.prompt.dimensions or list(DEFAULT_DIMENSIONS)
    definitions = resolve_definitions(dims, settings.prompt.type, settings.prompt.definitions)
    levels = {"level_words": settings.levels.words, "level_values": settings.levels.values}
    prompt = {"prompt_type": settings.prompt.type, "definitions": definitions, "wording": settings.prompt.wording}
    meta = scorer_metadata(dims, **prompt, **levels, trained_from=settings.model.path)
    for query in meta["queries"].values():  # prompt.questions / response_prefix: one dimension (checked)
        if settings.prompt.questions:
            query["question"] = settings.prompt.questions[0]
        if settings.prompt.response_prefix:
            query["response_prefix"] = settings.prompt.response_prefix
    kind, text = (
        settings.prompt.type,
        "prompt.type=%d has no definition of %r: it is asked %r (+prompt.definitions.%s=",
    )
    for dim in meta["generic"]:
        logger.info(text + "'...' gives a type-%d query)", kind, dim, meta["queries"][dim]["question"], dim, kind)
    return meta


def rating_ids(tokenizer: Any, meta: dict[str, Any], settings: SftSettings) -> list[int]:
    """The token ids of the level words after every dimension's response prefix (``loss.rating_weight``)."""
    from reward.vlm.tokens import resolve_candidates

    return [
        i
        for q in meta["queries"].values()
        for i in resolve_candidates(tokenizer, q["response_prefix"], settings.levels.words)
    ]


def training_rows(settings: SftSettings, queries: dict[str, dict[str, str]]) -> tuple[Any, int]:
    from training.sft_data import distorted_photos_stream, manifest_dataset, synthetic_stream

    if settings.data.perception:  # Q-Bench A1 multiple-choice questions mixed with the ratings (perception_sft.py)
        from training.perception_sft import mix_perception

        no_perception = replace(settings, data=replace(settings.data, perception=None))
        return mix_perception(settings, lambda: training_rows(no_perception, queries))
    data, words = settings.data, settings.levels.best_first()
    mos_range = settings.data.mos_scale(data.train)
    soft = data.soft_std if data.soft() else None
    stream = {"seed": settings.seed, "mos_range": mos_range, "soft_std": soft}
    if data.train == "synthetic":
        return synthetic_stream(queries, words, size=data.synthetic_size, **stream), 0
    if data.train == "distorted-photos":
        photos = {"photos": data.photos, "crop": data.photos_crop, "side": data.photos_side}
        return distorted_photos_stream(queries, words, **photos, calibration=data.calibration, **stream), 0
    read = {"skip_bad": data.skip_bad, "max_pixels": data.max_decode_pixels, "split": "train", "columns": data.columns}
    read |= {"seed": settings.seed, "augment": data.augment_crop if data.augment else None, **image_paths(settings)}
    return manifest_dataset(data.train, queries, words, **read, **label_kwargs(settings, mos_range))
