"""Every command under one name, as installed: ``perceptual-rewards NAME key=value ...``.

    perceptual-rewards evaluate reward=qbench reward.model=PATH data=MANIFEST out=DIR
    python -m reward evaluate ...                                # the same, as a module
    accelerate launch -q --config_file CONFIG -m reward sft ...  # under accelerate (each process runs the module)
    perceptual-rewards                                           # the commands, one line each; the folders below
    perceptual-rewards --configs                                 # where the configs are (accelerate/, recipe/, ...)
    perceptual-rewards --samples                                 # where the samples are (ratings.jsonl, ...)

The commands are the entry points of the group :data:`COMMANDS` in ``pyproject.toml`` (a name -> the module of its
entry script, e.g. ``sft = "training.sft"``): the packages above ``reward`` declare them, so ``reward`` names
nothing above it. NAME runs that module as ``__main__``, exactly as ``python training/sft.py`` runs the file, with the
rest of the command line as its arguments (``--help``, ``--cfg job`` and every ``key=value`` work the same). A
checkout updated without reinstalling may lack a new command: ``pip install -e .`` (``make`` does it) brings it.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import runpy
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

COMMANDS = "perceptual_rewards.commands"  # the entry point group of the commands
PROG = "perceptual-rewards"
# the samples the README's flow runs on, shipped in the package (a clone's reward/assets/samples/ too)
SAMPLES = Path(__file__).resolve().parent / "assets" / "samples"


def commands() -> dict[str, str]:
    """Command name -> the module of its entry script, in the order ``pyproject.toml`` declares them."""
    return {point.name: point.value for point in metadata.entry_points(group=COMMANDS)}


def summary(module: str) -> str:
    """The first paragraph of the entry script's docstring on one line, read from its source (nothing is imported),
    its reST markup dropped (:func:`plain`): the command's line in the listing."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return "(not importable: reinstall with pip install -e .)"
    with open(spec.origin, encoding="utf-8") as source:
        doc = ast.get_docstring(ast.parse(source.read())) or ""
    return plain(" ".join(doc.strip().split("\n\n")[0].split()))


def plain(text: str) -> str:
    """``text`` without reST roles and literals.

    >>> plain("Raw ratings -> MOS: :func:`~reward.data.raters.aggregate` of ``ratings``.")
    'Raw ratings -> MOS: aggregate of ratings.'
    """
    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?([\w]+)`", r"\1", text)  # :func:`~pkg.mod.name` -> name
    return re.sub(r"``(.+?)``", r"\1", text)


def usage(table: dict[str, str]) -> str:
    """The commands, one line each, and how to run them."""
    if not table:
        return (
            f"{PROG}: no commands are registered (the installed metadata has no {COMMANDS} entry points: a checkout "
            "installed before they were added); reinstall with pip install -e . (make does it)"
        )
    width = max(map(len, table))
    lines = [f"  {name:<{width}}  {summary(module)}" for name, module in table.items()]
    return "\n".join(
        [
            f"usage: {PROG} COMMAND [key=value ...]   (also: python -m reward COMMAND ...; under accelerate: "
            "accelerate launch -m reward COMMAND ...)",
            "",
            "commands:",
            *lines,
            "",
            f"{PROG} COMMAND --help prints its settings; --cfg job the composed config",
            "",
            f"configs (accelerate/, recipe/, ...; {PROG} --configs): {folders()['configs']}",
            f"samples (ratings.jsonl, pairs.jsonl, pace/; {PROG} --samples): {folders()['samples']}",
        ]
    )


def folders() -> dict[str, Path]:
    """Where the shipped configs and samples are: a clone's ``configs/`` and ``reward/assets/samples/``, or the
    installed package's copies (``reward/configs``)."""
    from reward.core.cli import CONFIG_DIR

    return {"configs": CONFIG_DIR, "samples": SAMPLES}


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command named first on the command line (see the module docstring)."""
    from reward.core import cli
    from reward.core.errors import close_match

    args = list(sys.argv[1:] if argv is None else argv)
    table = commands()
    if not args or args[0] in ("-h", "--help"):
        print(usage(table))
        return
    if args[0] in ("--configs", "--samples"):
        print(folders()[args[0][2:]])
        return
    name, rest = args[0], args[1:]
    if name not in table:
        if not table:
            cli.fail(usage(table))
        cli.fail(f"unknown command {name!r}.{close_match(name, list(table))} Commands: {', '.join(table)}")
    cli.started_as = (f"{PROG} {name}", table)  # messages name the commands so (cli.as_run)
    sys.argv = [f"{PROG} {name}", *rest]
    try:
        runpy.run_module(table[name], run_name="__main__", alter_sys=True)
    finally:
        cli.started_as = None
