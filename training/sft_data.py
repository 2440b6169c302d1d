"""SFT examples: trl prompt-completion conversations with an ``images`` column, from a ratings manifest (images
decoded lazily by ``datasets``) or streamed fresh (``data.train=synthetic`` / ``distorted-photos``: a fixed small set
is memorised by a small model, fresh images are not, tests/test_sft_learning.py).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from training.sft_labels import LabelRule, rating_examples

logger = logging.getLogger(__name__)


def conversation(question: str, answer: str) -> dict[str, list[dict[str, Any]]]:
    """The prompt (user turn: the image, then the question) and completion (assistant turn) of one example.

    Every content part has both keys (``text`` is ``None`` for the image) so that all rows share one Arrow schema.
    """
    return {
        "prompt": [{"role": "user", "content": [{"type": "image", "text": None}, {"type": "text", "text": question}]}],
        "completion": [{"role": "assistant", "content": [{"type": "text", "text": answer}]}],
    }


def stream_rule(words: Sequence[str], mos_range: tuple[float, float], soft_std: float | None) -> LabelRule:
    """The streams' rule: the MOS's word, or (``soft_std``) one drawn from a Gaussian of that std with mean the MOS."""
    return LabelRule(
        tuple(words), mos_range, None if soft_std is None else "gaussian", 0.5 if soft_std is None else soft_std
    )


def answer(rule: LabelRule, prefix: str, mos: float, rng: np.random.Generator | None = None) -> str:
    """The response: ``prefix``, the rating word of ``mos`` under ``rule`` (soft: drawn from its target), a stop."""
    word = rule.word(mos)
    if rule.soft is not None:
        n = len(rule.words)
        word = rule.words[n - 1 - int((rng or np.random.default_rng()).choice(n, p=rule.target(mos)[::-1]))]
    return f"{prefix} {word}."


def manifest_dataset(
    source: str | Path,
    queries: Mapping[str, Mapping[str, str]],
    words: Sequence[str],
    *,
    mos_range: tuple[float, float] = (1.0, 5.0),
    soft_std: float | None = None,
    row_std: bool = False,
    rule: LabelRule | None = None,
    seed: int = 0,
    augment: float | None = None,
    **given: Any,
) -> tuple[Any, int]:
    """A ``datasets.Dataset`` of :func:`training.sft_labels.rating_examples` of ``rule`` (default: that of
    ``soft_std`` and ``row_std``; ``given``: its other keywords) and the number of bad rows skipped; ``augment`` crops
    and flips anew at each read; a named dataset's description kept as JSON in ``info.description``;
    ``level_target`` (best first), ``level_mos`` and ``level_std`` kept for a loss that reads them (``rule.drawn``
    false)."""
    import datasets

    if rule is None:
        soft = None if soft_std is None else ("gaussian" if row_std else "votes")
        rule = LabelRule(tuple(words), mos_range, soft, soft_std if soft_std is not None else 0.5)
    read = rating_examples(source, queries, rule, seed=seed, **given)
    examples = read.examples
    records: dict[str, list[Any]] = {
        "images": [[ex.image] for ex in examples],
        "prompt": [conversation(ex.question, ex.response)["prompt"] for ex in examples],
        "completion": [conversation(ex.question, ex.response)["completion"] for ex in examples],
        "dimension": [ex.dimension for ex in examples],
        "level_target": [list(ex.target) for ex in examples],
        "level_mos": [ex.mos for ex in examples],
        "level_std": [ex.std for ex in examples],
    }
    info = datasets.DatasetInfo(description=json.dumps(read.info)) if read.info else None
    ds = datasets.Dataset.from_dict(records, info=info)
    ds = ds.cast_column("images", datasets.Sequence(datasets.Image()))
    rule = read.rule or rule
    drawn = rule.soft is not None and rule.drawn
    needed = {"dimension": drawn, "level_target": drawn or not rule.drawn}
    needed |= {"level_mos": not rule.drawn, "level_std": not rule.drawn}
    ds = ds.remove_columns([name for name, keep_it in needed.items() if not keep_it])
    if drawn or augment is not None:  # a new word / crop is drawn each time an example is read
        from training.augment import QualityAugment

        crops = QualityAugment(augment, np.random.default_rng([seed, 1])) if augment is not None else None
        rng = np.random.default_rng(seed) if drawn else None
        ds.set_transform(partial(_on_read, queries, list(rule.words), rng, crops))
    n = len(ds)
    if rule.soft == "deqa":
        logger.info(
            "soft targets: DeQA-Score's label (%s, MOS range %s) for %d examples", rule.density, rule.level_range, n
        )
    elif rule.soft == "gaussian":
        with_std = sum(math.isfinite(ex.std) for ex in examples)
        text = "soft targets: %d of %d examples from a Gaussian of their own std (the others: std %g)"
        logger.info(text, with_std, n, rule.soft_std)
    logger.info("SFT data: %d examples from %s (%d rows skipped)", n, read.source, read.skipped)
    if read.info:
        info = read.info
        logger.info("%s: split %s (%s), scale %s", read.source, info["split"], info["split_rule"], info["scale"])
    return ds, read.skipped


def _on_read(
    queries: Mapping[str, Mapping[str, str]],
    words: Sequence[str],
    rng: np.random.Generator | None,
    augment: Any,
    batch: dict[str, list[Any]],
) -> dict[str, list[Any]]:
    """``datasets`` transform: decode the images (``augment``: a :class:`training.augment.QualityAugment`), and with
    ``rng`` draw each row's rating word from its target (soft targets read with ``drawn``)."""
    import datasets

    feature = datasets.Image()
    images = [[feature.decode_example(im) for im in ims] for ims in batch["images"]]
    if augment is not None:
        images = [[augment(im) for im in ims] for ims in images]
    out = dict(batch) | {"images": images}
    if rng is not None:
        out["completion"] = []
        for dimension, target in zip(batch["dimension"], batch["level_target"], strict=True):
            probs = np.asarray(target, dtype=float)
            word = words[int(rng.choice(len(probs), p=probs / probs.sum()))]
            text = f"{queries[dimension]['response_prefix']} {word}."
            out["completion"].append(conversation("", text)["completion"])
    return out


