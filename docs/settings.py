"""The settings tables of the docs pages, made from each command's settings dataclass (the one home of every default
and its help: the same text as ``--help``), and the table of VLM families (``reward.vlm.families.FAMILIES``).

    python docs/settings.py            # rewrites every table between its markers
    python docs/settings.py --check    # rewrites nothing; names the stale pages and exits 1 (tests/test_docs.py)

A page asks for a command's table with two lines, ``<!-- settings: NAME -->`` and ``<!-- /settings -->`` (NAME as
``perceptual-rewards`` knows it: ``sft``, ``best-of-n``, ...); what lies between them is replaced. The table holds
the composed defaults of ``configs/NAME.yaml`` (``???``: required), nested sections flattened to dotted keys, and a
config group (``reward``, ``generator``) as one row: its keys depend on the option chosen (``NAME --help
reward=pace`` prints them). ``<!-- families -->`` ... ``<!-- /families -->`` holds the families' support table.
"""

from __future__ import annotations

import argparse
import logging
import re
import runpy
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"(<!-- settings: ([\w-]+) -->\n)(.*?)(<!-- /settings -->)", re.S)
FAMILY_BLOCK = re.compile(r"(<!-- families -->\n)(.*?)(<!-- /families -->)", re.S)
logger = logging.getLogger("docs.settings")


@dataclass(frozen=True)
class Command:
    """What an entry script passes to ``reward.core.cli.main``."""

    config: str
    schema: type
    subcommands: tuple[str, ...]


def commands() -> dict[str, str]:
    """Command name -> the module of its entry script, as ``pyproject.toml`` declares them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return dict(project["entry-points"]["perceptual_rewards.commands"])


def command_of(module: str) -> Command:
    """Run ``module`` as ``__main__`` with ``reward.core.cli.main`` replaced by a recorder: its config name, settings
    dataclass and subcommands, as the script itself gives them (nothing runs)."""
    from reward.core import cli

    seen: list[Command] = []

    def record(config: str, run: Any, *, schema: type, subcommands: Any = (), **_: Any) -> None:
        seen.append(Command(config, schema, tuple(subcommands)))

    original, argv = cli.main, sys.argv
    cli.main, sys.argv = record, [module]
    try:
        runpy.run_module(module, run_name="__main__")
    finally:
        cli.main, sys.argv = original, argv
    if len(seen) != 1:
        raise RuntimeError(f"{module}: expected one call of reward.core.cli.main, saw {len(seen)}")
    return seen[0]


def rows(node: Any, prefix: str = "", groups: Any = (), entries: Any = None) -> list[tuple[str, str, str]]:
    """``node`` (a full config) as ``(dotted key, value, help)`` rows: sections flattened, a required key ``???``, and
    a config group in ``groups`` one row holding its option's name (its keys depend on the option)."""
    import dataclasses

    from omegaconf import DictConfig, ListConfig, OmegaConf

    cls = OmegaConf.get_type(node)
    fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    helps = entries or {k: f.metadata.get("help", "") for k, f in fields.items()}
    out = []
    for key in node:
        name, note = f"{prefix}{key}", helps.get(key, "")
        if OmegaConf.is_missing(node, key):
            out.append((name, "???", note))
            continue
        child = node[key]
        if key in groups and isinstance(child, DictConfig):
            out.append((name, str(child.get("name", "")), note))
        elif isinstance(child, DictConfig) and len(child):
            out += rows(child, f"{name}.", entries=fields[key].metadata.get("entries") if key in fields else None)
        elif isinstance(child, ListConfig):
            out.append((name, f"[{', '.join(str(v) for v in OmegaConf.to_container(child))}]", note))
        else:
            out.append((name, OmegaConf.to_yaml({key: child}).strip().split(":", 1)[1].strip(), note))
    return out


def markdown(table: list[tuple[str, str, str]]) -> str:
    """:func:`rows` as a markdown table, key and default in code, ``|`` escaped."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| key | default | what it sets |", "| --- | --- | --- |"]
    for key, value, note in table:
        shown = "`???` (required)" if value == "???" else (f"`{cell(value)}`" if value else "")
        lines.append(f"| `{key}` | {shown} | {cell(note)} |")
    return "\n".join(lines)


def table(name: str) -> str:
    """The markdown settings table of command ``name``."""
    from reward.core.cli import compose, full_config

    command = command_of(commands()[name])
    first = list(command.subcommands[:1])
    cfg = full_config(command.schema, compose(command.config, first, subcommands=command.subcommands))
    groups = tuple(getattr(command.schema, "groups", None) or {})
    found = [row for row in rows(cfg, groups=groups) if row[0] != "cmd"]
    where = f"`configs/{command.config}.yaml`, `{commands()[name].replace('.', '/')}.py`"
    head = f"Every key with its default ({where}; `perceptual-rewards {name} --help` prints the same):\n\n"
    return head + markdown(found)


def families_table() -> str:
    """The markdown table of the VLM families: what the test matrix runs on each (tests/test_families.py)."""
    from reward.vlm.families import CHECKS, FAMILIES

    lines = [
        "| family | model type | covers, e.g. | pixel budget | " + " | ".join(CHECKS) + " |",
        "| --- " * (4 + len(CHECKS)) + "|",
    ]
    notes = []
    for name, family in FAMILIES.items():
        cells = []
        for check in CHECKS:
            if check in family.skips:
                notes.append(f"{len(notes) + 1}. {family.label}, {check}: {family.skips[check]}.")
                cells.append(f"no ({len(notes)})")
            else:
                cells.append("yes")
        ids = ", ".join(f"`{i}`" for i in family.ids)
        budget = {"area": "area", "tiles": "tiles", None: "fixed"}[family.pixels]
        lines.append(f"| {family.label} | `{name}` | {ids} | {budget} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "")


def refreshed(text: str) -> str:
    """``text`` (a page) with each settings block and the families block regenerated."""
    text = BLOCK.sub(lambda m: f"{m.group(1)}{table(m.group(2))}\n{m.group(4)}", text)
    return FAMILY_BLOCK.sub(lambda m: f"{m.group(1)}{families_table()}\n{m.group(3)}", text)


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say which pages are stale (exit 1 if any)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("reward").setLevel(logging.WARNING)
    stale = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        new = refreshed(text)
        if new != text:
            stale.append(page.relative_to(ROOT).as_posix())
            if not args.check:
                page.write_text(new, encoding="utf-8")
    verb = "stale (run python docs/settings.py)" if args.check else "rewritten"
    logger.info("%s: %s", verb, ", ".join(stale) if stale else "none")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
