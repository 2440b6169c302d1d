"""Typed settings from configs: dataclasses are the single home of defaults, types and each key's help
(``field(default=..., metadata={"help": ...})``, read by :mod:`reward.core.helptext`).

:func:`parse` turns a mapping or a Hydra/OmegaConf node into a settings dataclass (nested dataclasses included) and
reports every problem at once: unknown keys (with the close match), missing required keys and values of the wrong
type (``temperature=hot``) and values outside their field's range (``batch_size=0``: :mod:`reward.core.bounds`),
each named by its full key. Commands compose their YAML with the same dataclasses,
registered as Hydra structured configs by the command right before it composes (:mod:`reward.core.schemas`), so a
wrong key or type is refused before anything runs; code and tests build the same settings from plain dicts.

Old key names stay valid until the version that drops them: a settings dataclass lists them in its ``aliases``
class variable (old dotted key -> :class:`Alias`: the new dotted key, both relative to the class, and the version
that removes the old one). :func:`renamed` is the one place they are read, with one warning per alias, for plain
dicts (:func:`apply_aliases`, used by :func:`parse`) and for command lines (:mod:`reward.core.cli` rewrites
overrides before Hydra composes) alike. Values that must be one of a few words (``resume=auto|never``) are read by
:func:`resume_mode`.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class C:
    ...     model: str
    ...     temperature: float = 1.0
    >>> parse(C, {"model": "m"}, where="reward")
    C(model='m', temperature=1.0)
    >>> parse(C, {"model": "m", "temperature": "hot", "temprature": 2}, where="reward")
    Traceback (most recent call last):
    ...
    reward.core.errors.ConfigError: invalid reward settings:
      - reward.temperature='hot': expected a float
      - unknown key reward.temprature (did you mean 'temperature'?)
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from reward.core.bounds import range_of, value_problem
from reward.core.errors import ConfigError
from reward.core.registry import close_match
from reward.core.secrets import redact

logger = logging.getLogger(__name__)

T = TypeVar("T")

TYPE_WORDS = {"Float": "a float", "Integer": "an integer", "Boolean": "true or false", "String": "a string"}


def to_plain(cfg: Any) -> dict[str, Any]:
    """A Hydra/OmegaConf node, a mapping or a dataclass as a plain ``dict`` (interpolations resolved, ``???``
    markers dropped so that a missing key reads as absent)."""
    if cfg is None:
        return {}
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        return _drop_missing(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False))
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return dataclasses.asdict(cfg)
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"expected a mapping of config keys, got {type(cfg).__name__}: {cfg!r}")
    return _drop_missing(dict(cfg))


def _drop_missing(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _drop_missing(v) for k, v in node.items() if not (isinstance(v, str) and v == "???")}
    if isinstance(node, list):
        return [_drop_missing(v) for v in node]
    return node


def is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def field_types(cls: type) -> dict[str, Any]:
    import typing

    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls) if f.init}


def _problems(cls: type, values: dict[str, Any], prefix: str) -> list[str]:
    """Unknown keys, wrong types and missing required keys of ``values`` against dataclass ``cls``."""
    from omegaconf import MISSING, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    types = field_types(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    problems: list[str] = []
    for key, value in values.items():
        full = f"{prefix}.{key}" if prefix else key
        if key not in fields:
            aliases = {k: v.new for k, v in aliases_of(cls).items() if "." not in k}
            word = close_match(key, [*fields, *aliases], fmt="{}")
            hint = f" (did you mean {aliases.get(word, word)!r}?)" if word else ""
            problems.append(f"unknown key {full}{hint}")
            continue
        tp = types[key]
        if is_dataclass_type(tp) and isinstance(value, Mapping):
            problems += _problems(tp, dict(value), full)
            continue
        node = OmegaConf.structured(cls)
        try:
            OmegaConf.merge(node, {key: value})
        except OmegaConfBaseException as err:
            problems.append(_type_problem(full, value, err))
            continue
        if problem := value_problem(full, value, range_of(fields[key])):
            problems.append(problem)
    for name, f in fields.items():
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        required = not has_default or (f.default is MISSING)
        if required and values.get(name) is None and not is_dataclass_type(types[name]):
            full = f"{prefix}.{name}" if prefix else name
            problems.append(f"missing required key {full} (set it with {full}=...)")
    return problems


def _type_problem(full: str, value: Any, err: Exception) -> str:
    text = str(err).splitlines()[0]
    want = next((w for k, w in TYPE_WORDS.items() if f"converted to {k}" in text), None)
    if want:
        return f"{full}={value!r}: expected {want}"
    return f"{full}={value!r}: {text}"


def parse(cls: type[T], cfg: Any, *, where: str = "", ignore: tuple[str, ...] = ()) -> T:
    """Settings dataclass ``cls`` from ``cfg`` (a mapping, a Hydra/OmegaConf node or a dataclass); every unknown,
    missing or mistyped key fails together.

    ``where`` prefixes the keys in messages (``reward`` -> ``reward.temperature``); ``ignore`` names keys that
    may be present but are not settings. A ``name`` key that is not a field of ``cls`` (a reward config's name,
    which selects the reward) is ignored. Old names listed in ``cls.aliases`` are rewritten first (one note each).
    Validation in the dataclass's ``__post_init__`` (a ``ValueError``) is reported as a :class:`ConfigError` too.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    skip = set(ignore) | ({"name"} - fields)
    plain = cfg if isinstance(cfg, dict) else to_plain(cfg)  # (a plain dict is read as it is, not copied)
    redact(plain)  # the secrets set are known from here on: never written or logged (reward.core.secrets)
    values = apply_aliases(cls, {k: v for k, v in plain.items() if k not in skip}, where)
    problems = _problems(cls, values, where)
    if problems:
        raise ConfigError(f"invalid {where + ' ' if where else ''}settings:\n  - " + "\n  - ".join(problems))
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), values))  # type: ignore[return-value]
    except ConfigError:
        raise
    except (ValueError, TypeError, OmegaConfBaseException) as err:
        text = str(err).replace("\n", "\n  ")
        raise ConfigError(f"invalid {where + ' ' if where else ''}settings: {text}") from None