def synthetic_stream(
    queries: Mapping[str, Mapping[str, str]],
    words: Sequence[str],
    *,
    seed: int = 0,
    size: int = 64,
    mos_range: tuple[float, float] = (1.0, 5.0),
    soft_std: float | None = None,
) -> Any:
    """An endless ``datasets.IterableDataset`` of fresh procedural scenes, one random dimension each.

    (gen_kwargs hold tuples: ``datasets`` would shard a list across workers.)
    """
    import datasets

    return datasets.IterableDataset.from_generator(
        _synthetic_rows,
        gen_kwargs={
            "queries": dict(queries),
            "rule": stream_rule(words, mos_range, soft_std),
            "seed": seed,
            "size": size,
        },
        features=stream_features(),
    )


def _synthetic_rows(queries: dict, rule: LabelRule, seed: int, size: int) -> Iterator[dict[str, Any]]:
    from training.procedural.synthetic import example_at

    dims = list(queries)
    index = 0
    while True:
        ex = example_at(seed, index, size)
        known = [d for d in dims if d in ex.mos]
        if not known:
            raise ValueError(f"data.train=synthetic renders {sorted(ex.mos)}; prompt.dimensions {dims} has none")
        rng = np.random.default_rng([seed, index, 7])  # which dimension, and the soft-target draw
        dim = known[int(rng.integers(len(known)))]
        text = answer(rule, queries[dim]["response_prefix"], ex.mos[dim], rng)
        yield {"images": [ex.image], **conversation(queries[dim]["question"], text)}
        index += 1


def stream_features() -> Any:
    """The ``datasets.Features`` of a streamed SFT example (images, prompt, completion)."""
    import datasets

    message = [
        {
            "role": datasets.Value("string"),
            "content": [{"type": datasets.Value("string"), "text": datasets.Value("string")}],
        }
    ]
    return datasets.Features({"images": datasets.Sequence(datasets.Image()), "prompt": message, "completion": message})


def distorted_photos_stream(
    queries: Mapping[str, Mapping[str, str]],
    words: Sequence[str],
    *,
    photos: str | Path | None = None,
    crop: int = 112,
    side: int | None = None,
    seed: int = 0,
    mos_range: tuple[float, float] = (1.0, 5.0),
    soft_std: float | None = None,
    calibration: str | Path | None = None,
) -> Any:
    """``data.train=distorted-photos``: an endless ``datasets.IterableDataset`` of SFT examples (dimension
    ``quality``) from fresh distorted crops of the training photos (the held-out photos never appear)."""
    import datasets

    from training.procedural.photos import DIMENSION, STREAM_SHARDS, load_calibration, shard_seed, training_photos

    if DIMENSION not in queries:
        raise ValueError(
            f"data.train=distorted-photos trains the dimension {DIMENSION!r}; prompt.dimensions {sorted(queries)} "
            f"lacks it. Set prompt.dimensions=[{DIMENSION}] (with prompt.type=1 or 2, or a definition)."
        )
    if side is not None and side < crop:
        raise ValueError(f"data.photos_side={side} is smaller than data.photos_crop={crop}: a crop must fit")
    table = load_calibration(calibration)  # bad files fail here, before training
    paths = training_photos(photos, crop)
    logger.info(
        "distorted-photos stream: %d training photos, %dx%d crops, %d distortion types",
        len(paths),
        crop,
        crop,
        len(table),
    )
    return datasets.IterableDataset.from_generator(
        _photo_rows,
        gen_kwargs={
            "queries": dict(queries),
            "rule": stream_rule(words, mos_range, soft_std),
            "paths": tuple(map(str, paths)),
            "crop": crop,
            "side": side,
            "seeds": [shard_seed(seed, k) for k in range(STREAM_SHARDS)],  # a list: datasets shards it by worker
            "calibration": table,
        },
        features=stream_features(),
    )


def _photo_rows(
    queries: dict,
    rule: LabelRule,
    paths: tuple[str, ...],
    crop: int,
    side: int | None,
    seeds: list[int],
    calibration: dict,
) -> Iterator[dict[str, Any]]:
    """The rows of the first of ``seeds`` (each stream is endless): one process reads shard 0, the stream of
    ``data.seed``; each DataLoader worker (``trainer.dataloader_num_workers``) gets its own shard, a stream of its
    own (up to :data:`STREAM_SHARDS` workers)."""
    from training.procedural.photos import DIMENSION, PhotoStream

    seed = seeds[0]
    stream = PhotoStream([Path(p) for p in paths], crop, seed, calibration, side)
    for index, ex in enumerate(stream):
        rng = np.random.default_rng([seed, index, 7])  # the soft-target draw
        text = answer(rule, queries[DIMENSION]["response_prefix"], ex.mos, rng)
        yield {"images": [ex.image], **conversation(queries[DIMENSION]["question"], text)}
