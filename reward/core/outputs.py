"""One output-folder policy for every command that writes a folder: new, the same run resumed, or refused.

A run is known by its command, settings and the content of its inputs (:mod:`reward.core.fingerprints`), written to
``OUT/run.json``. An existing folder is resumed only when asked and holding the same run (``may_change`` settings
aside); the identical completed run stops at once (:class:`RunComplete`); anything else is refused with the
differences and the ways out (another ``out=``, or ``overwrite=true``: the old folder is moved to ``OUT.old-<time>``,
never deleted). ``out=`` that is or holds an input is refused; one inside an input folder (and its moved-aside old
runs) is not part of that input. ``filelock`` holds ``.NAME.lock`` beside the folder while the run lives.

Example:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     first = prepare_output(f"{d}/run", "evaluate", {"model": "a", "batch_size": 8})
    ...     _ = (first.path / "scores.jsonl").write_text("{}")  # the run starts writing
    ...     again = prepare_output(f"{d}/run", "evaluate", {"model": "a", "batch_size": 16}, resume=True,
    ...                            may_change=("batch_size",))
    ...     first.resumed, again.resumed
    (False, True)
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import json
import logging
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reward.core.atomic import atomic_write_json, json_safe
from reward.core.config import output_problem
from reward.core.errors import UserError, is_main_process
from reward.core.fingerprints import fingerprint, hub_snapshot
from reward.core.secrets import is_secret_key, redact
from reward.core.sources import parse_source

logger = logging.getLogger(__name__)

RUN_FILE = "run.json"
SCHEMA = "perceptual-rewards-run/1"
# settings naming what a command writes or a cache it fills, or where relative paths are read from: never inputs
NOT_INPUTS = ("out", "output", "output_dir", "logging_dir", "cache_dir", "offload_folder", "image_root", "targets_out")
SERVED = ("server", "servers")  # sections whose ``model`` a server runs: not read here


class RunComplete(Exception):  # noqa: N818 - not an error: the command has nothing to do
    """The identical command already completed in this folder, as ``make`` finds a target up to date."""


@dataclass
class Output:
    """A checked output folder: new, or the same run ``resumed``; ``replace``: an old folder moved aside on
    :meth:`create`; ``lock``: held while this object lives."""

    path: Path
    resumed: bool
    identity: dict[str, Any] = field(default_factory=dict)
    replace: bool = False
    lock: Any = field(default=None, repr=False, compare=False)
    key: str = "out"  # the setting naming the folder, in messages

    def create(self) -> None:
        """Move an old folder aside (``overwrite=true``), create the folder and write ``run.json``."""
        real = Path(os.path.realpath(self.path))
        with os_errors(self.key, self.path):
            if self.replace and real.is_dir():
                move_aside(real)
            if self.resumed:
                logger.info("resuming the run in %s", self.path)
                if _saved(self.path) == self.identity:  # nothing changed: the folder is left as it is
                    return
            real.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.path / RUN_FILE, self.identity)

    def finish(self) -> None:
        """Mark the run complete (the identical command then stops at once); an input known by its name alone when
        the run started (a Hub model the run downloaded) is fingerprinted now."""
        inputs = {k: fingerprint(v["path"]) if v.keys() == {"path"} else v for k, v in self.identity["inputs"].items()}
        self.identity = {**self.identity, "inputs": inputs}
        atomic_write_json(self.path / RUN_FILE, {**self.identity, "complete": True})

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "lock": None}  # sent to the other processes of a launch without the lock

    def provenance(self) -> dict[str, Any]:
        """What a result file records about its run: the command, its inputs and when it started."""
        return {k: self.identity.get(k) for k in ("command", "inputs", "started")}


def prepare_output(
    out: str | Path, command: str, settings: Mapping[str, Any], inputs: Any = None, **kw: Any
) -> Output:
    """:func:`check_output`, then :meth:`Output.create` (single process; under a launch, check on every process and
    create on the main one)."""
    output = check_output(out, command, settings, inputs, **kw)
    output.create()
    return output


def check_output(
    out: str | Path,
    command: str,
    settings: Mapping[str, Any],
    inputs: Mapping[str, str | Path | None] | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    may_change: Sequence[str] = (),
    resume_hint: str | None = "resume=true",
    out_key: str = "out",
) -> Output:
    """What :func:`prepare_output` decides, writing nothing (every process of a launch may call it). ``inputs``:
    role -> path, fingerprinted with every other setting naming an input (:func:`path_inputs`); ``may_change``: dotted
    keys that may differ on resume; ``resume_hint``/``out_key``: the command's spelling of resuming and of its output.
    """
    if problem := output_problem(out, out_key):
        raise UserError(problem)
    path = Path(out)
    real = os.path.realpath(path)
    # a setting's word that names the output folder itself (out=grpo with trainer.loss_type=grpo) is no input
    words = {k: v for k, v in path_inputs(settings).items() if os.path.realpath(Path(v).expanduser()) != real}
    named = {**words, **{k: str(v) for k, v in (inputs or {}).items() if v is not None}}
    refuse_inputs(path, named, out_key)
    with os_errors(out_key, path):
        if path.exists() and not path.is_dir():
            raise UserError(f"{out_key}={path} is a file; pass a folder to write into (it will be created)")
        check_writable(path, out_key)
        lock = lock_output(path, out_key)
        occupied = path.is_dir() and any(path.iterdir())
        saved = _saved(path) if occupied and not overwrite else None
    if occupied and not overwrite and saved is None:
        raise UserError(
            f"{path} already holds files that this command did not write (no {RUN_FILE}); pass another "
            f"{out_key}= folder, or overwrite=true to move it aside first"
        )
    exclude = [real, *glob.glob(glob.escape(real) + ".old-*")]  # its own outputs, old ones moved aside too
    if is_main_process():
        found = {k: fingerprint(v, exclude=exclude) for k, v in sorted(named.items())}
    else:  # the other processes of a launch take what the main process recorded
        found = {k: ((saved or {}).get("inputs") or {}).get(k, {"path": v}) for k, v in sorted(named.items())}
    identity = {
        "schema": SCHEMA,
        "command": command,
        "settings": redact(json_safe(dict(settings))),
        "inputs": found,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    if saved is None:
        return Output(path, False, identity, replace=occupied, lock=lock, key=out_key)
    before = {"command": saved.get("command"), **saved.get("settings", {}), "inputs": saved.get("inputs") or {}}
    now = {"command": command, **identity["settings"], "inputs": _as_saved(saved.get("inputs") or {}, found)}
    if saved.get("complete") and not differences(before, now, ("resume", "overwrite")):
        raise RunComplete(f"already complete: results in {path} (overwrite=true runs it anew)")
    if not saved.get("complete") and all(p.name == RUN_FILE for p in path.iterdir()):
        logger.info("%s holds a run that never started; this run replaces it", path)
        return Output(path, False, identity, lock=lock, key=out_key)
    if diff := differences(before, now, may_change):
        more = "\n  - ..." if len(diff) > 12 else ""
        raise UserError(
            f"{path} holds another run ({len(diff)} difference(s)):\n  - "
            + "\n  - ".join(diff[:12])
            + f"{more}\nPass another {out_key}= folder, or overwrite=true to move the old run aside "
            f"to {path.name}.old-<time> and start anew."
        )
    if not resume:
        ways = f"pass {resume_hint} to continue it, another" if resume_hint else "pass another"
        raise UserError(
            f"{path} holds this same run already; {ways} {out_key}= folder, or overwrite=true to "
            "move it aside and start anew"
        )
    identity["started"] = saved.get("started", identity["started"])
    return Output(path, True, identity, lock=lock, key=out_key)


def refuse_inputs(target: Path, inputs: Mapping[str, str], key: str) -> None:
    """Refuse, before anything moves, a target that is one of the run's inputs (``role -> path``) or holds one
    (``overwrite=true`` would move it aside, and the run would read what it writes)."""
    real = os.path.realpath(target)
    for role, value in inputs.items():
        if not os.path.exists(os.path.expanduser(value)):
            continue
        source = os.path.realpath(os.path.expanduser(value))
        if source == real or source.startswith(real + os.sep):
            raise UserError(
                f"{key}={target} is or holds the run's input {role}={value}; write elsewhere: pass another {key}="
            )


def _as_saved(saved: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """The current inputs as compared with a saved run: a Hub model the saved run knew by name (it downloaded it) and
    now found in the cache is the same input."""
    return {
        k: saved[k]
        if (saved.get(k) or {}).keys() == {"path"} and v.get("repo", v.get("path")) == saved[k]["path"]
        else v
        for k, v in current.items()
    }


def differences(saved: Mapping[str, Any], current: Mapping[str, Any], may_change: Sequence[str] = ()) -> list[str]:
    """``key: old -> new`` for every leaf that differs, except keys under ``may_change`` and secrets.

    >>> differences({"a": 1, "t": {"lr": 0.1, "steps": 5}}, {"a": 1, "t": {"lr": 0.2, "steps": 9}}, ("t.steps",))
    ['t.lr: 0.1 -> 0.2']
    """
    old, new = _flat(json_safe(dict(saved))), _flat(json_safe(dict(current)))
    keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k) and not is_secret_key(k)]
    keys = [k for k in keys if not any(k == p or k.startswith(p + ".") for p in may_change)]
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys]


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if not (isinstance(node, Mapping) and node):
        return {prefix: node}
    return {k: v for key, value in node.items() for k, v in _flat(value, f"{prefix}.{key}".lstrip(".")).items()}


def path_inputs(settings: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Every setting whose value names an input (an existing file or folder, a dataset ``hf:...`` or ``NAME:FOLDER``,
    a Hub id in the cache), by its dotted key; outputs, ``image_root``, secrets and served models are not inputs.

    >>> path_inputs({"model": "/", "out": "/", "server": {"model": "/", "tokenizer": "/"}})
    {'model': '/', 'server.tokenizer': '/'}
    """
    found: dict[str, str] = {}
    for key, value in settings.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if (
            str(key) in NOT_INPUTS
            or is_secret_key(full)
            or str(key) == "model"
            and prefix.rsplit(".", 1)[-1] in SERVED
        ):
            continue
        if isinstance(value, Mapping | list | tuple):
            items = value.items() if isinstance(value, Mapping) else enumerate(value)
            found.update(path_inputs({str(k): v for k, v in items}, full))
        elif isinstance(value, str) and value and "://" not in value and "\n" not in value and len(value) < 4096:
            try:
                exists = Path(value).expanduser().exists() or parse_source(value) is not None
            except Exception:  # noqa: BLE001 - a name too long, a malformed source: not an input here
                exists = False
            if exists or hub_snapshot(value) is not None:
                found[full] = value
    return found


