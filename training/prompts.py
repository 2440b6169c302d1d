"""The SA-IQA queries and response template, verbatim: as the authors released them (``wording="release"``:
github.com/AlibabaResearch/SA-IQA ``tools/prompt_configs.py``, what ``sa-iqa-prompt4`` was trained on) or as App. B.1
prints them (``wording="paper"``). Prompt types (Table 4): 1 concise (``Please evaluate the spatial aesthetic
{dimension} quality level of this image.``), 2 the same after the tag ``<{dimension}>``, 3 and 4 type 1 followed by
the general / expert-aware definition. The release tags types 2-4, App. B.1 type 2 only; the image comes first.
The scorer reads the rating word after :func:`response_prefix` (ending in ``is``: the word keeps its leading space).
A dimension types 3-4 have no definition of is asked in plain words (:func:`generic_prompt`). A dimension is asked
about in the words of its key (``colour_cast``: "the spatial aesthetic colour cast quality level"); type 2's tag and
the files keep the key.

A trained scorer's ``sa_iqa.json`` holds its queries rendered from these prompts (:func:`scorer_metadata`), so that
``reward=sa-iqa reward.model=DIR`` needs nothing else and does not depend on the code that made them; the file's
format (its tag, writing, reading and version check) belongs to :mod:`reward.rewards.scorer_folder`.

>>> response_prefix("lighting") + " good."
'The spatial aesthetic lighting quality level of this image is good.'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from reward.rewards.levels import EXPERT_DEFINITIONS, GENERAL_DEFINITIONS, LEVEL_VALUES, LEVEL_WORDS, dimension_words
from reward.rewards.scorer_folder import FORMAT

PROMPT_TYPES: Mapping[int, str] = MappingProxyType(
    {
        1: "concise",
        2: "concise with special characters",
        3: "detailed, general description",
        4: "detailed, expert-aware description",
    }
)

WORDINGS = ("release", "paper")  # the authors' released prompts, App. B.1 as printed


def _check_dimension(dimension: str) -> str:
    if not isinstance(dimension, str) or not dimension.strip() or any(c in dimension for c in "\n<>{}"):
        raise ValueError(f"dimension must be a non-empty name without newlines, '<>' or '{{}}', got {dimension!r}")
    return dimension


def build_prompt(
    dimension: str, prompt_type: int = 4, definitions: Mapping[str, str] | None = None, *, wording: str = "release"
) -> str:
    """The query of SA-IQA prompt type ``prompt_type`` (1-4) for ``dimension``, in ``wording`` (release | paper).

    ``definitions`` replaces the paper's definitions (general for type 3, expert-aware for type 4).

    >>> build_prompt("layout", 2)
    '<layout>Please evaluate the spatial aesthetic layout quality level of this image.'
    >>> build_prompt("layout", 3, {"layout": "d"})[:8], build_prompt("layout", 3, {"layout": "d"}, wording="paper")[:8]
    ('<layout>', 'Please e')
    """
    _check_dimension(dimension)
    if wording not in WORDINGS:
        raise ValueError(f"wording must be one of {WORDINGS}, got {wording!r}")
    if prompt_type not in PROMPT_TYPES:
        raise ValueError(
            f"prompt_type must be one of {sorted(PROMPT_TYPES)} ({dict(PROMPT_TYPES)}), got {prompt_type!r}"
        )
    query = f"Please evaluate the spatial aesthetic {dimension_words(dimension)} quality level of this image."
    if prompt_type in (3, 4):
        table = (
            definitions
            if definitions is not None
            else (GENERAL_DEFINITIONS if prompt_type == 3 else EXPERT_DEFINITIONS)
        )
        if dimension not in table:
            raise ValueError(
                f"no definition for dimension {dimension!r} (prompt type {prompt_type} needs one); known: "
                f"{sorted(table)}. Pass definitions={{{dimension!r}: '...'}} or use prompt type 1 or 2."
            )
        query = f"{query} {table[dimension].strip()}"
    tag = prompt_type == 2 or (wording == "release" and prompt_type in (3, 4))  # App. B.1 tags type 2 only
    return f"<{dimension}>{query}" if tag else query


def response_prefix(dimension: str) -> str:
    """The response up to the rating word, without the space before it: the word's logits are read next.

    >>> response_prefix("harmony")
    'The spatial aesthetic harmony quality level of this image is'
    """
    return f"The spatial aesthetic {dimension_words(_check_dimension(dimension))} quality level of this image is"


def generic_prompt(dimension: str) -> str:
    """The query of a dimension the paper does not define, when the prompt type wants a definition (3-4) and none was
    given: plain words for any dimension, as Q-Align asks (ours; the paper's templates say "spatial aesthetic").

    >>> generic_prompt("quality"), generic_prompt("colour_cast")
    ('Please evaluate the quality of this image.', 'Please evaluate the colour cast of this image.')
    """
    return f"Please evaluate the {dimension_words(_check_dimension(dimension))} of this image."


def generic_response_prefix(dimension: str) -> str:
    """The response of :func:`generic_prompt` up to the rating word.

    >>> generic_response_prefix("sharpness") + " good."
    'The sharpness of this image is good.'
    """
    return f"The {dimension_words(_check_dimension(dimension))} of this image is"


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
