"""The one command convention: ``key=value`` settings composed by Hydra (each applied as ``++key=value``, so an
unknown key reaches :func:`reward.core.config.parse` and is named with its close match), checked against the
command's settings dataclass. An entry script is its docstring and ``main(CONFIG, run, schema=Settings, doc=__doc__)``.
A :class:`~reward.core.errors.UserError`, or a path the file system refuses (too long, no permission, a full or
read-only disk), prints one message and exits 2; Ctrl-C says how to continue and exits 130.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

from reward.core.errors import UserError, close_match, is_main_process

logger = logging.getLogger(__name__)
started_as: tuple[str, dict[str, str]] | None = None  # run by name: ("perceptual-rewards NAME", {name: module})


_SHIPPED = resources.files("reward").joinpath("configs")  # a wheel ships configs/ as the package data reward.configs
CONFIG_DIR = Path(str(_SHIPPED)) if _SHIPPED.is_dir() else Path(__file__).resolve().parents[2] / "configs"
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
# what the file system refuses for a path the user named (not a bug of ours): one line, exit 2, with the fix
FILE_SYSTEM_REFUSALS = {
    errno.ENAMETOOLONG: "pass a shorter path",
    errno.EACCES: "pass a path this user may read and write",
    errno.EPERM: "pass a path this user may read and write",
    errno.EROFS: "pass a path on a disk that can be written",
    errno.ENOSPC: "free some space, or pass a path on another disk",
    errno.EDQUOT: "free some space, or pass a path on another disk",
    errno.ENOTDIR: "a part of the path is a file, not a folder; pass another path",
    errno.EISDIR: "a folder is where a file should be; pass another path",
}


def compose(
    config_name: str,
    overrides: Sequence[str] = (),
    *,
    schema: type | None = None,
    subcommands: Sequence[str] = (),
    config_dir: Path | None = None,
) -> Any:
    """``configs/CONFIG_NAME.yaml`` composed with ``overrides`` (``key=value``; with ``subcommands`` a first bare word
    becomes ``cmd=WORD``); Hydra's errors become one :class:`UserError` naming the key. ``schema`` (the command's
    settings dataclass): the settings are checked against it and returned with every default (:func:`full_config`).
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    config_dir = config_dir or CONFIG_DIR
    args = _overrides(config_name, list(overrides), subcommands, config_dir)
    try:
        if GlobalHydra.instance().is_initialized():  # inside a caller's own initialize_config_dir
            cfg = hydra_compose(config_name=config_name, overrides=args)
        else:
            with initialize_config_dir(config_dir=str(config_dir), version_base="1.3", job_name=config_name):
                cfg = hydra_compose(config_name=config_name, overrides=args)
    except (HydraException, OmegaConfBaseException) as err:
        raise UserError(_hydra_message(err)) from None
    if schema is None:
        return cfg
    from reward.core.config import parse

    parse(schema, cfg)
    return full_config(schema, cfg)