def may_change_keys(cls: type, prefix: str = "") -> tuple[str, ...]:
    """The settings a resumed run may change, from the fields of dataclass ``cls``: ``metadata={"may_change": True}``
    marks a key or section, a tuple marks keys below a field (a dict such as ``trainer``, a group such as
    ``reward``)."""
    from reward.core.config import field_types

    keys: list[str] = []
    types = field_types(cls)
    for f in dataclasses.fields(cls):
        full, mark = f"{prefix}.{f.name}" if prefix else f.name, f.metadata.get("may_change")
        if mark is True:
            keys.append(full)
        elif mark:
            keys += [f"{full}.{key}" for key in mark]
        elif dataclasses.is_dataclass(types.get(f.name)):
            keys += may_change_keys(types[f.name], full)
    return tuple(keys)


def check_output_file(
    path: str | Path,
    *,
    overwrite: bool = False,
    companions: Sequence[str] = (".png",),
    key: str = "out",
    inputs: Mapping[str, str] | None = None,
) -> Path:
    """A command writing one result file (and companions beside it, e.g. its chart): empty, a folder, or one of the
    run's inputs refused; an existing one replaced only with ``overwrite=true``, which moves it aside first."""
    if problem := output_problem(path, key, file=True):
        raise UserError(problem)
    path = Path(path)
    with os_errors(key, path):
        if path.is_dir():
            raise UserError(f"{key}={path} is a folder; pass the path of the file to write (e.g. {path}/result.json)")
        refuse_inputs(path, inputs or {}, key)
        check_writable(path.parent, key, shown=path)
        if path.exists() and not overwrite:
            raise UserError(f"{key}={path} exists already; pass another {key}=, or overwrite=true to move it aside")
        for other in [path, *(path.with_suffix(s) for s in companions)] if path.exists() else []:
            if other.exists():
                move_aside(other)
    return path


