"""The content of a trained SA-IQA scorer's ``sa_iqa.json``: the queries rendered from the paper's prompts.

``reward=sa-iqa reward.model=DIR`` needs nothing else: the queries are stored rendered, so the reward does not
depend on the prompt code that made them. The file's format (its tag, writing, reading and version check) belongs to
:mod:`reward.rewards.scorer_folder`; this module only fills it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reward.rewards.levels import LEVEL_VALUES, LEVEL_WORDS
from reward.rewards.scorer_folder import FORMAT
from training.prompts import (
    EXPERT_DEFINITIONS,
    GENERAL_DEFINITIONS,
    build_prompt,
    generic_prompt,
    generic_response_prefix,
    response_prefix,
)

DEFAULT_DIMENSIONS = ("layout", "harmony", "lighting", "distortion")


def resolve_definitions(
    dimensions: Sequence[str], prompt_type: int, definitions: Mapping[str, str] | None
) -> dict[str, str]:
    """The definition of each dimension: the config's, else the paper's (expert-aware for type 4)."""
    table = GENERAL_DEFINITIONS if prompt_type == 3 else EXPERT_DEFINITIONS
    merged = {**table, **(definitions or {})}
    return {d: merged.get(d, "") for d in dimensions}


def scorer_metadata(
    dimensions: Sequence[str],
    *,
    prompt_type: int,
    definitions: Mapping[str, str],
    wording: str = "release",
    level_words: Sequence[str] = LEVEL_WORDS,
    level_values: Sequence[float] = LEVEL_VALUES,
    base_model: str | None = None,
    trained_from: str | None = None,
) -> dict[str, Any]:
    """The ``sa_iqa.json`` content: rendered queries per dimension, level words/values, provenance (written with
    :func:`reward.rewards.scorer_folder.write_metadata`; fusion weights are a file of their own). Under prompt types
    3-4 a dimension without a definition is asked in plain words (:func:`training.prompts.generic_prompt`), listed
    under ``generic``."""
    defs = {d: definitions[d] for d in dimensions if definitions.get(d)}
    generic = [d for d in dimensions if prompt_type in (3, 4) and d not in defs]
    queries = {
        d: (
            {
                "question": generic_prompt(d),  # ours, untagged: the release tags its own prompts only
                "response_prefix": generic_response_prefix(d),
            }
            if d in generic
            else {
                "question": build_prompt(d, prompt_type, defs or None, wording=wording),
                "response_prefix": response_prefix(d),
            }
        )
        for d in dimensions
    }
    return {
        "format": FORMAT,
        "prompt_type": prompt_type,
        "generic": generic,
        "wording": wording,
        "dimensions": {d: definitions.get(d, "") for d in dimensions},
        "queries": queries,
        "level_words": list(level_words),
        "level_values": [float(v) for v in level_values],
        "base_model": base_model,  # set when the directory holds a LoRA adapter instead of a full model
        "trained_from": trained_from,
    }
