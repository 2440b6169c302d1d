"""Old key names in a recipe (``+recipe=NAME``: a ``# @package _global_`` YAML under ``configs/recipe/``) read as the
command line's are: one setting, one value.

Hydra merges a recipe before the command line's overrides, so the renaming of :mod:`reward.core.cli` (which rewrites
overrides) never sees it. An old key of a typed section (``output_dir``, ``reward.path``) would be an unknown key to
Hydra: it is refused first, naming the file and the new name. An old key of an untyped section (``trainer.seed``,
``trainer.output_dir``) survives composition; :func:`apply_recipe_renames` moves its value to the new key (one
warning), and refuses it when the new key is also given (by the command line or the recipe) with another value:
which one was meant is not for the toolkit to guess.

Example:
    >>> import dataclasses
    >>> from reward.core.config import Alias
    >>> from reward.core.schemas import Keys
    >>> @dataclasses.dataclass
    ... class S:
    ...     aliases = {"trainer.seed": Alias("seed", "0.3.0")}
    ...     seed: int = 42
    ...     trainer: dict = dataclasses.field(default_factory=dict)
    >>> [(r.old, r.new, r.untyped) for r in recipe_renames(Keys(S), [("r.yaml", ("trainer", "seed"), 5)])]
    [(('trainer', 'seed'), ('seed',), True)]
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from reward.core.config import KeyPath, field_types, is_dataclass_type, is_dict_type, renamed
from reward.core.errors import ConfigError
from reward.core.schemas import Keys


class RecipeRename(NamedTuple):
    """An old key ``old`` set to ``value`` by recipe ``file``, whose new name is ``new``."""

    file: str
    old: KeyPath
    new: KeyPath
    value: Any
    untyped: bool


def _leaves(node: Any, path: KeyPath = ()) -> list[tuple[KeyPath, Any]]:
    if isinstance(node, dict) and node:
        return [leaf for k, v in node.items() if k != "defaults" for leaf in _leaves(v, (*path, str(k)))]
    return [(path, node)] if path else []


def recipe_leaves(config_dir: Path, args: Sequence[str], groups: set[str]) -> list[tuple[str, KeyPath, Any]]:
    """``(file, key, value)`` of every setting of the ``# @package _global_`` configs that ``args`` add from folders
    of ``config_dir`` that are not config groups of the command (``+recipe=NAME``)."""
    from omegaconf import OmegaConf

    out = []
    for arg in args:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep or "." in key or key in groups or not (config_dir / key).is_dir():
            continue
        path = config_dir / key / f"{value}.yaml"
        if not path.is_file() or "@package _global_" not in path.read_text(encoding="utf-8", errors="replace"):
            continue
        node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        out += [(f"configs/{key}/{value}.yaml", k, v) for k, v in _leaves(node if isinstance(node, dict) else {})]
    return out


def recipe_renames(keys: Keys, leaves: Sequence[tuple[str, KeyPath, Any]]) -> list[RecipeRename]:
    """The leaves whose key is an old name (walked as the command line's keys are, group choices included)."""
    out = []
    for file, old, value in leaves:
        new, _ = renamed(keys.root, list(old), group=keys.group)
        if tuple(new) != tuple(old):
            out.append(RecipeRename(file, tuple(old), tuple(new), value, in_untyped_section(keys, old)))
    return out


def in_untyped_section(keys: Keys, key: KeyPath) -> bool:
    """Whether ``key`` lies below a ``dict`` field of the command's settings (``trainer.seed``), where Hydra keeps
    any key; a key of a typed section that is no field there is unknown to Hydra."""
    for i in range(len(key) - 1):
        section = keys.at(".".join(key[:i]))
        if section is None:
            return False
        tp = field_types(section).get(key[i])
        if tp is None:
            return False
        if not is_dataclass_type(tp) and keys.group(tuple(key[: i + 1])) is None:
            return is_dict_type(tp)
    return False


def refuse_typed(renames: Sequence[RecipeRename]) -> None:
    """An old key of a typed section in a recipe: refused before Hydra (which would call it unknown)."""
    typed = [r for r in renames if not r.untyped]
    if typed:
        raise ConfigError(
            "; ".join(f"{r.file} sets {'.'.join(r.old)}, the old name of {'.'.join(r.new)}" for r in typed)
            + ": rename it there (the old names are read on the command line only)"
        )


def apply_recipe_renames(
    cfg: Any, renames: Sequence[RecipeRename], given: set[KeyPath], recipe_keys: set[KeyPath]
) -> None:
    """Move each untyped old key's value to its new key in the composed ``cfg``; refuse one whose new key is also
    set (``given``: by the command line; ``recipe_keys``: by a recipe) to another value."""
    from omegaconf import OmegaConf, open_dict

    for r in (r for r in renames if r.untyped):
        new, old = ".".join(r.new), ".".join(r.old)
        if r.new in given or r.new in recipe_keys:
            current = OmegaConf.select(cfg, new)
            if current != r.value:
                where = "the command line" if r.new in given else "the recipe"
                raise ConfigError(
                    f"{r.file} sets {old}={r.value!r} and {where} {new}={current!r}: they name the same setting "
                    f"({old} is an alias of {new}); give only {new}"
                )
        with open_dict(cfg):
            if r.new not in given and r.new not in recipe_keys:
                OmegaConf.update(cfg, new, r.value, merge=False)
            parent = OmegaConf.select(cfg, ".".join(r.old[:-1])) if len(r.old) > 1 else cfg
            if parent is not None and r.old[-1] in parent:
                del parent[r.old[-1]]
