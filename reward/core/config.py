"""Typed settings: a dataclass holds each key's default, type, help and range (``field(metadata={"help": ...,
"range": (1, None)})``, or ``"choices": ("auto", "never")``), and :func:`parse` checks a mapping against it, every
problem at once: unknown keys (with the close match), values of the wrong type, out of range, NaN or not among the
choices, an output path that is empty or the current folder, missing required keys, in every nested section and in
the chosen option of a config group (``reward=pace``: the class ``groups`` names). Checks between fields are a
settings class's ``problems()`` method (a list of messages, empty when none): :func:`parse` collects them from every
nested section and fails with them together with the rest. A command's ``run`` receives the parsed, typed settings
(:func:`reward.core.cli.main` parses them with the command's class).

Example:
    >>> from dataclasses import dataclass, field
    >>> @dataclass
    ... class C:
    ...     model: str
    ...     batch_size: int = field(default=8, metadata={"range": (1, None)})
    >>> parse(C, {"model": "m"})
    C(model='m', batch_size=8)
    >>> parse(C, {"model": "m", "batch_size": 0, "bach": 2})
    Traceback (most recent call last):
    ...
    reward.core.errors.UserError: invalid settings:
      - batch_size=0: must be >= 1
      - unknown key bach (did you mean 'batch_size'?)
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import typing
from collections.abc import Mapping
from pathlib import Path
from types import UnionType
from typing import Any, TypeVar

from reward.core.errors import UserError, close_match

T = TypeVar("T")
Range = tuple  # (low, high) or (low, high, True): above low, not equal to it; None: open on that side
BATCH = (1, 65_536)  # items per call, per device or per step
WORKERS = (0, 1024)
FRACTION = (0, 1)
PIXELS = (1, None)  # a pixel budget or a decode guard
SIDE = (8, 16_384)  # an image side in pixels
COUNT = (1, 10_000_000)
RETRIES = (0, 100)
TOKENS = (1, 1_000_000)
# settings naming what a command writes, checked with the settings (:func:`output_problem`); another field is one when
# its metadata says ``"output": True`` (the study folder, a memory bank) or ``"file"`` (one file written)
OUTPUTS = ("out", "output", "output_dir", "logging_dir", "targets_out")
NAME_MAX, PATH_MAX = 255, 4096  # bytes of one file name and of a whole path (Linux, macOS: 255 and 1024)
VALUE_WORDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
TYPE_WORDS = {"Float": "a float", "Integer": "an integer", "Boolean": "true or false", "String": "a string"}


def range_problem(key: str, value: Any, bounds: Range | None) -> str | None:
    """What is wrong with ``value`` (a number or a list of numbers) for ``bounds``, naming ``key``; NaN is refused.

    >>> range_problem("n", [1, 0], (1, 4)), range_problem("t", 0.0, (0, None, True))
    ('n=[1, 0]: each value must be between 1 and 4', 't=0.0: must be > 0')
    """
    items = value if isinstance(value, list | tuple) else [value]
    numbers = [v for v in items if isinstance(v, int | float) and not isinstance(v, bool)]
    if bounds is None:
        nan = any(isinstance(v, float) and math.isnan(v) for v in numbers)
        return f"{key}={value!r}: not a number; give a finite value" if nan else None
    low, high, strict = (*bounds, False)[:3]
    if all((low is None or (v > low if strict else v >= low)) and (high is None or v <= high) for v in numbers):
        return None
    lo, hi = (
        f"{int(v):,}" if v is not None and float(v).is_integer() and abs(v) >= 10_000 else v for v in (low, high)
    )
    if high is None:
        words = f"{'>' if strict else '>='} {lo}"
    else:
        words = f"{'above' if strict else 'between'} {lo} {'and at most' if strict else 'and'} {hi}"
    return f"{key}={value!r}: {'each value ' if isinstance(value, list | tuple) else ''}must be {words}"


def to_plain(cfg: Any) -> dict[str, Any]:
    """A Hydra/OmegaConf node, mapping or dataclass as a plain dict (``???`` markers dropped: missing reads absent)."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import InterpolationResolutionError

    if cfg is None:
        return {}
    if isinstance(cfg, DictConfig):
        try:
            cfg = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
        except InterpolationResolutionError as err:  # ${...} in a value: OmegaConf's interpolation
            key = getattr(err, "full_key", "") or "a setting"
            raise UserError(
                f"{key}: {str(err).splitlines()[0]}; ${{...}} refers to another setting: write a literal one as "
                f"\\${{...}} (inside the shell's quotes)"
            ) from None
    elif dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        cfg = dataclasses.asdict(cfg)
    if not isinstance(cfg, Mapping):
        raise UserError(f"expected a mapping of settings, got {type(cfg).__name__}: {cfg!r}")
    return {k: to_plain(v) if isinstance(v, Mapping) else v for k, v in cfg.items() if v != "???"}