def _overrides(config_name: str, args: list[str], subcommands: Sequence[str], config_dir: Path) -> list[str]:
    """The command line as Hydra overrides: sweeps read as lists, a value Hydra's grammar cannot read quoted, every
    setting forced (``++``), group choices and deletions left to Hydra; Hydra's own keys refused."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if subcommands:
        if not args or "=" in args[0]:
            raise UserError(f"choose a subcommand first: {' | '.join(subcommands)} (then key=value settings)")
        if args[0] not in subcommands:
            raise UserError(
                f"unknown subcommand {args[0]!r}.{close_match(args[0], subcommands)} Choose one of "
                f"{', '.join(subcommands)}."
            )
        args[0] = f"cmd={args[0]}"
    parser = OverridesParser.create()
    out = []
    for arg in args:
        prefix = arg[: len(arg) - len(arg.lstrip("+~"))]
        key, sep, value = arg[len(prefix) :].partition("=")
        if not sep and prefix != "~":
            raise UserError(f"arguments must be key=value, got {arg!r}; see configs/{config_name}.yaml for the keys")
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            raise UserError(
                f"{key}: Hydra's own settings (hydra.*) are not used (the command writes only where out= says "
                f"and logs to the console); drop {key}"
            )
        if "/" in key:
            raise UserError(
                f"{key}={value}: config groups are chosen by name (reward=NAME, generator=NAME, "
                "+recipe=NAME); no other group can be overridden"
            )
        value = _readable(parser, key, value)
        group = "." not in key and (config_dir / key).is_dir()
        out.append(f"{prefix}{key}{sep}{value}" if group or prefix == "~" else f"++{key}={value}")
    return out


def _readable(parser: Any, key: str, value: str) -> str:
    """``value`` as Hydra's grammar reads it, else quoted (``template=Describe {prompt}``, ``dimension=色彩``); a
    value that cannot be read either way is named with how to quote it."""
    listed = [f"[{value}]"] if "," in value and value[:1] not in "[{'\"" else []  # key=a,b: the list, no sweep
    tail = len(value) - len(value.rstrip("\\"))  # backslashes are kept as typed, except before a quote
    quoted = "'" + value[: len(value) - tail].replace("\\'", "\\\\'").replace("'", "\\'") + "\\" * 2 * tail + "'"
    for candidate in (*listed, value, quoted):
        try:
            parser.parse_override(f"{key}={candidate}")
            return candidate
        except Exception:  # noqa: BLE001 - Hydra's grammar error: try the next spelling
            continue
    raise UserError(
        f"{key}={value}: Hydra cannot read this value; quote it inside the shell's quotes, e.g. \"{key}='...'\""
    )


def _hydra_message(err: Exception) -> str:
    """Hydra's composition error as one line; an unknown group option with its close match and the options."""
    text = str(err)
    missing = re.search(r"Could not find '([^'/]+)/([^']+)'", text)
    if missing:
        group, choice = missing.groups()
        options = re.search(r"Available options in '[^']+':\s*(.*?)\s*(?:Config search path|$)", text, re.S)
        known = options.group(1).split() if options else []
        path = "/" in choice or Path(choice).expanduser().exists()  # a folder given where an option is chosen
        after = (
            f" A path goes on a key of the option: {group}=NAME {group}.KEY={choice} (its keys: --help)."
            if path
            else ""
        )
        return f"unknown {group}={choice}.{close_match(choice, known)} Choose one of: {', '.join(known)}.{after}"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("To append", "See"))]
    return " ".join(lines) or type(err).__name__


def full_config(schema: type, cfg: Any) -> Any:
    """The composed ``cfg`` over every default of ``schema`` (a group's section over its option's defaults): what
    ``--help`` and ``--cfg`` print."""
    from omegaconf import open_dict

    from reward.core.config import group_class, merged, to_plain

    values = to_plain(cfg)
    groups = {k: values.pop(k) for k in list(values) if group_class(schema, k, values[k]) is not None}
    node = merged(schema, values)
    with open_dict(node):
        for key, section in groups.items():
            node[key] = merged(group_class(schema, key, section), section)
    return node


def annotated(node: Any, indent: int = 0, entries: dict[str, str] | None = None) -> list[str]:
    """``node`` (a :func:`full_config`) as YAML lines, each key followed by its field's help."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    cls = OmegaConf.get_type(node)
    fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    lines = []
    for key in node:
        help_ = (entries or {}).get(key) or (fields[key].metadata.get("help") if key in fields else None)
        note, pad = f"  # {help_}" if help_ else "", " " * indent
        if OmegaConf.is_missing(node, key):
            lines.append(f"{pad}{key}: ???{note}")
        elif isinstance(node[key], DictConfig) and len(node[key]):
            below = fields[key].metadata.get("entries") if key in fields else None  # a dict field's entries' help
            lines += [f"{pad}{key}:{note}", *annotated(node[key], indent + 2, below)]
        elif isinstance(node[key], ListConfig):
            lines.append(f"{pad}{key}: {OmegaConf.to_container(node[key])}{note}")
        else:
            lines.append(f"{pad}{OmegaConf.to_yaml({key: node[key]}).strip()}{note}")
    return lines


def as_run(text: str) -> str:
    """``text`` with the commands and configs it names spelt for this installation: started as ``perceptual-rewards
    NAME`` (a wheel has no ``training/sft.py``), ``python training/sft.py`` reads ``perceptual-rewards sft`` (under
    ``accelerate launch``: ``-m reward sft``); where
    ``configs/`` is not the shipped configs' folder seen from here, ``configs/X`` reads that folder's path."""
    if started_as is not None:
        for name, module in started_as[1].items():
            script = f"{module.replace('.', '/')}.py"
            text = re.sub(rf"(accelerate launch[^\n]*?){re.escape(script)}", rf"\1-m reward {name}", text)
            text = text.replace(f"python {script}", f"perceptual-rewards {name}")
    if Path("configs").resolve() != CONFIG_DIR.resolve():
        text = re.sub(r"(?<![\w/.])configs/", lambda _: f"{CONFIG_DIR}/", text)
    return text


def fail(message: str) -> NoReturn:
    """Print a user error once (main process) and exit 2; the other processes of a launch wait a moment, since the
    launcher stops the group at the first exit and the main process's message would be lost."""
    from reward.core.secrets import mask

    if is_main_process():
        print(f"error: {mask(as_run(message))}", file=sys.stderr, flush=True)
    else:
        time.sleep(3.0)
    raise SystemExit(2)


