"""The one command convention: ``key=value`` overrides composed by Hydra, one way to fail.

Every entry script is three lines: its docstring (the exact command), and
``main(CONFIG, run, schema=Settings, doc=__doc__)``. The config ``configs/CONFIG.yaml`` is composed with Hydra's
compose API, once, from the settings dataclasses (structured configs, registered by the command right before it
composes: unknown keys and wrong types are refused before anything runs) and the command line's overrides;
``run(cfg)`` does the work. A :class:`~reward.core.errors.UserError` (bad key, bad file, refused output folder)
prints its message alone and exits with status 2; Ctrl-C prints one line saying where the run can be continued and
exits with status 130; any other exception is a bug and keeps its traceback. Under
``accelerate launch`` only the main process prints the message (the launcher then adds its own report of the exit
status: ``-q`` silences it for one process, not for several).

An entry script (``reward/evaluate.py``) is its docstring, the two imports below and, under the usual ``__main__``
guard, one call::

    from reward.commands.evaluate import EvaluateSettings, run
    from reward.core.cli import main

    main("evaluate", run, schema=EvaluateSettings, doc=__doc__)
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from reward.core.errors import ConfigError, UserError
from reward.core.secrets import redact, redact_argv, redact_text, redact_tracebacks

if TYPE_CHECKING:
    from reward.core.schemas import Keys

logger = logging.getLogger(__name__)


def find_configs() -> Path:
    """The ``configs/`` folder: the copy an installed wheel ships as the package data ``reward.configs`` (found with
    importlib.resources), else the checkout's own ``configs/`` beside the packages (a clone, ``pip install -e .``).
    Hydra reads it as a folder on disk (as pip installs wheels)."""
    from importlib import resources

    shipped = resources.files("reward").joinpath("configs")
    if shipped.is_dir():
        return Path(str(shipped))
    return Path(__file__).resolve().parents[2] / "configs"


CONFIG_DIR = find_configs()
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
USER_ERROR_STATUS = 2
INTERRUPTED_STATUS = 130  # 128 + SIGINT, as shells report Ctrl-C
NON_MAIN_EXIT_DELAY_S = 3.0


def compose(
    config_name: str,
    overrides: Sequence[str] = (),
    *,
    schema: type,
    subcommands: Sequence[str] = (),
    config_dir: Path | None = None,
) -> Any:
    """``configs/CONFIG_NAME.yaml`` composed with ``overrides`` (``key=value``; with ``subcommands``, a first bare
    word becomes ``cmd=WORD``), in one Hydra compose. ``schema``: the command's settings dataclass, registered (with
    its config groups' schemas) right before composing (:func:`reward.core.schemas.register`). Old key names are
    rewritten to their new ones first (:func:`reward.core.config.renamed_items`, one warning each; an old key and its
    new name with different values are refused; a recipe's old keys too: :mod:`reward.core.recipes`); Hydra's errors
    become :class:`ConfigError` messages naming the key, and so do values outside their field's range, in every typed
    section (:mod:`reward.core.bounds`)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from reward.core.bounds import composed_problems
    from reward.core.recipes import apply_recipe_renames, recipe_leaves, recipe_renames, refuse_typed
    from reward.core.schemas import register

    args = list(overrides)
    if subcommands:
        if not args or "=" in args[0]:
            raise ConfigError(f"choose a subcommand first: {' | '.join(subcommands)} (then key=value settings)")
        if args[0] not in subcommands:
            from reward.core.registry import close_match

            raise ConfigError(
                f"unknown subcommand {args[0]!r}.{close_match(args[0], subcommands)} Choose one of "
                f"{', '.join(subcommands)}."
            )
        args[0] = f"cmd={args[0]}"
    args = [_quoted(_no_sweep(a)) for a in args]
    bare = [a for a in args if "=" not in a and not a.startswith(("+", "~"))]
    if bare:
        raise ConfigError(f"arguments must be key=value, got {bare}; see configs/{config_name}.yaml for the keys")
    config_dir = config_dir or CONFIG_DIR
    keys = register(config_name, schema, config_dir, args)
    recipe = recipe_leaves(config_dir, args, set(keys.choices))
    renames = recipe_renames(keys, recipe)
    refuse_typed(renames)
    args = _renamed_overrides(args, keys)
    try:
        cfg = _hydra_compose(config_name, args, config_dir)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(_hydra_message(err, config_name, keys)) from None
    given = {tuple(key.split(".")) for _, key, rest in map(_split_override, args) if rest}
    apply_recipe_renames(cfg, renames, given, {key for _, key, _ in recipe})
    if problems := composed_problems(cfg):
        raise ConfigError(f"invalid settings of configs/{config_name}.yaml:\n  - " + "\n  - ".join(problems))
    return cfg


def _hydra_compose(config_name: str, args: Sequence[str], config_dir: Path) -> Any:
    """Hydra's compose in ``config_dir``; inside a caller's own ``initialize_config_dir``, in the caller's."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return hydra_compose(config_name=config_name, overrides=list(args))
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3", job_name=config_name):
        return hydra_compose(config_name=config_name, overrides=list(args))


def _split_override(arg: str) -> tuple[str, str, str]:
    """``(prefix, key, rest)`` of an override: ``+a.b=1`` -> ``('+', 'a.b', '=1')``."""
    prefix = arg[: len(arg) - len(arg.lstrip("+~"))]
    key, sep, value = arg[len(prefix) :].partition("=")
    return prefix, key, sep + value


def _renamed_overrides(args: Sequence[str], keys: Keys) -> list[str]:
    """``args`` with old key names replaced by their new ones, walking the command's schemas along each dotted key
    (:func:`reward.core.config.renamed_items`, the same rewrite as plain dicts get). A key of an untyped section
    (``trainer.*``, checked against its library's fields later) is added or set with ``++``, and so is a ``+key`` of a
    typed section that has the key (``+agents.retries=1``, from when the section was an untyped dict)."""
    import dataclasses

    from reward.core.config import renamed_items

    split = [_split_override(a) for a in args]
    settings = [i for i, (_, key, rest) in enumerate(split) if rest and not key.startswith("hydra")]
    items = [(tuple(split[i][1].split(".")), split[i][2][1:]) for i in settings]
    out = list(args)
    for i, (new, _, untyped) in zip(settings, renamed_items(keys.root, items, group=keys.group), strict=True):
        prefix, _, rest = split[i]
        section = keys.at(".".join(new[:-1])) if len(new) > 1 else None  # (a top-level +key: Hydra's meaning)
        has_key = section is not None and new[-1] in {f.name for f in dataclasses.fields(section)}
        if untyped and not prefix or prefix == "+" and has_key:
            prefix = "++"
        out[i] = prefix + ".".join(new) + rest
    return out


def _no_sweep(arg: str) -> str:
    """``key=a,b,c`` as the list ``key=[a,b,c]``: commands run once, so Hydra's sweep syntax never applies.

    >>> _no_sweep("scores=1,3,4,5"), _no_sweep("data=[a,b]"), _no_sweep("n=3")
    ('scores=[1,3,4,5]', 'data=[a,b]', 'n=3')
    """
    key, sep, value = arg.partition("=")
    if sep and "," in value and value[:1] not in "[{'\"" and "(" not in value:
        return f"{key}=[{value}]"
    return arg


def _quoted(arg: str) -> str:
    """``key=value`` with a value in another script than ASCII (``dimension=色彩``) quoted for Hydra, whose lexer
    takes only ASCII unquoted.

    >>> _quoted("dimension=色彩"), _quoted("n=3"), _quoted("d='色彩'")
    ("dimension='色彩'", 'n=3', "d='色彩'")
    """
    key, sep, value = arg.partition("=")
    if sep and not value.isascii() and value[:1] not in "'\"[{" and not any(c in value for c in "'\\"):
        return f"{key}='{value}'"
    return arg


def _hydra_message(err: Exception, config_name: str, keys: Keys | None = None) -> str:
    """Hydra's composition error as one line naming the key, without Hydra's hints about ``+key``."""
    from reward.core.config import TYPE_WORDS
    from reward.core.registry import close_match

    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    head = lines[0] if lines else type(err).__name__
    cause = err.__cause__
    cause_text = str(cause) if cause is not None else ""
    key = _full_key(cause_text)
    if key and "not in" in cause_text.splitlines()[0]:
        parent, _, leaf = key.rpartition(".")
        hint = _did_you_mean(leaf, keys.at(parent) if keys is not None else None)
        return f"unknown key {key}{hint}: not a setting of configs/{config_name}.yaml"
    if key and "could not be converted to" in cause_text:
        value = head.split("=", 1)[1] if "=" in head else "?"
        want = next((w for k, w in TYPE_WORDS.items() if f"converted to {k}" in cause_text), "another type")
        return f"{key}={value}: expected {want}"
    if key:
        return f"{key}: {cause_text.splitlines()[0]}"
    missing = re.search(r"Could not find '([^'/]+)/([^']+)'", str(err))
    if missing:
        group, choice = missing.groups()
        options = re.search(r"Available options in '[^']+':\s*(.*?)\s*(?:Config search path|$)", str(err), re.S)
        known = [o for o in (options.group(1).split() if options else []) if not o.endswith("_schema")]
        return f"unknown {group}={choice}.{close_match(choice, known)} Choose one of: {', '.join(known)}."
    return " ".join(ln for ln in lines if not ln.startswith(("To append", "See https"))).replace("\t", " ")


def _did_you_mean(leaf: str, section: type | None) -> str:
    """`` (did you mean 'KEY'?)`` from the fields of settings dataclass ``section`` and their old names (an old name
    suggests its new one); the section is the one the command line's group choices give (``reward=pace``)."""
    import dataclasses

    from reward.core.config import aliases_of
    from reward.core.registry import close_match

    if section is None:
        return ""
    aliases = {k: v.new for k, v in aliases_of(section).items() if "." not in k}
    word = close_match(leaf, [f.name for f in dataclasses.fields(section)] + list(aliases), fmt="{}")
    return f" (did you mean {aliases.get(word, word)!r}?)" if word else ""


def _full_key(text: str) -> str | None:
    for line in text.splitlines():
        if line.strip().startswith("full_key:"):
            return line.split(":", 1)[1].strip()
    return None


def is_main_process() -> bool:
    """Rank 0 of a distributed launch (or not launched at all); read from the launcher's environment."""
    return os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) in ("0", "")


def fail(message: str) -> NoReturn:
    """Print a user error once (main process) and exit with status 2.

    Every process of a launch meets the same error; the others wait a moment before exiting, since the launcher
    stops the whole group at the first exit and the main process's message would otherwise never be printed."""
    if is_main_process():
        print(f"error: {redact_text(message)}", file=sys.stderr, flush=True)
    else:
        time.sleep(NON_MAIN_EXIT_DELAY_S)
    raise SystemExit(USER_ERROR_STATUS)


class _StdoutHandler(logging.StreamHandler):
    """Writes to ``sys.stdout`` as it is when a line is logged (a later redirection, e.g. a caller capturing a
    command's output, is followed; a closed earlier stream is never written to); no secret is ever printed
    (:func:`reward.core.secrets.redact_text`)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stdout
        super().emit(record)

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


# Library warnings our code cannot fix, silenced here once for every command. transformers 5 renamed
# gradient_checkpointing* to activation_checkpointing*; our settings use the new names, but trl's trainers still call
# the model's old-named methods, which warn on every run.
LIBRARY_WARNINGS: tuple[tuple[type[Warning], str], ...] = (
    (FutureWarning, r"`(is_)?gradient_checkpointing\w*` is deprecated"),
)


def quiet_libraries() -> None:
    """Filter :data:`LIBRARY_WARNINGS`, and switch off the Hub's and transformers' download/loading/saving progress
    bars (``HF_HUB_DISABLE_PROGRESS_BARS=0`` in the environment keeps them); training and scoring bars stay."""
    for category, message in LIBRARY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    if os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1") != "1":
        return
    if "transformers" in sys.modules:  # imported already (with the command): switch its bars off where they live
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    elif "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()


def setup_logging(level: int = logging.INFO) -> None:
    """Log lines to stdout, as every command writes them (progress bars go to stderr); library noise quietened
    (:func:`quiet_libraries`)."""
    quiet_libraries()
    root = logging.getLogger()
    if not any(getattr(h, "_perceptual_rewards", False) for h in root.handlers):
        handler = _StdoutHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        handler._perceptual_rewards = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level)


def main(
    config_name: str,
    run: Callable[[Any], Any],
    *,
    schema: type,
    doc: str | None = None,
    argv: Sequence[str] | None = None,
    subcommands: Sequence[str] = (),
) -> Any:
    """Compose the config (``schema``: the command's settings dataclass, see :func:`compose`), run the command, and
    fail the one way (see the module docstring). ``--help`` prints the settings with their help, ``--cfg job`` (or
    ``all``) the composed config without running; Hydra's other flags are refused with one message
    (:func:`hydra_flags`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        _help(config_name, schema, doc, [a for a in args if a not in ("-h", "--help")], subcommands)
        return None
    setup_logging()
    redact_argv(args)  # the secrets given on the command line are known (and never printed or written) from here on
    redact_tracebacks()
    from reward.core.outputs import RunComplete

    cfg = None
    try:
        args, show = hydra_flags(args, config_name)
        cfg = compose(config_name, args, schema=schema, subcommands=subcommands)
        if show:
            from omegaconf import OmegaConf

            print(OmegaConf.to_yaml(redact(OmegaConf.to_container(cfg))), end="")
            return None
        return run(cfg)
    except RunComplete as done:
        logger.info("%s", done)
        return None
    except UserError as err:
        fail(str(err))
    except KeyboardInterrupt:
        if is_main_process():
            print(f"interrupted: {interrupted_hint(cfg)}", file=sys.stderr, flush=True)
        raise SystemExit(INTERRUPTED_STATUS) from None


def interrupted_hint(cfg: Any) -> str:
    """Where an interrupted run stands and how to go on, from its output setting and whether it can resume.

    >>> interrupted_hint({"out": "runs/a", "resume": "auto"})
    'runs/a holds the run so far; run the same command again (resume=auto) to continue it where it stopped'
    >>> interrupted_hint({"out": "d"})
    'd holds a partial run; run again with overwrite=true (it is moved aside) or another output folder'
    """
    get = cfg.get if cfg is not None else (lambda key, default=None: default)
    out = get("out") or get("output_dir")
    if not out:
        return "nothing was saved"
    if get("resume", None) is not None:
        return f"{out} holds the run so far; run the same command again (resume=auto) to continue it where it stopped"
    return f"{out} holds a partial run; run again with overwrite=true (it is moved aside) or another output folder"


MULTIRUN = (
    "sweeps (-m / --multirun) are not supported: each command runs once; run it once per setting (e.g. a shell loop "
    "over key=VALUE), and note that key=a,b is read as the list [a,b]"
)
CONFIG_CHOICE = (
    "each command has one config, configs/{config_name}.yaml, composed with key=value settings; to reuse a set of "
    "settings put them in configs/recipe/NAME.yaml and pass +recipe=NAME (--config-name/--config-path/--config-dir "
    "are not supported)"
)
HYDRA_KEYS = (
    "{key}: Hydra's own settings (hydra.*) are not used: the command writes only where out= says and logs to the "
    "console; drop {key}"
)


def hydra_flags(args: Sequence[str], config_name: str = "NAME") -> tuple[list[str], str | None]:
    """``(the key=value settings, what --cfg asks to print or None)``; a Hydra flag these commands do not support
    (``-m``, ``--config-name``, ``hydra.run.dir=...``, ...) is refused with one :class:`ConfigError`, never ignored
    (``config_name``: the command's config, named in the refusal of ``--config-name``).

    >>> hydra_flags(["out=o", "--cfg", "job"])
    (['out=o'], 'job')
    """
    rest: list[str] = []
    show = None
    items = list(args)
    while items:
        arg = items.pop(0)
        flag, eq, value = arg.partition("=")
        if flag in ("--cfg", "-c"):
            show = value if eq else (items.pop(0) if items else "")
            if show not in ("job", "all"):
                raise ConfigError(f"--cfg {show}: use --cfg job (the command's settings) or --cfg all (the same here)")
        elif flag in ("-m", "--multirun"):
            raise ConfigError(MULTIRUN)
        elif flag in ("--config-name", "-cn", "--config-path", "-cp", "--config-dir", "-cd"):
            raise ConfigError(f"{flag}: " + CONFIG_CHOICE.format(config_name=config_name))
        elif arg.startswith("-"):
            raise ConfigError(
                f"unknown option {flag}: commands take key=value settings, --help, and --cfg job|all to print them"
            )
        elif arg.lstrip("+~").startswith("hydra.") or arg.lstrip("+~").partition("=")[0] == "hydra":
            raise ConfigError(HYDRA_KEYS.format(key=arg.lstrip("+~").partition("=")[0]))
        else:
            rest.append(arg)
    return rest, show


def _help(config_name: str, schema: type, doc: str | None, args: list[str], subcommands: Sequence[str]) -> None:
    from omegaconf import OmegaConf

    from reward.core.helptext import annotated

    redact_argv(args)
    print((doc or "").strip() + "\n")
    try:
        args, _ = hydra_flags(args, config_name)
        args = args if not subcommands or args else [subcommands[0]]
        cfg = compose(config_name, args, schema=schema, subcommands=subcommands)
        redact(OmegaConf.to_container(cfg))  # the secrets set are known: their values are never printed
        lines = "\n".join(annotated(cfg))
        print(redact_text(f"settings (configs/{config_name}.yaml; ??? = required):\n" + lines))
    except UserError as err:
        print(f"error: {err}")
