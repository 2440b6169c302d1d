"""The SA-IQA scorer folder's format, ``sa_iqa.json`` (written by ``training/sft.py``, read by ``reward=sa-iqa``):
``format`` (``sa-iqa-scorer/1``), the rendered ``queries`` per dimension (``question``, ``response_prefix``),
``level_words``, ``level_values`` and provenance. Beside it: the model (or a LoRA adapter, ``base_model`` set), its
processor and optionally ``fusion_weights.json`` (:mod:`reward.rewards.fusion_weights`).

Example:
    >>> import tempfile
    >>> meta = {"queries": {"layout": {"question": "Q", "response_prefix": "P"}}, "level_words": ["good", "bad"],
    ...         "level_values": [5.0, 1.0]}
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = write_metadata(d, meta)
    ...     read_metadata(d)["format"]
    'sa-iqa-scorer/1'
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reward.core.errors import MissingInputError, UserError
from reward.data.files import atomic_write_json, read_json_object

__all__ = [
    "FORMAT",
    "METADATA",
    "WEIGHTS_FILENAME",
    "ScorerFormatError",
    "read_metadata",
    "scorer_dimensions",
    "write_metadata",
]

METADATA = "sa_iqa.json"
WEIGHTS_FILENAME = "fusion_weights.json"  # the fusion weights a scorer folder may hold (reward.rewards.fusion_weights)
FORMAT_NAME = "sa-iqa-scorer"
VERSION = 1
FORMAT = f"{FORMAT_NAME}/{VERSION}"
REQUIRED = ("queries", "level_words", "level_values")
MAX_LEVELS = 100  # rating words per query: each is a candidate token scored for every image


class ScorerFormatError(UserError):
    """An ``sa_iqa.json`` this toolkit cannot read; the message names the file and the fix."""


def write_metadata(scorer_dir: str | Path, meta: Mapping[str, Any]) -> Path:
    """Write ``scorer_dir/sa_iqa.json`` with the current ``format`` tag (checked as :func:`read_metadata` will)."""
    record = {"format": FORMAT, **{k: v for k, v in meta.items() if k != "format"}}
    _check(record, Path(scorer_dir) / METADATA)
    Path(scorer_dir).mkdir(parents=True, exist_ok=True)
    return atomic_write_json(Path(scorer_dir) / METADATA, record)


def read_metadata(path: str | Path) -> dict[str, Any]:
    """``sa_iqa.json`` of a scorer folder, refused in one line naming the file when it is missing, not UTF-8 JSON, of
    another format or a newer version, or its queries, level words or values are missing or malformed (a question
    that is no non-empty string, fewer values than words, a string where a number belongs, empty ``queries``...)."""
    meta_path = Path(path) / METADATA
    if not meta_path.is_file():
        raise MissingInputError(
            f"{path} is not an SA-IQA scorer directory: {METADATA} is missing. Point reward.model at the "
            "scorer/ folder that training/sft.py writes in its out= folder."
        )
    meta = read_json_object(meta_path, "rewrite it with training/sft.py", ScorerFormatError)
    _check(meta, meta_path)
    return meta


def scorer_dimensions(cfg: Mapping[str, Any]) -> list[str] | None:
    """The dimensions ``reward=sa-iqa`` with the settings ``cfg`` scores, read without loading its model: the
    ``dimensions`` set, else those of the scorer folder's ``sa_iqa.json`` (``None`` without a ``model``)."""
    from reward.vlm.hub import resolve_model_dir

    if cfg.get("dimensions"):
        return list(cfg["dimensions"])
    if not cfg.get("model"):
        return None
    return list(read_metadata(resolve_model_dir(cfg["model"], key="reward.model"))["queries"])


def _check(meta: Mapping[str, Any], where: Path) -> None:
    tag = meta.get("format")
    name, _, version = str(tag).partition("/")
    if name != FORMAT_NAME or not version.isdigit():
        raise ScorerFormatError(f"{where}: format {tag!r} is not {FORMAT!r}; rewrite the scorer with training/sft.py")
    if int(version) > VERSION:
        raise ScorerFormatError(
            f"{where}: format {tag!r} is newer than this toolkit reads ({FORMAT!r}); update the toolkit"
        )
    missing = [k for k in REQUIRED if k not in meta]
    if missing:
        raise ScorerFormatError(f"{where}: missing keys {missing}; rewrite it with training/sft.py")
    if problem := _content_problem(meta):
        writer = "training/grpo_scorer.py" if "reasoning" in meta else "training/sft.py"
        raise ScorerFormatError(f"{where}: {problem}; rewrite it with {writer}")