class _ConsoleHandler(logging.StreamHandler):
    """Writes to ``sys.stdout`` as it is when a line is logged (a later redirection is followed), every line, a
    library's and its traceback too, with its secrets masked (:func:`reward.core.secrets.mask`)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stdout
        super().emit(record)

    def format(self, record: logging.LogRecord) -> str:
        from reward.core.secrets import mask

        return mask(super().format(record))


# the HTTP client under the openai client (httpx, or httpx2 in openai 3) logs a line per request (81 in a 3-image
# chat-judge run), openai one per retry: their warnings stay
QUIET_LOGGERS = ("httpx", "httpx2", "openai")


def setup_logging(level: int = logging.INFO) -> None:
    """Log lines to stdout (progress bars go to stderr), their secrets masked, the HTTP client's line per request left
    out; the Hub's and transformers' loading bars off unless ``HF_HUB_DISABLE_PROGRESS_BARS=0``; trl's calls of
    transformers' renamed checkpointing methods not warned about."""
    warnings.filterwarnings(
        "ignore", message=r"`(is_)?gradient_checkpointing\w*` is deprecated", category=FutureWarning
    )
    if os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1") == "1" and "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()  # datasets' "Generating split" bars too
    if os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1") == "1" and "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    root = logging.getLogger()
    if not any(isinstance(h, _ConsoleHandler) for h in root.handlers):
        handler = _ConsoleHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root.addHandler(handler)
    root.setLevel(level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))


