"""trl's ``SFTConfig`` / ``GRPOConfig`` fields without importing trl, so that a ``trainer.*`` mistake is refused as
fast as any other key's (importing trl imports torch and transformers: 10-16 s on a loaded 2-core machine).

``trl_fields.json`` (package data beside this module) holds each class's init fields as plain data
(:func:`reward.core.config.library_fields`: a plain type's name, an enum's values, or ``null`` for a richer type,
left to trl) with the trl and transformers versions it was made from. With those versions installed the table is
read; with any other, the classes themselves (slower, exact). ``tests/test_trl_fields.py`` regenerates the table
and fails when trl's fields changed (commit the regenerated file). No cheaper exact source exists: the fields are
those of dataclasses that inherit transformers' ``TrainingArguments``, whose module imports torch, and reading their
source without importing it would redo ``library_fields`` on annotations and defaults trl writes in several styles.

    >>> for problem in trainer_problems("SFTConfig", {"lerning_rate": 1e-3, "max_steps": "ten"}):
    ...     print(problem)
    unknown key trainer.lerning_rate (did you mean 'learning_rate'?)
    trainer.max_steps='ten': expected an integer
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from reward.core.config import field_problems, library_fields

TABLE = Path(__file__).with_name("trl_fields.json")
CLASSES = ("SFTConfig", "GRPOConfig")
VERSIONED = ("trl", "transformers")  # trl's configs extend transformers' TrainingArguments


@cache
def fields_of(name: str) -> dict[str, Any]:
    """The fields of trl's config class ``name``: from the table when it was made from the installed versions (read
    from their metadata: nothing is imported), else from the class itself."""
    table = json.loads(TABLE.read_text(encoding="utf-8")) if TABLE.is_file() else {}
    if table.get("versions") == {lib: metadata.version(lib) for lib in VERSIONED} and name in table:
        return table[name]
    import trl

    return library_fields(getattr(trl, name))


def trainer_problems(name: str, values: Mapping[str, Any], where: str = "trainer") -> list[str]:
    """``values`` (the ``trainer.*`` section) checked against trl's config class ``name``: unknown keys with their
    close match, values of the wrong plain type, a value outside an enum's."""
    return field_problems(fields_of(name), values, where)
