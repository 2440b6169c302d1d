"""The model card of a trained SA-IQA scorer (``scorer/README.md``), from the template the policy's card shares
(:mod:`training.shared.cards`): base model, data, dimensions, rating words, held-out metrics, use, the command.

Example:
    >>> card = scorer_card(base_model="Qwen/Qwen2-VL-2B-Instruct", dimensions={"lighting": ""}, level_words=["good"],
    ...                    level_values=[5.0], train_data="r.jsonl", command="python training/sft.py")
    >>> card.data.base_model, "| good | 5 |" in str(card)
    ('Qwen/Qwen2-VL-2B-Instruct', True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from training.shared.cards import LOCATION, model_card, public

if TYPE_CHECKING:
    from huggingface_hub import ModelCard

TAGS = ("image-quality-assessment", "reward-model", "sa-iqa", "vision-language-model", "perceptual-rewards")
METRICS = ["srcc", "plcc", "krcc", "hor", "n"]


def scorer_card(
    *,
    base_model: str,
    dimensions: Mapping[str, str],
    level_words: Sequence[str],
    level_values: Sequence[float],
    train_data: str,
    command: str,
    test_data: str | None = None,
    prompt_type: int = 4,
    adapter: bool = False,
    metrics: Mapping[str, Any] | None = None,
    data_info: Mapping[str, Mapping[str, Any]] | None = None,
    steps: int | None = None,
    location: str = LOCATION,
    **text: Any,
) -> ModelCard:
    """The card of a scorer fine-tuned from ``base_model`` (a Hub id or a folder): ``dimensions`` maps a name to its
    definition ("" when the prompt type has none), ``metrics`` is metrics.json's entries per dimension, ``data_info``
    the "train"/"test" data's split and rule, ``location`` where a reader loads the scorer from (a Hub repo id; a
    folder here is written :data:`~training.shared.cards.LOCATION`), ``adapter`` whether the folder holds a LoRA
    adapter; ``text``: more of the template's fields (``method``, ``reward_name``)."""
    info = {k: (data_info or {}).get(k) or {} for k in ("train", "test")}
    metrics = {dim: v for dim, v in (metrics or {}).items() if isinstance(v, Mapping)}
    held_out = test_data != train_data or bool(info["test"].get("split"))
    return model_card(
        "scorer",
        base_model,
        adapter=adapter,
        pipeline_tag="image-text-to-text",
        tags=TAGS,
        sources=[train_data, test_data],
        results=[(m, f"{dim} {m.upper()}", v.get(m)) for dim, v in metrics.items() for m in METRICS[:3] if held_out],
        tested_on=test_data,
        dimensions=[[d, text or f"(prompt type {prompt_type}: none)"] for d, text in dimensions.items()],
        words=[[w, f"{v:g}"] for w, v in zip(level_words, level_values, strict=True)],
        metric_names=METRICS,
        metrics=[
            [dim, *(f"{v[m]:.3f}" if isinstance(v.get(m), float) else str(v.get(m, "")) for m in METRICS)]
            for dim, v in metrics.items()
        ],
        train_data=train_data,
        test_data=test_data,
        info=info,
        held_out=held_out,
        prompt_type=prompt_type,
        steps=steps,
        location=location if public(location) == location else LOCATION,
        command=command,
        **text,
    )