@contextlib.contextmanager
def os_errors(key: str, path: Any) -> Iterator[None]:
    """An ``OSError`` met while checking or making the output ``path`` of setting ``key`` (a read-only disk, no
    permission, a name the file system refuses) as one :class:`UserError` naming it."""
    try:
        yield
    except OSError as err:
        where = err.filename if err.filename is not None else path
        raise UserError(
            f"{key}={path}: {where}: {err.strerror or err}; pass another {key}= that this user can write"
        ) from None


def _saved(path: Path) -> dict[str, Any] | None:
    file = path / RUN_FILE
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserError(f"{file} is unreadable ({err}); pass overwrite=true to move the folder aside") from None
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else None


def move_aside(path: Path) -> Path:
    """``path`` renamed to ``NAME.old-<time>`` (never deleted)."""
    stamp, n = time.strftime("%Y%m%d-%H%M%S"), 0
    target = path.with_name(f"{path.name}.old-{stamp}")
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.old-{stamp}-{n}")
    os.replace(path, target)
    logger.warning("overwrite=true: moved the old %s aside to %s", path, target)
    return target


def check_writable(path: Path, key: str = "out", *, shown: Path | None = None) -> None:
    """Refuse, before anything loads, an output that cannot be written: under a file, or in a folder this process
    cannot create files in (a probe file is made and removed in the nearest existing folder)."""
    target = path
    while not target.exists() and target.parent != target:
        target = target.parent
    if not target.is_dir():
        raise UserError(f"{key}={shown or path}: {target} is a file, so no folder can be made under it")
    try:
        fd, probe = tempfile.mkstemp(dir=target, prefix=".write-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise UserError(
            f"{key}={shown or path}: cannot write in {target} ({err.strerror or err}); pass an "
            f"{key}= folder this user can write to"
        ) from None