def _content_problem(meta: Mapping[str, Any]) -> str | None:
    """What is wrong with the queries, level words and values of ``meta`` (``None``: nothing): every value a reward
    reads from the file, checked before any model loads.

    >>> _content_problem({"queries": {"a": {"question": "Q", "response_prefix": "P"}}, "level_words": ["x", "y"],
    ...                   "level_values": [1, "2"]})
    "level_values[1] is '2', not a finite number"
    """
    queries, words, values = meta["queries"], meta["level_words"], meta["level_values"]
    if not isinstance(queries, dict) or not queries:
        return f"queries is {_shown(queries)}, not an object of one query per dimension"
    for dim, query in queries.items():
        if not isinstance(query, dict):
            return f"queries.{dim} is {_shown(query)}, not an object with a question and a response_prefix"
        for key in ("question", "response_prefix"):
            if not isinstance(query.get(key), str) or (key == "question" and not query[key].strip()):
                return f"queries.{dim}.{key} is {_shown(query.get(key))}, not a non-empty string"
    if not isinstance(words, list) or len(words) < 2 or len(words) > MAX_LEVELS:
        return f"level_words is {_shown(words)}, not a list of 2 to {MAX_LEVELS} words"
    for i, word in enumerate(words):
        if not isinstance(word, str) or not word.strip():
            return f"level_words[{i}] is {_shown(word)}, not a word"
    if len(set(words)) < len(words):
        return f"level_words {words} repeats a word"
    if not isinstance(values, list) or len(values) != len(words):
        return f"level_values is {_shown(values)}, not a list of {len(words)} numbers (one per level word)"
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"level_values[{i}] is {_shown(value)}, not a finite number"
    base = meta.get("base_model")
    if base is not None and (not isinstance(base, str) or not base.strip()):
        return f"base_model is {_shown(base)}, not a model folder or Hub id (or null for a full model)"
    return _reasoning_problem(meta["reasoning"], queries) if "reasoning" in meta else None


def _reasoning_problem(reasoning: Any, queries: Mapping[str, Any]) -> str | None:
    """What is wrong with the ``reasoning`` entry of a GRPO-trained scorer (``reward=reasoning-iqa``), if anything.

    >>> _reasoning_problem({"prompt": "q-insight", "answer_prefix": "<answer>", "mos_range": [5, 1]}, {"quality": {}})
    'reasoning.mos_range is [5, 1], not [low, high] with low < high'
    """
    if not isinstance(reasoning, dict):
        return f"reasoning is {_shown(reasoning)}, not an object with prompt, answer_prefix and mos_range"
    for key in ("prompt", "answer_prefix"):
        if not isinstance(reasoning.get(key), str) or (key == "prompt" and not reasoning[key].strip()):
            return f"reasoning.{key} is {_shown(reasoning.get(key))}, not a {'non-empty ' * (key == 'prompt')}string"
    system = reasoning.get("system")
    if system is not None and not isinstance(system, str):
        return f"reasoning.system is {_shown(system)}, not a string (or null: the chat template's own)"
    bounds = reasoning.get("mos_range")
    numbers = isinstance(bounds, list) and len(bounds) == 2
    numbers = numbers and all(
        not isinstance(b, bool) and isinstance(b, (int, float)) and math.isfinite(b) for b in bounds
    )
    if not numbers or bounds[0] >= bounds[1]:
        return f"reasoning.mos_range is {_shown(bounds)}, not [low, high] with low < high"
    if "quality" not in queries:
        return f"queries holds {sorted(queries)}, not the 'quality' query a GRPO-trained scorer is asked"
    return None


def _shown(value: Any) -> str:
    """A value as the message shows it: short, with its JSON type when that is the problem."""
    text = repr(value) if not isinstance(value, (dict, list)) else json.dumps(value)[:60]
    return "null" if value is None else text if len(text) <= 60 else text[:57] + "..."
