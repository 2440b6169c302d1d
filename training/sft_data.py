"""SFT examples for SA-IQA: (image, dimension query) -> "The spatial aesthetic {dimension} ... is {word}."

Examples are trl prompt-completion conversations with an ``images`` column, from a MOS manifest (images
decoded lazily by ``datasets``), or streamed fresh from the procedural benchmark (``data.train=synthetic``) or from
distorted real photos (``data.train=distorted-photos``):
a fixed small set is memorised by a small model, fresh images every step are not (tests/test_sft_learning.py).
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from reward.core.errors import ConfigError
from reward.data import load_ratings
from training.targets import mos_to_word, soft_target, votes_to_levels

logger = logging.getLogger(__name__)


def conversation(question: str, answer: str) -> dict[str, list[dict[str, Any]]]:
    """The prompt (user turn: the image, then the question) and completion (assistant turn) of one example.

    Every content part has both keys (``text`` is ``None`` for the image) so that all rows share one Arrow schema.
    """
    return {
        "prompt": [{"role": "user", "content": [{"type": "image", "text": None}, {"type": "text", "text": question}]}],
        "completion": [{"role": "assistant", "content": [{"type": "text", "text": answer}]}],
    }


def answer(
    queries: Mapping[str, Mapping[str, str]],
    dimension: str,
    mos: float,
    words: Sequence[str],
    mos_range: tuple[float, float],
    soft_std: float | None = None,
    rng: np.random.Generator | None = None,
    votes: Sequence[float] | None = None,
    row_std: float | None = None,
) -> str:
    """The target response: the dimension's response prefix, its rating word (``words`` best first), a full stop.

    Hard targets (``soft_std=None``): the word of the MOS's equal-width bin. Soft targets: the word is drawn
    from :func:`training.targets.soft_target` (a distribution over the levels whose expectation is the MOS), so
    the expected cross-entropy equals the cross-entropy against that soft distribution (DeQA-Score's target);
    where the row has the annotators' ``votes`` (KonIQ-10k's ``c1..c5``, AVA's vote counts: a dataset row's
    ``distribution``), the word is drawn from those instead (:func:`training.targets.votes_to_levels`). With the
    row's own ``row_std`` (``data.soft_targets=gaussian``: the std of its ratings, DeQA-Score's label), the word is
    drawn from the Gaussian of that std, votes or not.
    """
    if soft_std is None:
        word = mos_to_word(mos, words, mos_range)
    else:
        if row_std is not None and math.isfinite(row_std):
            probs = soft_target(mos, row_std, n_levels=len(words), scale=mos_range)
        elif votes:
            probs = votes_to_levels(votes, len(words), mos_range)
        else:
            probs = soft_target(mos, soft_std, n_levels=len(words), scale=mos_range)  # level 1 (worst) first
        level = int((rng or np.random.default_rng()).choice(len(probs), p=probs))
        word = words[len(words) - 1 - level]
    return f"{queries[dimension]['response_prefix']} {word}."


def manifest_dataset(
    source: str | Path,
    queries: Mapping[str, Mapping[str, str]],
    words: Sequence[str],
    *,
    mos_range: tuple[float, float] = (1.0, 5.0),
    skip_bad: bool = True,
    max_pixels: int | None = 36_000_000,
    soft_std: float | None = None,
    seed: int = 0,
    augment: float | None = None,
    split: str = "train",
    row_std: bool = False,
    columns: Any = None,
) -> tuple[Any, int]:
    """A ``datasets.Dataset`` of SFT examples from a ratings manifest, and the number of rows skipped.

    Rows whose dimension the scorer does not know, whose MOS is outside ``mos_range`` or whose image is missing
    or corrupt are reported with file and line and skipped (counted), never trained on. ``augment`` (a side
    fraction) crops and flips each image anew every time it is read (:class:`training.augment.QualityAugment`).
    A dataset by name (``NAME:FOLDER``) is read at ``split`` unless it names one; its description (scale, split
    rule, file read) is kept as JSON in the returned dataset's ``info.description``. ``row_std`` (with ``soft_std``)
    draws each word from a Gaussian of the row's own ``std`` (rows without one use ``soft_std``, and are counted);
    a ``datasets`` dataset ``hf:NAME_OR_DIR[:SPLIT]`` is read through its ``columns``
    (:class:`reward.data.hf.HfColumns`).
    """
    import datasets

    result = load_ratings(
        source,
        skip_bad=skip_bad,
        check_images=True,
        max_pixels=max_pixels,
        mos_range=mos_range,
        default_split=split,
        columns=columns,
    )
    rows = [row for row in result.rows if row.dimension in queries]
    skipped = len(result.skipped) + len(result.rows) - len(rows)
    unknown = Counter(row.dimension for row in result.rows if row.dimension not in queries)
    if unknown:  # one line for all such rows, not one per row
        first = next(row.line for row in result.rows if row.dimension not in queries)
        msg = (
            f"{result.source}: {sum(unknown.values())} rows (first: line {first}) are rated on dimensions "
            f"{dict(unknown)} that are not in prompt.dimensions {sorted(queries)}"
        )
        if not skip_bad or not rows:
            more = "".join(f"\n  - {s.reason}" for s in result.skipped[:3])
            head = f"all {skipped} training rows were skipped, nothing to train on: " if not rows else ""
            raise ConfigError(
                f"{head}{msg}; set prompt.dimensions={sorted(unknown)} (or add them to it), or remove "
                f"the rows" + (f"\nother rows skipped: {more}" if more else "")
            )
        logger.warning("skipping %s", msg)
    keys = ("images", "prompt", "completion", "dimension", "mos", "votes", "std")
    records: dict[str, list[Any]] = {k: [] for k in keys}
    for row in rows:
        conv = conversation(
            queries[row.dimension]["question"], answer(queries, row.dimension, row.mos, words, mos_range)
        )
        records["images"].append([row.image if not isinstance(row.image, Path) else str(row.image)])
        records["prompt"].append(conv["prompt"])
        records["completion"].append(conv["completion"])
        records["dimension"].append(row.dimension)
        records["mos"].append(row.mos)
        records["votes"].append([float(v) for v in row.extra.get("distribution") or []])
        std = row.extra.get("std") if row_std else None
        records["std"].append(float(std) if isinstance(std, (int, float)) and std >= 0 else float("nan"))
    info = datasets.DatasetInfo(description=json.dumps(result.info)) if result.info else None
    ds = datasets.Dataset.from_dict(records, info=info)
    ds = ds.cast_column("images", datasets.Sequence(datasets.Image()))
    if soft_std is not None or augment is not None:  # a new word / crop is drawn each time an example is read
        ds.set_transform(_OnRead(queries, words, mos_range, soft_std, seed, augment))
    else:
        ds = ds.remove_columns(["dimension", "mos", "votes", "std"])
    with_std = sum(math.isfinite(v) for v in records["std"])
    if soft_std is not None and row_std:
        logger.info(
            "soft targets: %d of %d examples from a Gaussian of their own std (the others: std %g)",
            with_std,
            len(ds),
            soft_std,
        )
    voted = sum(bool(v) for v in records["votes"])
    if soft_std is not None and voted and not row_std:
        logger.info("soft targets: %d of %d examples from the annotators' votes", voted, len(ds))
    logger.info("SFT data: %d examples from %s (%d rows skipped)", len(ds), result.source, skipped)
    if result.info:
        logger.info(
            "%s: split %s (%s), scale %s",
            result.source,
            result.info["split"],
            result.info["split_rule"],
            result.info["scale"],
        )
    return ds, skipped


class _OnRead:
    """``datasets`` transform: decode the images (augmented if asked), draw the rating word (soft targets)."""

    def __init__(
        self,
        queries: Mapping[str, Mapping[str, str]],
        words: Sequence[str],
        mos_range: tuple[float, float],
        soft_std: float | None,
        seed: int,
        augment: float | None = None,
    ) -> None:
        from training.augment import QualityAugment

        self.queries, self.words, self.mos_range, self.soft_std = queries, list(words), mos_range, soft_std
        self.rng = np.random.default_rng(seed)
        self.augment = QualityAugment(augment, np.random.default_rng([seed, 1])) if augment is not None else None

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        import datasets

        feature = datasets.Image()
        images = [[feature.decode_example(im) for im in ims] for ims in batch["images"]]
        if self.augment is not None:
            images = [[self.augment(im) for im in ims] for ims in images]
        completions = [
            conversation("", answer(self.queries, d, m, self.words, self.mos_range, self.soft_std, self.rng, v, sd))[
                "completion"
            ]
            for d, m, v, sd in zip(batch["dimension"], batch["mos"], batch["votes"], batch["std"], strict=True)
        ]
        return {"images": images, "prompt": batch["prompt"], "completion": completions}


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
            "words": tuple(words),
            "seed": seed,
            "size": size,
            "mos_range": mos_range,
            "soft_std": soft_std,
        },
        features=stream_features(),
    )


def _synthetic_rows(
    queries: dict,
    words: tuple[str, ...],
    seed: int,
    size: int,
    mos_range: tuple[float, float],
    soft_std: float | None = None,
) -> Iterator[dict[str, Any]]:
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
        conv = conversation(
            queries[dim]["question"], answer(queries, dim, ex.mos[dim], words, mos_range, soft_std, rng)
        )
        yield {"images": [ex.image], **conv}
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
            "words": tuple(words),
            "paths": tuple(map(str, paths)),
            "crop": crop,
            "side": side,
            "seeds": [shard_seed(seed, k) for k in range(STREAM_SHARDS)],  # a list: datasets shards it by worker
            "mos_range": mos_range,
            "soft_std": soft_std,
            "calibration": table,
        },
        features=stream_features(),
    )


def _photo_rows(
    queries: dict,
    words: tuple[str, ...],
    paths: tuple[str, ...],
    crop: int,
    side: int | None,
    seeds: list[int],
    mos_range: tuple[float, float],
    soft_std: float | None,
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
        text = answer(queries, DIMENSION, ex.mos, words, mos_range, soft_std, rng)
        yield {"images": [ex.image], **conversation(queries[DIMENSION]["question"], text)}