class Alias(NamedTuple):
    """An old key of a settings dataclass: ``new``, its new dotted name (relative to the class), and ``removed_in``,
    the version from which the old name is refused."""

    new: str
    removed_in: str


def aliases_of(cls: Any) -> dict[str, Alias]:
    """Old dotted key -> :class:`Alias` of settings dataclass ``cls`` (its ``aliases`` class variable)."""
    return dict(getattr(cls, "aliases", None) or {}) if isinstance(cls, type) else {}


_NOTED: set[tuple[str, str]] = set()


def note_alias(old: str, new: str, removed_in: str) -> None:
    """Warn once per process that ``old`` was read as ``new``, and when ``old`` goes."""
    if (old, new) not in _NOTED:
        _NOTED.add((old, new))
        logger.warning("%s is an alias of %s; the old name goes in %s", old, new, removed_in)


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


KeyPath = tuple[str, ...]  # a dotted key as its parts


def renamed(
    cls: Any, key: Sequence[str], *, where: str = "", group: Callable[[KeyPath], Any] | None = None
) -> tuple[KeyPath, bool]:
    """``(key with every old name along it replaced by its new one, whether it lies in an untyped dict section)``:
    the one place where renamed keys are read, for plain dicts (:func:`apply_aliases`) and command lines
    (:mod:`reward.core.cli`) alike. ``key`` is walked from settings dataclass ``cls`` through its nested sections
    (``group(path)``: the dataclass of a config group's chosen option, e.g. ``reward=pace`` for ``("reward",)``);
    each old name is noted once (:func:`note_alias`). A key below a ``dict`` field (``trainer.max_steps``) is in an
    untyped section.

    >>> @dataclasses.dataclass
    ... class C:
    ...     aliases = {"output_dir": Alias("out", "0.3.0"), "trainer.seed": Alias("seed", "0.3.0")}
    ...     out: str = ""
    ...     seed: int = 0
    ...     trainer: dict = dataclasses.field(default_factory=dict)
    >>> renamed(C, ["trainer", "seed"]), renamed(C, ["trainer", "max_steps"]), renamed(C, ["out"])
    ((('seed',), False), (('trainer', 'max_steps'), True), (('out',), False))
    """
    segs = list(key)
    node: Any = cls
    i = 0
    while i < len(segs) and is_dataclass_type(node):
        table = aliases_of(node)
        for j in range(len(segs), i, -1):
            alias = table.get(".".join(segs[i:j]))
            if alias is not None:
                new = segs[:i] + alias.new.split(".")
                note_alias(_join(where, ".".join(segs[:j])), _join(where, ".".join(new)), alias.removed_in)
                segs = new + segs[j:]
                break
        tp = field_types(node).get(segs[i])
        chosen = group(tuple(segs[: i + 1])) if group is not None else None
        node = tp if is_dataclass_type(tp) else chosen
        if node is None and i < len(segs) - 1 and is_dict_type(tp):
            return tuple(segs), True
        i += 1
    return tuple(segs), False


def is_dict_type(tp: Any) -> bool:
    import types
    import typing

    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(is_dict_type(a) for a in typing.get_args(tp))
    return tp is dict or typing.get_origin(tp) is dict