def main(
    config_name: str,
    run: Callable[[Any], Any],
    *,
    schema: type,
    doc: str | None = None,
    argv: Sequence[str] | None = None,
    subcommands: Sequence[str] = (),
) -> Any:
    """Compose, run, and fail the one way (see the module docstring). ``--help`` prints the settings with their help,
    ``--cfg job`` the composed config; Hydra's other flags are refused in one line."""
    from omegaconf import OmegaConf

    from reward.core.config import to_plain
    from reward.core.outputs import RunComplete
    from reward.core.secrets import mask, redact

    args = list(sys.argv[1:] if argv is None else argv)
    show = "help" if any(a in ("-h", "--help") for a in args) else None
    if "ACCELERATE_USE_CPU" in os.environ:  # started by accelerate launch: Ctrl-C reaches this process alone
        from reward.core.terminal import hold_terminal

        hold_terminal()
    setup_logging()
    sys.excepthook = _masked_traceback
    cfg = None
    try:
        args, show = _flags([a for a in args if a not in ("-h", "--help")], config_name, show)
        if show == "help":
            print(as_run((doc or "").strip()) + "\n")
            args = args if not subcommands or args else [subcommands[0]]
        cfg = compose(config_name, args, subcommands=subcommands)
        if show == "help":
            print(as_run(f"settings (configs/{config_name}.yaml; ??? = required):"))
            print("\n".join(annotated(full_config(schema, redact(to_plain(cfg))))))
            return None
        if show:
            print(OmegaConf.to_yaml(OmegaConf.to_container(full_config(schema, redact(to_plain(cfg))))), end="")
            return None
        from reward.core.config import parse

        result = run(parse(schema, cfg))  # the command receives its typed settings, every problem said first
    except RunComplete as done:
        logger.info("%s", done)
        return None
    except UserError as err:
        if show == "help":
            print(f"error: {mask(str(err))}")
            return None
        fail(str(err))
    except OSError as err:
        if err.errno not in FILE_SYSTEM_REFUSALS or err.filename is None:
            raise
        fail(f"{err.filename}: {err.strerror}; {FILE_SYSTEM_REFUSALS[err.errno]}")
    except KeyboardInterrupt:
        if is_main_process():
            resumable = any(f.name == "resume" for f in dataclasses.fields(schema))
            try:  # the settings with their defaults (out= may be a default)
                full = full_config(schema, cfg)
            except Exception:  # noqa: BLE001 - settings not readable: said as "nothing was saved"
                full = None
            print(f"interrupted: {interrupted_hint(full, resumable)}", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    end_launched_process()
    return result


def _masked_traceback(kind: type[BaseException], error: BaseException, tb: Any) -> None:
    """A bug's traceback as Python prints it, its secrets masked (a library's error may quote a URL's password)."""
    import traceback

    from reward.core.secrets import mask

    sys.stderr.write(mask("".join(traceback.format_exception(kind, error, tb))))


def end_launched_process() -> None:
    """One process of a multi-process launch (``WORLD_SIZE`` > 1) that ran to the end exits as multiprocessing's
    children do: its atexit handlers run (logging's shutdown among them), the streams are flushed, then
    ``os._exit(0)`` without the interpreter's teardown. In that teardown a gloo worker thread still freeing the last
    collective's tensors needs the GIL and aborts the process (``terminate called without an active exception``,
    SIGABRT: pytorch/pytorch#190489), and the launcher reported a finished run as failed; DeepSpeed and DDP keep the
    process groups, and their threads, alive past ``destroy_process_group``."""
    if int(os.environ.get("WORLD_SIZE", "1") or 1) < 2:
        return
    import atexit

    atexit._run_exitfuncs()  # logging's shutdown among them
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _flags(args: list[str], config_name: str, show: str | None) -> tuple[list[str], str | None]:
    """The ``key=value`` settings, and ``--cfg job|all`` as what to print; other flags refused in one line."""
    rest = []
    while args:
        arg = args.pop(0)
        flag, eq, value = arg.partition("=")
        if flag in ("--cfg", "-c"):
            show = show or (value if eq else (args.pop(0) if args else ""))
            if show not in ("job", "all", "help"):
                raise UserError(f"--cfg {show}: use --cfg job (the command's settings) or --cfg all (the same)")
        elif flag in ("-m", "--multirun"):
            raise UserError(
                "sweeps (-m / --multirun) are not supported: each command runs once (key=a,b is read as "
                "the list [a,b])"
            )
        elif flag in ("--config-name", "-cn", "--config-path", "-cp", "--config-dir", "-cd"):
            raise UserError(
                f"{flag}: each command has one config, configs/{config_name}.yaml, composed with key=value settings; "
                "to reuse settings put them in configs/recipe/NAME.yaml and pass +recipe=NAME"
            )
        elif arg.startswith("-"):
            raise UserError(f"unknown option {flag}: commands take key=value settings, --help and --cfg job")
        else:
            rest.append(arg)
    return rest, show


def interrupted_hint(cfg: Any, resumable: bool) -> str:
    """Where an interrupted run stands and how to go on.

    >>> interrupted_hint({"out": "runs/a"}, resumable=True)
    'runs/a holds the run so far; run the same command again (resume=auto) to continue it where it stopped'
    """
    get = cfg.get if cfg is not None else (lambda key, default=None: default)
    out = get("out") or get("output_dir")
    if not out:
        return "nothing was saved"
    if resumable:
        return f"{out} holds the run so far; run the same command again (resume=auto) to continue it where it stopped"
    return f"{out} holds a partial run; run again with overwrite=true (it is moved aside) or another output folder"


def check_subcommand(settings: Any, needs: dict[str, tuple[str, ...]]) -> str:
    """``settings.cmd`` when every setting it needs is given, else a :class:`UserError` naming what is missing."""
    if found := subcommand_problems(settings, needs):
        raise UserError(found[0])
    return settings.cmd


def subcommand_problems(settings: Any, needs: dict[str, tuple[str, ...]]) -> list[str]:
    """What is wrong with ``settings.cmd``: not one of ``needs``, or a setting it needs not given (a settings class's
    ``problems()``)."""
    if settings.cmd not in needs:
        return [f"cmd={settings.cmd!r}: choose one of {', '.join(needs)}"]
    if missing := [k for k in needs[settings.cmd] if not getattr(settings, k)]:
        return [f"{settings.cmd} needs {', '.join(f'{k}=...' for k in missing)}"]
    return []
