"""trl's ``SFTConfig`` / ``GRPOConfig`` fields without importing trl (torch and transformers: 10-16 s), so that a
``trainer.*`` mistake is refused as fast as any other key's. ``trl_fields.json`` holds each class's init fields
(:func:`library_fields`) with the trl and transformers versions it was made from; with other versions installed the
classes themselves are read. ``tests/test_trl_fields.py`` regenerates the table and fails when trl's fields changed.

    >>> for problem in trainer_problems("SFTConfig", {"lerning_rate": 1e-3, "max_steps": "ten"}):
    ...     print(problem)
    unknown key trainer.lerning_rate (did you mean 'learning_rate'?)
    trainer.max_steps='ten': expected an integer
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from reward.core.errors import close_match

SIMPLE = {bool: "true or false", int: "an integer", float: "a float", str: "a string"}
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


def library_fields(cls: type) -> dict[str, str | list[str] | None]:
    """The init fields of a library's settings dataclass as data: a plain type's name, an enum's values, or ``None``
    for a richer type (left to the library): a table checked without importing the library (:func:`field_problems`).
    """
    import enum
    import types

    hints = typing.get_type_hints(cls)

    def kind(tp: Any) -> str | list[str] | None:
        if tp in SIMPLE:
            return tp.__name__
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return sorted(str(m.value) for m in tp)
        if typing.get_origin(tp) not in (typing.Union, types.UnionType):
            return None
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
        if len(args) == 1 or (len(enums) == 1 and set(args) == {enums[0], str}):
            return kind(enums[0] if enums else args[0])
        return None

    return {f.name: kind(hints.get(f.name)) for f in dataclasses.fields(cls) if f.init}


def field_problems(fields: Mapping[str, Any], values: Mapping[str, Any], where: str) -> list[str]:
    """``values`` checked against a table of :func:`library_fields`: unknown keys, plain types, enum values.

    >>> for p in field_problems({"steps": "int", "kind": ["cosine", "linear"]}, {"steps": 1.5, "kind": "cosin"}, "t"):
    ...     print(p)
    t.steps=1.5: expected an integer
    t.kind='cosin': expected one of cosine, linear (did you mean 'cosine'?)
    """
    found = []
    names = {"bool": bool, "int": int, "float": float, "str": str}
    for key, value in values.items():
        kind = fields.get(key, "?")
        if kind == "?":
            found.append(f"unknown key {where}.{key}{close_match(key, list(fields), fmt=' (did you mean {!r}?)')}")
        elif isinstance(kind, str) and value is not None:
            want = names[kind]  # a bool is no number here, nor a number a bool
            if isinstance(value, bool) != (want is bool) or not isinstance(
                value, int | float if want is float else want
            ):
                found.append(f"{where}.{key}={value!r}: expected {SIMPLE[want]}")
        elif isinstance(kind, list) and value is not None and value not in kind:
            hint = close_match(str(value), kind, fmt=" (did you mean {!r}?)")
            choices = ", ".join(kind) if len(kind) <= 8 or not hint else f"{len(kind)} values"
            found.append(f"{where}.{key}={value!r}: expected one of {choices}{hint}")
    return found