def _leaves(node: Any, path: KeyPath = ()) -> list[tuple[KeyPath, Any]]:
    if isinstance(node, Mapping) and node:
        return [leaf for k, v in node.items() for leaf in _leaves(v, (*path, k))]
    return [(path, node)]


def renamed_items(
    cls: Any, items: Sequence[tuple[KeyPath, Any]], *, where: str = "", group: Callable[[KeyPath], Any] | None = None
) -> list[tuple[KeyPath, Any, bool]]:
    """``(key, value)`` pairs (keys as paths relative to dataclass ``cls``) as ``(new key, value, in an untyped
    section)`` (:func:`renamed`); an old key and its new name given with different values are refused, naming both.

    >>> @dataclasses.dataclass
    ... class C:
    ...     aliases = {"dir": Alias("out", "0.3.0")}
    ...     out: str = ""
    >>> renamed_items(C, [(("dir",), "/a"), (("out",), "/a")])
    [(('out',), '/a', False), (('out',), '/a', False)]
    >>> renamed_items(C, [(("dir",), "/a"), (("out",), "/b")])
    Traceback (most recent call last):
    ...
    reward.core.errors.ConfigError: out='/b' and dir='/a' name the same setting (dir is an alias of out); give only out
    """
    out: list[tuple[KeyPath, Any, bool]] = []
    given: dict[KeyPath, tuple[KeyPath, Any]] = {}  # new key -> (the key it was given as, its value)
    for old, value in items:
        new, untyped = renamed(cls, [str(k) for k in old], where=where, group=group) if old else ((), False)
        new = old if new == tuple(str(k) for k in old) else new
        first, first_value = given.get(new, (new, value))
        if first_value != value and (old != new or first != new):  # (one key given twice: the last one counts)
            alias = old if old != new else first
            a, b, n, r = (_join(where, ".".join(map(str, p))) for p in (old, first, new, alias))
            raise ConfigError(
                f"{a}={value!r} and {b}={first_value!r} name the same setting ({r} is an alias of {n}); give only {n}"
            )
        given[new] = (old, value)
        out.append((new, value, untyped))
    return out


def apply_aliases(cls: Any, values: dict[str, Any], where: str = "") -> dict[str, Any]:
    """``values`` (a plain dict for dataclass ``cls``) with every old key of ``cls.aliases`` (and of its nested
    settings dataclasses) moved to its new key (:func:`renamed_items`); an old and a new key with different values
    fail.

    >>> @dataclasses.dataclass
    ... class C:
    ...     aliases = {"output_dir": Alias("out", "0.3.0")}
    ...     out: str = ""
    >>> apply_aliases(C, {"output_dir": "/tmp/x"})
    {'out': '/tmp/x'}
    """
    if not is_dataclass_type(cls):
        return values
    out: dict[str, Any] = {}
    for key, value, _ in renamed_items(cls, _leaves(values), where=where):
        _put(out, key, value, where)
    return out


