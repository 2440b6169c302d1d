"""Perception instruction tuning (Q-Instruct style): A1 multiple-choice questions as SFT examples, mixed with the
ratings (``data.perception=FILE``: LLVisionQA's; ``synthetic``: :mod:`training.procedural.perception_questions`).
The prompt is exactly ``task=a1``'s (:func:`reward.qbench.a1_perception.lettered_prompt`); the completion the
correct letter (``answer=letter``) or letter and text (``letter_text``: "B. The second image").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from reward.data.images import load_image
from reward.data.manifest import image_paths
from reward.qbench.a1_perception import lettered_prompt
from reward.qbench.a1_questions import load_questions
from reward.vlm.model import content_parts
from training.commands.sft_settings import SftSettings
from training.sft_data import stream_features

logger = logging.getLogger(__name__)


def perception_example(
    n_images: int,
    question: str,
    candidates: Sequence[str],
    correct: str,
    *,
    seed: int,
    index: int,
    answer: str = "letter",
    shuffle: float = 1.0,
) -> dict[str, Any]:
    """The trl prompt-completion conversation of one question (same content-part schema as the rating data).

    ``shuffle``: the share of questions whose options are shuffled (1: all, as task=a1 asks; 0: the given order).
    """
    shuffled = shuffle >= 1.0 or (shuffle > 0.0 and np.random.default_rng([seed, index, 3]).random() < shuffle)
    prompt, letters, order = lettered_prompt(
        question, candidates, n_images=n_images, seed=seed, index=index, shuffle=bool(shuffled)
    )
    letter = letters[order.index(list(candidates).index(correct))]
    reply = letter if answer == "letter" else f"{letter}. {correct}"
    content = [{"type": p["type"], "text": p.get("text")} for p in content_parts(n_images, prompt)]
    return {
        "prompt": [{"role": "user", "content": content}],
        "completion": [{"role": "assistant", "content": [{"type": "text", "text": reply}]}],
    }


def _generated(
    seed: int, size: int, families: tuple[str, ...] | None, answer: str, shuffle: float
) -> Iterator[dict[str, Any]]:
    from training.procedural.perception_questions import question_at

    index = 0
    while True:
        q = question_at(seed, index, size, families, photos="train")
        asked = (len(q["images"]), q["question"], q["candidates"], q["correct_ans"])
        ex = perception_example(*asked, seed=seed, index=index, answer=answer, shuffle=shuffle)
        yield {"images": q["images"], **ex}
        index += 1


def perception_stream(
    seed: int = 0, size: int = 64, families: Sequence[str] | None = None, answer: str = "letter", shuffle: float = 1.0
) -> Any:
    """An endless ``datasets.IterableDataset`` of fresh generated questions (training photos only)."""
    import datasets

    from training.procedural.perception_questions import check_families

    fams = check_families(families)
    return datasets.IterableDataset.from_generator(
        _generated,
        gen_kwargs={"seed": seed, "size": size, "families": fams, "answer": answer, "shuffle": shuffle},
        features=stream_features(),
    )


def perception_file_dataset(
    path: str,
    *,
    seed: int = 0,
    skip_bad: bool = False,
    answer: str = "letter",
    shuffle: float = 1.0,
    image_root: str | Path | None = None,
    allow_absolute_paths: bool = False,
) -> Any:
    """A ``datasets.Dataset`` from an LLVisionQA file (bad rows named by file:line, skipped with ``skip_bad``; image
    paths relative to its folder or ``image_root``, absolute ones only with ``allow_absolute_paths``)."""
    import datasets

    questions, skipped = load_questions(
        path, skip_bad=skip_bad, image_root=image_root, allow_absolute_paths=allow_absolute_paths
    )
    records: dict[str, list[Any]] = {"images": [], "prompt": [], "completion": []}
    for index, q in enumerate(questions):
        ex = perception_example(
            len(q.images), q.question, q.candidates, q.correct, seed=seed, index=index, answer=answer, shuffle=shuffle
        )
        records["images"].append([str(p) if isinstance(p, Path) else load_image(p) for p in q.images])
        records["prompt"].append(ex["prompt"])
        records["completion"].append(ex["completion"])
    logger.info("perception SFT data: %d questions from %s (%d skipped)", len(questions), path, len(skipped))
    return datasets.Dataset.from_dict(records, features=stream_features()), len(skipped)


def mix_perception(settings: SftSettings, rating_data: Callable[[], tuple[Any, int]]) -> tuple[Any, int]:
    """SFT's training set with ``data.perception`` set: perception questions alone
    (``perception_fraction=1``) or interleaved with the rating data at that share."""
    import datasets

    data, skipped = settings.data, 0  # its settings checked with the others (training.commands.sft)
    if data.perception == "synthetic":
        perception = perception_stream(
            settings.seed,
            data.synthetic_size,
            data.perception_families,
            data.perception_answer,
            data.perception_shuffle,
        )
    else:
        perception, skipped = perception_file_dataset(
            data.perception,
            seed=settings.seed,
            skip_bad=data.skip_bad,
            answer=data.perception_answer,
            shuffle=data.perception_shuffle,
            **image_paths(settings),
        )
    if data.perception_fraction >= 1.0:
        return perception, skipped
    ratings, rating_skipped = rating_data()
    ratings = ratings.cast(stream_features()) if "dimension" not in ratings.column_names else ratings
    if isinstance(perception, datasets.IterableDataset) != isinstance(ratings, datasets.IterableDataset):
        perception = (
            perception if isinstance(perception, datasets.IterableDataset) else perception.to_iterable_dataset()
        )
        ratings = ratings if isinstance(ratings, datasets.IterableDataset) else ratings.to_iterable_dataset()
    mixed = datasets.interleave_datasets(
        [ratings, perception],
        probabilities=[1.0 - data.perception_fraction, data.perception_fraction],
        seed=settings.seed,
        stopping_strategy="all_exhausted",
    )
    return mixed, skipped + rating_skipped