def field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls) if f.init}


def group_class(cls: type, key: str, section: Any) -> type | None:
    """The settings dataclass of the option chosen in config group ``key`` of ``cls`` (its ``groups`` class
    variable: group -> a function of the option's ``name``), or ``None``."""
    chooser = (getattr(cls, "groups", None) or {}).get(key)
    name = section.get("name") if isinstance(section, Mapping) else None
    return chooser(name) if chooser is not None and name else None


def problems(cls: type, values: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Unknown keys, wrong types, values out of range and missing required keys of ``values`` for ``cls``."""
    from omegaconf import MISSING, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    types = field_types(cls)
    node = OmegaConf.structured(cls)
    found: list[str] = []
    for key, value in values.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            if not (key == "name" and prefix):  # a group option's name, which chose it
                found.append(f"unknown key {full}{close_match(key, list(fields), fmt=' (did you mean {!r}?)')}")
            continue
        section = types[key] if dataclasses.is_dataclass(types[key]) else group_class(cls, key, value)
        if section is not None and isinstance(value, Mapping):
            found += problems(section, value, full)
            continue
        if problem := _shape_problem(full, value, section, types[key]):
            found.append(problem)
            continue
        try:  # the value as the field's type reads it (OmegaConf takes no int for a float deep in a container)
            try:
                typed = OmegaConf.merge(node, {key: value})[key]
            except OmegaConfBaseException:
                typed = OmegaConf.merge(node, {key: _floats(value)})[key]
            values[key] = value = OmegaConf.to_container(typed) if OmegaConf.is_config(typed) else typed
        except OmegaConfBaseException as err:
            text = str(err).splitlines()[0]
            want = next((w for k, w in TYPE_WORDS.items() if f"converted to {k}" in text), text)
            found.append(f"{full}={value!r}: expected {want}" if want != text else f"{full}={value!r}: {text}")
            continue
        if problem := range_problem(full, value, fields[key].metadata.get("range")):
            found.append(problem)
        elif (choices := fields[key].metadata.get("choices")) and _word(value) not in map(_word, choices):
            words = [_word(c) for c in choices]
            hint = close_match(str(value), words, fmt=" (did you mean {!r}?)")
            found.append(f"{full}={value!r}: choose one of {', '.join(words)}{hint}")
        elif isinstance(value, str) and (kind := fields[key].metadata.get("output", key in OUTPUTS)):
            if problem := output_problem(value, full, file=kind == "file"):  # kind: True (a folder) or "file"
                found.append(problem)
    for name, f in fields.items():
        required = f.default is MISSING or (
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        if name not in values and dataclasses.is_dataclass(types[name]):  # a section not given: its required keys
            found += problems(types[name], {}, f"{prefix}.{name}" if prefix else name)
        elif required and values.get(name) is None:
            full = f"{prefix}.{name}" if prefix else name
            found.append(f"missing required key {full} (set it with {full}=...)")
    return found


def output_problem(value: Any, key: str = "out", *, file: bool = False) -> str | None:
    """What makes ``value`` unusable as the output path of setting ``key``, said before anything is read or written
    (``None``: nothing): empty (an unset shell variable), the current folder however written (``./``, ``x/..``, its
    absolute path) or a folder holding it (``..``, ``$UNSET/..``): ``overwrite=true`` would move it aside, the run
    would write among the user's files; or a name longer than the file system takes. ``file``: the output is a file
    (said so when empty).

    >>> output_problem("runs/a"), output_problem("x/..")
    (None, 'out=x/.. is the current folder: name a folder of its own for the output, e.g. out=runs/NAME')
    """
    if value is None:
        return None
    text = str(value)
    if not text.strip():
        return f"{key}= is empty: name the {'file to write' if file else 'output folder'} (an unset shell variable?)"
    try:
        here = os.getcwd()
    except OSError:  # the current folder was deleted: nothing below can be it
        here = None
    real = os.path.realpath(os.path.expanduser(text))
    dot = os.path.normpath(text) == "." or real == here  # the current folder, however it is written
    if dot or here is not None and here.startswith(real.rstrip(os.sep) + os.sep):
        what = "the current folder" if dot else f"{real}, a folder holding the current one"
        return f"{key}={text} is {what}: name a folder of its own for the output, e.g. {key}=runs/NAME"
    longest = max((len(os.fsencode(part)) for part in Path(text).parts), default=0)
    if longest > NAME_MAX or len(os.fsencode(real)) > PATH_MAX:
        which = f"a name of {longest} bytes (at most {NAME_MAX})" if longest > NAME_MAX else f"{len(real)} characters"
        return f"{key}={text[:80]}...: the path is too long for the file system ({which}); pass a shorter {key}="


def _shape_problem(full: str, value: Any, section: type | None, kind: Any) -> str | None:
    """A section of settings given one value (``model=DIR`` where ``model.path`` is meant), or one setting given keys
    below it (``model.path=DIR`` where ``model`` is a path): the spelling to use instead, else ``None``.

    >>> _shape_problem("model", {"path": "/m"}, None, str | None)
    'model.path=/m: model is one setting (a string), not a section with keys; write model=/m'
    """
    if section is not None and value is not None and not isinstance(value, Mapping):
        fields = [f for f in dataclasses.fields(section) if f.init]
        unset = (dataclasses.MISSING, "???")  # required: no default, or OmegaConf's MISSING
        required = [f.name for f in fields if f.default in unset and f.default_factory is dataclasses.MISSING]
        use = f"write {full}.{required[0]}={value}" if len(required) == 1 else f"set its keys: {full}.KEY=VALUE"
        return f"{full}={value}: {full} is a section ({', '.join(f.name for f in fields)}), not one value; {use}"
    members = typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, UnionType) else (kind,)
    scalar = set(members) - {type(None)} <= set(VALUE_WORDS)  # (a list, a mapping or a section may take keys)
    if isinstance(value, Mapping) and value and scalar:
        path, leaf = [], value
        while isinstance(leaf, Mapping) and leaf:  # model.a.b=X: the first value given below
            key, leaf = next(iter(leaf.items()))
            path.append(str(key))
        words = next((VALUE_WORDS[m] for m in members if m in VALUE_WORDS), "one value")
        below = ".".join(path)
        return f"{full}.{below}={leaf}: {full} is one setting ({words}), not a section with keys; write {full}={leaf}"
    return None


def _word(choice: Any) -> str:
    """A choice as typed: ``null`` for ``None``, ``true``/``false`` for a bool (which a ``str`` field reads as
    ``'True'``/``'False'``), else itself."""
    return "null" if choice is None else str(choice).lower() if str(choice) in ("True", "False") else str(choice)


def _floats(node: Any) -> Any:
    """Integers inside the lists of a mapping as floats (``keep: {mos: [3, 4]}`` for ``dict[str, list[float]]``)."""
    if isinstance(node, Mapping):
        return {k: _floats(v) for k, v in node.items()}
    if isinstance(node, list):
        return [float(v) if isinstance(v, int) and not isinstance(v, bool) else _floats(v) for v in node]
    return node


def merged(cls: type, values: Mapping[str, Any]) -> Any:
    """``values`` over the defaults of dataclass ``cls``, typed (an OmegaConf node)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ValidationError

    try:
        return OmegaConf.merge(OmegaConf.structured(cls), values)
    except ValidationError:
        return OmegaConf.merge(OmegaConf.structured(cls), _floats(values))


def parse(cls: type[T], cfg: Any, *, where: str = "") -> T:
    """Settings dataclass ``cls`` from ``cfg`` (a mapping, an OmegaConf node or a dataclass); every problem fails
    together as one :class:`UserError` (``where`` prefixes the keys: ``reward`` -> ``reward.batch_size``). A
    ``name`` key that is not a field (a reward's, which chose it) is dropped; so is ``~``-deleted content."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from reward.core.secrets import secret_problems

    if isinstance(cfg, cls):
        return cfg  # parsed already (a command's run receives its settings parsed)
    values = to_plain(cfg)
    if "name" in values and "name" not in {f.name for f in dataclasses.fields(cls)}:
        values.pop("name")
    found = secret_problems(values, where) + problems(cls, values, where)
    title = f"invalid {where + ' ' if where else ''}settings"
    if len(found) == 1:
        raise UserError(found[0])
    if found:
        raise UserError(f"{title}:\n  - " + "\n  - ".join(found))
    try:
        settings = OmegaConf.to_object(merged(cls, values))
    except UserError:
        raise
    except (ValueError, TypeError, OmegaConfBaseException) as err:
        raise UserError(f"{title}: " + str(err).replace("\n", "\n  ")) from None
    found = cross_field_problems(settings, where)
    if len(found) == 1:
        raise UserError(found[0])
    if found:
        raise UserError(f"{title}:\n  - " + "\n  - ".join(found))
    return settings  # type: ignore[return-value]


def cross_field_problems(settings: Any, where: str = "") -> list[str]:
    """The messages of every ``problems()`` method of ``settings`` and of its nested settings sections, outer first:
    the checks between fields, said with every other problem of the settings. A ``problems(where)`` method is told
    the keys' prefix (``reward`` under ``reward=NAME``; a nested section's own name) to name them as the user types
    them."""
    if not dataclasses.is_dataclass(settings) or isinstance(settings, type):
        return []
    check = getattr(settings, "problems", None)
    found = []
    if callable(check):
        found = list(check(where) if "where" in inspect.signature(check).parameters else check())
    for f in dataclasses.fields(settings):
        found += cross_field_problems(getattr(settings, f.name), f"{where}.{f.name}" if where else f.name)
    return found


RESUME = ("auto", "never", "true", "false")  # the choices of every command's resume=


def resume_field(help: str, default: str = "auto") -> Any:  # noqa: A002 - the metadata key's name
    """A command's ``resume`` setting: one of :data:`RESUME`, changeable when a run resumes; ``help`` says what
    continuing means for this command."""
    return dataclasses.field(default=default, metadata={"help": help, "may_change": True, "choices": RESUME})


def overwrite_field(help: str) -> Any:  # noqa: A002 - the metadata key's name
    """A command's ``overwrite`` setting (false by default, changeable when a run resumes); ``help`` says what is moved
    aside, never deleted."""
    return dataclasses.field(default=False, metadata={"help": help, "may_change": True})


def resume_mode(value: Any) -> bool:
    """``resume=auto|never`` (``true``/``false`` too; checked by :func:`parse` as ``choices``) as a bool.

    >>> resume_mode("auto"), resume_mode(False)
    (True, False)
    """
    return str(value).lower() in ("auto", "true")
