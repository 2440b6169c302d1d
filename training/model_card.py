"""The model card of a trained SA-IQA scorer (``scorer/README.md``): what the Hub shows and what a reader needs.

YAML front matter (``base_model``, ``library_name``, ``tags``, ``datasets``, ``pipeline_tag``) and a body naming the
base model, the data and its split, the dimensions with their definitions, the rating words and their values, the
held-out metrics, the scorer used from Python (as pyiqa's and Q-Align's are) and from the command line, and the command
that made it as it was launched (``accelerate launch ...`` when it was). It replaces the template trl writes
("fine-tuned version of [None]").

Example:
    >>> card = ScorerCard(base_model="Qwen/Qwen2-VL-2B-Instruct", dimensions={"lighting": ""},
    ...                   level_words=["good", "bad"], level_values=[5.0, 1.0], train_data="r.jsonl",
    ...                   command="python training/sft.py model.path=Qwen/Qwen2-VL-2B-Instruct data.train=r.jsonl")
    >>> text = render_card(card)
    >>> text.splitlines()[1], "| good | 5 |" in text
    ('base_model: Qwen/Qwen2-VL-2B-Instruct', True)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.shared.cards import (
    CARD,
    command_line,
    front_matter,
    how_it_was_made,
    launch_of,
    launched_as,
    write_card_text,
)

__all__ = ["CARD", "ScorerCard", "command_line", "launch_of", "launched_as", "render_card", "write_card"]

TAGS = ("image-quality-assessment", "reward-model", "sa-iqa", "vision-language-model", "perceptual-rewards")
METRICS = ("srcc", "plcc", "krcc", "hor", "n")


@dataclass
class ScorerCard:
    """What a scorer's card says about it."""

    base_model: str  # the checkpoint fine-tuned (a Hub id or a folder)
    dimensions: Mapping[str, str]  # name -> definition ("" when the prompt type has none)
    level_words: Sequence[str]
    level_values: Sequence[float]
    train_data: str
    command: str
    test_data: str | None = None
    prompt_type: int = 4
    adapter: bool = False  # the folder holds a LoRA adapter (peft) rather than a full model
    metrics: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # dimension -> metrics.json's entries
    data_info: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # "train"/"test" -> split, rule, ...
    steps: int | None = None
    location: str = "THIS_FOLDER_OR_REPO_ID"  # where a reader loads the scorer from: its Hub id or its folder


def _front_matter(card: ScorerCard) -> str:
    return front_matter(
        card.base_model,
        "peft" if card.adapter else "transformers",
        "image-text-to-text",
        TAGS,
        (card.train_data, card.test_data),
    )


def _split(card: ScorerCard, key: str) -> str:
    info = card.data_info.get(key) or {}
    return f" (split {info['split']}: {info.get('split_rule') or 'as given'})" if info.get("split") else ""


def _metrics_table(card: ScorerCard) -> list[str]:
    if not card.metrics:
        return ["No test data was given (data.test): the scorer was not evaluated."]
    rows = ["| dimension | " + " | ".join(METRICS) + " |", "|" + " --- |" * (len(METRICS) + 1)]
    for dim, values in card.metrics.items():
        if not isinstance(values, Mapping):
            continue
        cells = [f"{values[m]:.3f}" if isinstance(values.get(m), float) else str(values.get(m, "")) for m in METRICS]
        rows.append(f"| {dim} | " + " | ".join(cells) + " |")
    note = (
        "The test data is the training data: these numbers are not held out."
        if card.test_data == card.train_data and not _split(card, "test")
        else f"On {card.test_data}{_split(card, 'test')}, not trained on."
    )
    return [note, "", *rows]


def render_card(card: ScorerCard) -> str:
    """The card's Markdown (front matter and body)."""
    dims = ["| dimension | definition |", "| --- | --- |"]
    dims += [
        f"| {d} | {definition or '(prompt type ' + str(card.prompt_type) + ': none)'} |"
        for d, definition in card.dimensions.items()
    ]
    words = ["| word | value |", "| --- | --- |"]
    words += [f"| {w} | {v:g} |" for w, v in zip(card.level_words, card.level_values, strict=True)]
    kind = "a LoRA adapter on" if card.adapter else "a fine-tune of"
    trained = f" for {card.steps} steps" if card.steps else ""
    body = [
        "# SA-IQA scorer",
        "",
        f"{kind.capitalize()} `{card.base_model}` that rates images on {len(card.dimensions)} quality dimensions "
        "with rating words, trained by supervised fine-tuning on the words (SA-IQA, arXiv:2512.05098) with "
        f"perceptual-rewards{trained}. Base model: `{card.base_model}`.",
        "",
        "## Data",
        "",
        f"- training: `{card.train_data}`{_split(card, 'train')}",
        f"- test: `{card.test_data}`{_split(card, 'test')}" if card.test_data else "- test: none",
        "",
        "## Dimensions",
        "",
        f"SA-IQA prompt type {card.prompt_type}; one query per dimension.",
        "",
        *dims,
        "",
        "## Rating words",
        "",
        "A dimension's score is the expected value of these words' values under the model's probabilities after "
        "the dimension's response prefix (SA-IQA eq. 1), in [1, 5].",
        "",
        *words,
        "",
        "## Held-out metrics",
        "",
        *_metrics_table(card),
        "",
        "## Use",
        "",
        "From Python, as pyiqa's and Q-Align's scorers are used (image paths, `pathlib.Path`s, PIL images, tensors or "
        "arrays; one image or a list):",
        "",
        "```python",
        "from reward import get_reward",
        "",
        f'scorer = get_reward("sa-iqa", {{"model": {json.dumps(card.location)}}})',
        'scores = scorer(["photo.png"])  # a tensor of fused scores in [1, 5], one per image',
        'out = scorer.score("photo.png")  # out.scores and out.dimensions: a tensor per dimension',
        "```",
        "",
        "From the command line, on a ratings manifest:",
        "",
        "```bash",
        f"python reward/evaluate.py reward=sa-iqa reward.model={card.location} data=RATINGS.jsonl out=OUT",
        "```",
        "",
        "The folder's `sa_iqa.json` holds the rendered queries, the rating words and their values (and, once "
        "`fusion/fit.py` has run, the fusion weights).",
        "",
        *how_it_was_made(card.command),
    ]
    return _front_matter(card) + "\n\n" + "\n".join(body)


def write_card(folder: str | Path, card: ScorerCard) -> Path:
    """Write ``folder/README.md`` (replacing any template there); returns its path."""
    return write_card_text(folder, render_card(card))