def _put(values: dict[Any, Any], key: KeyPath, value: Any, where: str) -> None:
    node = values
    for n, part in enumerate(key[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(
                f"{_join(where, '.'.join(map(str, key)))}: {_join(where, '.'.join(map(str, key[: n + 1])))} is a "
                "value here, not a section (an old key and its new name were both given)"
            )
        node = child
    if key:
        node[key[-1]] = value


RESUME_WORDS = {"auto": True, "true": True, "never": False, "false": False}


def resume_mode(value: Any, key: str = "resume") -> bool:
    """``resume=auto|never`` (``true``/``false`` accepted as aliases) as a bool: continue the same run or not.

    >>> resume_mode("auto"), resume_mode(False), resume_mode("never")
    (True, False, False)
    """
    word = str(value).lower()
    if word not in RESUME_WORDS:
        raise ConfigError(
            f"{key}={value!r}: use auto (continue the same run in the output folder) or never (a new run only)"
        )
    return RESUME_WORDS[word]


SIMPLE_TYPES = {bool: "true or false", int: "an integer", float: "a float", str: "a string"}
TYPE_NAMES = {tp.__name__: tp for tp in SIMPLE_TYPES}


def library_field_problems(cls: type, values: Mapping[str, Any], where: str) -> list[str]:
    """``values`` checked against a library's settings dataclass ``cls`` (e.g. trl's ``SFTConfig`` for
    ``trainer.*``): unknown keys with their close match, and values that do not fit a field typed as a plain bool,
    int, float or str (optional or not) or as an enum (or a string naming one of its values); fields of richer types
    are left to the library.

    >>> @dataclasses.dataclass
    ... class Lib:
    ...     learning_rate: float = 1e-5
    ...     seed: int = 42
    >>> for p in library_field_problems(Lib, {"learning_rate": "fast", "lerning_rate": 1, "seed": 3}, "trainer"):
    ...     print(p)
    trainer.learning_rate='fast': expected a float
    unknown key trainer.lerning_rate (did you mean 'learning_rate'?)
    """
    return field_problems(library_fields(cls), values, where)


def library_fields(cls: type) -> dict[str, str | list[str] | None]:
    """The init fields of settings dataclass ``cls`` as plain data: the name of a plain type (``"bool"``, ``"int"``,
    ``"float"``, ``"str"``; optional or not), the sorted values of an enum (``Enum | str`` included), or ``None`` for
    a richer type. A table of a library's fields that needs no import of the library (:func:`field_problems`).

    >>> @dataclasses.dataclass
    ... class Lib:
    ...     steps: int | None = None
    ...     extra: dict | None = None
    >>> library_fields(Lib)
    {'steps': 'int', 'extra': None}
    """
    import typing

    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: names only
        hints = {}
    return {f.name: _field_kind(hints.get(f.name)) for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]


def field_problems(
    fields: Mapping[str, str | Sequence[str] | None], values: Mapping[str, Any], where: str
) -> list[str]:
    """``values`` checked against a table of fields (:func:`library_fields`): unknown keys with their close match,
    values that do not fit a plain type, and values outside an enum's.

    >>> for p in field_problems({"steps": "int", "kind": ["cosine", "linear"]}, {"steps": 1.5, "kind": "cosin"}, "t"):
    ...     print(p)
    t.steps=1.5: expected an integer
    t.kind='cosin': expected one of cosine, linear (did you mean 'cosine'?)
    """
    problems = []
    for key, value in values.items():
        if key not in fields:
            problems.append(f"unknown key {where}.{key}{close_match(key, list(fields), fmt=' (did you mean {!r}?)')}")
            continue
        kind = fields[key]
        if value is None or kind is None:
            continue
        if isinstance(kind, str):
            want = TYPE_NAMES[kind]
            if not _fits(value, want):
                problems.append(f"{where}.{key}={value!r}: expected {SIMPLE_TYPES[want]}")
        elif value not in kind:
            hint = close_match(str(value), list(kind), fmt="did you mean {!r}?")
            choices = f"one of {', '.join(kind)}" if len(kind) <= 8 or not hint else f"one of {len(kind)} values"
            problems.append(f"{where}.{key}={value!r}: expected {choices}{f' ({hint})' if hint else ''}")
    return problems


def _field_kind(tp: Any) -> str | list[str] | None:
    import enum
    import types
    import typing

    if tp in SIMPLE_TYPES:
        return tp.__name__
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return sorted(str(m.value) for m in tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) == 1:
            return _field_kind(rest[0])
        enums = [a for a in rest if isinstance(a, type) and issubclass(a, enum.Enum)]
        if len(enums) == 1 and set(rest) == {enums[0], str}:  # Enum | str: the library converts the string
            return _field_kind(enums[0])
    return None


def _fits(value: Any, want: type) -> bool:
    if want is bool:
        return isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if want is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, str)


_STORED: dict[tuple[str | None, str], type] = {}


def store_schema(name: str, node: type, group: str | None = None) -> None:
    """Register dataclass ``node`` as the Hydra structured config ``name`` (in ``group``), the schema a YAML file
    names in its defaults list (:func:`reward.core.schemas.register` calls it for a command); storing the same schema
    again is a no-op."""
    from hydra.core.config_store import ConfigStore

    if _STORED.get((group, name)) is not node:
        ConfigStore.instance().store(name=name, node=node, group=group)
        _STORED[(group, name)] = node


def check_subcommand(settings: Any, needs: dict[str, tuple[str, ...]]) -> str:
    """``settings.cmd`` when it is one of ``needs``' keys and every setting it needs is given; else a
    :class:`ConfigError` naming the choices or the missing keys. Returns the subcommand.

    >>> from types import SimpleNamespace
    >>> check_subcommand(SimpleNamespace(cmd="show", dimension=None), {"list": (), "show": ("dimension",)})
    Traceback (most recent call last):
    ...
    reward.core.errors.ConfigError: show needs dimension=...
    """
    cmd = settings.cmd
    if cmd not in needs:
        raise ConfigError(f"cmd={cmd!r}: choose one of {', '.join(needs)}")
    missing = [k for k in needs[cmd] if not getattr(settings, k)]
    if missing:
        raise ConfigError(f"{cmd} needs {', '.join(f'{k}=...' for k in missing)}")
    return cmd
