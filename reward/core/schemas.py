"""A command's settings dataclasses, registered for Hydra by the command that composes them, and the dataclass behind
each key of its command line, known without composing.

A command names its settings dataclass (``main(CONFIG, run, schema=Settings)``, ``compose(CONFIG, ..., schema=...)``);
:func:`register` stores it under the name ``configs/CONFIG.yaml`` gives it in its defaults list (``- grpo_schema``),
with the option schemas of its config groups (``Settings.groups``: group -> a function returning
``{schema name: dataclass}``, e.g. the reward registry's), right before Hydra composes: nothing is registered as a
side effect of importing a module. The returned :class:`Keys` walks a dotted key through them, the group options
chosen as Hydra will choose them (the command line's ``reward=pace``, a recipe's ``override /reward: sa-iqa``, else
the YAML's default), read from the YAML files' defaults lists.

Example:
    >>> from reward.commands.evaluate import EvaluateSettings
    >>> from reward.core.cli import CONFIG_DIR
    >>> keys = register("evaluate", EvaluateSettings, CONFIG_DIR, ["reward=pace"])
    >>> keys.choices["reward"].__name__, keys.at("reward.calibration").__name__
    ('PaceConfig', 'CalibrationSource')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reward.core.config import field_types, is_dataclass_type, store_schema

SchemaGroups = Mapping[str, Callable[[], Mapping[str, type]]]


@dataclass
class Keys:
    """The settings dataclass of a command line: ``root`` (the command's) and ``choices`` (group -> the settings
    dataclass of the option the command line chooses, e.g. ``reward`` -> ``PaceConfig`` for ``reward=pace``)."""

    root: type
    choices: dict[str, type | None] = field(default_factory=dict)

    def group(self, path: tuple[str, ...]) -> type | None:
        """The dataclass of the group at ``path`` (a top-level key such as ``("reward",)``), or ``None``."""
        return self.choices.get(path[0]) if len(path) == 1 else None

    def at(self, dotted: str) -> type | None:
        """The settings dataclass of the section ``dotted`` ("" for the top), or ``None`` (untyped or unknown)."""
        node: Any = self.root
        path: tuple[str, ...] = ()
        for seg in dotted.split(".") if dotted else ():
            path = (*path, seg)
            tp = field_types(node).get(seg) if is_dataclass_type(node) else None
            node = tp if is_dataclass_type(tp) else self.group(path)
        return node if is_dataclass_type(node) else None


def groups_of(schema: type) -> SchemaGroups:
    """The config groups of settings dataclass ``schema`` (its ``groups`` class variable)."""
    return dict(getattr(schema, "groups", None) or {})


def register(config_name: str, schema: type, config_dir: Path, overrides: Sequence[str] = ()) -> Keys:
    """Store ``schema`` (and its groups' option schemas) for Hydra under the names the YAML files give them, and
    return the :class:`Keys` of the command line ``overrides``."""
    name = schema_name(config_dir / f"{config_name}.yaml")
    if name is not None:
        store_schema(name, schema)
    options: dict[str, Mapping[str, type]] = {}
    for group, schemas in groups_of(schema).items():
        options[group] = schemas()
        for option_schema, node in options[group].items():
            store_schema(option_schema, node, group=group)
    choices = {
        group: options[group].get(schema_name(config_dir / group / f"{option}.yaml") or "") if option else None
        for group, option in chosen_options(config_name, config_dir, overrides, set(options)).items()
    }
    return Keys(schema, choices)


def _defaults(path: Path) -> list[Any]:
    from omegaconf import OmegaConf

    if not path.is_file():
        return []
    node = OmegaConf.to_container(OmegaConf.load(path))
    return list(node.get("defaults") or []) if isinstance(node, dict) else []


def schema_name(path: Path) -> str | None:
    """The structured config a YAML file's defaults list names (its entry ending in ``_schema``), if any."""
    return next((d for d in _defaults(path) if isinstance(d, str) and d.endswith("_schema")), None)


def _group_entries(path: Path, groups: set[str]) -> dict[str, str | None]:
    """``group -> option`` of the entries of a YAML file's defaults list that choose one of ``groups``
    (``- reward: sa-iqa``, ``- override /reward: pace``)."""
    out = {}
    for entry in _defaults(path):
        if isinstance(entry, dict) and len(entry) == 1:
            ((key, option),) = entry.items()
            group = str(key).removeprefix("override").strip().strip("/")
            if group in groups:
                out[group] = option
    return out


def chosen_options(
    config_name: str, config_dir: Path, overrides: Sequence[str], groups: set[str]
) -> dict[str, str | None]:
    """``group -> option`` as Hydra chooses them: the YAML's defaults, then the overrides of a config added on the
    command line (``+recipe=NAME``'s ``override /reward: ...``), then the command line's own (``reward=pace``)."""
    chosen = _group_entries(config_dir / f"{config_name}.yaml", groups)
    direct: dict[str, str] = {}
    for arg in overrides:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep or "." in key or not (config_dir / key).is_dir():
            continue
        if key in groups:
            direct[key] = value
        else:
            chosen.update(_group_entries(config_dir / key / f"{value}.yaml", groups))
    return {**chosen, **direct}