def lock_output(path: Path, key: str = "out") -> Any:
    """``filelock``'s lock on the output folder (main process of a launch only), shared within a process; a folder
    in use by another run is refused at once. The lock file ``.NAME.lock`` lies beside the folder (inside it when the
    parent cannot be written), named from the folder's real path so that every spelling takes the same lock."""
    if not is_main_process():
        return None
    from filelock import FileLock, Timeout

    real = Path(os.path.realpath(path))
    name = f".{real.name}.lock" if len(real.name) < 240 else f".{hashlib.sha1(real.name.encode()).hexdigest()}.lock"
    parent = real.parent if not real.parent.exists() or os.access(real.parent, os.W_OK) else real
    file = str(parent / name)
    lock = FileLock(file, timeout=0, thread_local=False, is_singleton=True)  # one lock object per file in a process
    if lock.is_locked:  # this process holds it already
        return lock
    parent.mkdir(parents=True, exist_ok=True)
    if os.path.islink(file) or os.path.lexists(file) and not os.path.isfile(file):
        kind = "a symlink" if os.path.islink(file) else "a folder" if os.path.isdir(file) else "not a plain file"
        raise UserError(
            f"{key}={path}: its lock path {file} is {kind}, not a lock file; remove it if no run is using it, or "
            f"pass another {key}= folder"
        )
    try:
        lock.acquire()
    except Timeout:
        try:
            held_by = Path(file).read_text(encoding="utf-8", errors="replace").strip() or "another process"
        except OSError:
            held_by = "another process"
        raise UserError(
            f"{key}={path} is in use by another run ({held_by}); wait for it to end (the lock goes with it, even if "
            f"it is killed), or pass another {key}= folder"
        ) from None
    except OSError as err:
        raise UserError(f"{key}={path}: cannot take its lock {file} ({err.strerror or err})") from None
    started = time.strftime("%Y-%m-%dT%H:%M:%S")  # who holds it, for the refusal of a second run
    command = " ".join([Path(sys.executable).name, *sys.argv])
    Path(file).write_text(f"PID {os.getpid()} on {socket.gethostname()}, started {started}, running: {command}")
    return lock
