"""Typed settings from configs: dataclasses are the single home of defaults and types.

:func:`parse` turns a mapping or a Hydra/OmegaConf node into a settings dataclass (nested dataclasses included) and
reports every problem at once: unknown keys (with the close match), missing required keys and values of the wrong
type (``temperature=hot``), each named by its full key. Commands compose their YAML with the same dataclasses
registered as Hydra structured configs (:func:`store_schema`), so a wrong key or type is refused before anything
runs; code and tests build the same settings from plain dicts.

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
from collections.abc import Mapping
from typing import Any, TypeVar

from reward.core.errors import ConfigError
from reward.core.registry import close_match

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


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _field_types(cls: type) -> dict[str, Any]:
    import typing

    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls) if f.init}


def _problems(cls: type, values: dict[str, Any], prefix: str) -> list[str]:
    """Unknown keys, wrong types and missing required keys of ``values`` against dataclass ``cls``."""
    from omegaconf import MISSING, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    types = _field_types(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    problems: list[str] = []
    for key, value in values.items():
        full = f"{prefix}.{key}" if prefix else key
        if key not in fields:
            problems.append(f"unknown key {full}{close_match(key, list(fields), fmt=' (did you mean {!r}?)')}")
            continue
        tp = types[key]
        if _is_dataclass_type(tp) and isinstance(value, Mapping):
            problems += _problems(tp, dict(value), full)
            continue
        node = OmegaConf.structured(cls)
        try:
            OmegaConf.merge(node, {key: value})
        except OmegaConfBaseException as err:
            problems.append(_type_problem(full, value, err))
    for name, f in fields.items():
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        required = not has_default or (f.default is MISSING)
        if required and values.get(name) is None and not _is_dataclass_type(types[name]):
            full = f"{prefix}.{name}" if prefix else name
            problems.append(f"missing required key {full} (set it with {full}=...)")
    return problems


def _type_problem(full: str, value: Any, err: Exception) -> str:
    text = str(err).splitlines()[0]
    want = next((w for k, w in TYPE_WORDS.items() if f"converted to {k}" in text), None)
    if want:
        return f"{full}={value!r}: expected {want}"
    return f"{full}={value!r}: {text}"


def parse(cls: type[T], cfg: Any, *, where: str, ignore: tuple[str, ...] = ()) -> T:
    """Settings dataclass ``cls`` from ``cfg``; every unknown, missing or mistyped key fails together.

    ``where`` prefixes the keys in messages (``reward`` -> ``reward.temperature``); ``ignore`` names keys that
    may be present but are not settings (e.g. a reward config's ``name``). Validation in the dataclass's
    ``__post_init__`` (a ``ValueError``) is reported as a :class:`ConfigError` too.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    values = {k: v for k, v in to_plain(cfg).items() if k not in ignore}
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


def from_mapping(cls: type[T], cfg: Any, *, where: str, ignore: tuple[str, ...] = ("name",)) -> T:
    """:func:`parse` with a reward config's ``name`` key ignored by default (it selects the reward)."""
    return parse(cls, cfg, where=where, ignore=ignore)


def store_schema(name: str, node: type, group: str | None = None) -> None:
    """Register dataclass ``node`` as the Hydra structured config ``name`` (in ``group``), the schema a YAML file
    names in its defaults list; storing the same schema again is a no-op."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=name, node=node, group=group)


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
