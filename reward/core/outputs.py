"""One output-folder policy for every command that writes a folder: a new folder, the same run resumed, or a refusal.

A run is identified by its command, its settings (secrets shown only as ``<secret given>``: :mod:`reward.core.secrets`)
and the content of everything it reads (:mod:`reward.core.fingerprints`: the inputs a command names and every setting
naming a file, folder, dataset or cached Hub model; a manifest with the images its rows name; weights by their bytes),
written to ``OUT/run.json`` when the folder is created. Given an existing folder, a command:

- resumes it only when asked to (``resume``) and ``run.json`` describes the same run (every setting equal except a
  short, explicit list of keys that may change, such as ``trainer.max_steps`` or logging, marked on the settings'
  fields: :func:`may_change_keys`);
- else refuses, naming the keys that differ and the ways out: ``out=`` elsewhere, or ``overwrite=true``, which moves
  the old folder aside to ``OUT.old-<time>`` (nothing is deleted);
- never writes into a folder it did not make (no ``run.json``) unless ``overwrite=true`` moves that aside too;
- stops at once, like ``make``, when the identical command already completed there (:class:`RunComplete`: "already
  complete", exit status 0), and replaces a run that never started (a folder holding only ``run.json``).

Every result file records the run it came from (:meth:`Output.provenance`), so a ``metrics.json`` names its model and
data. Before any of this, the folder must be writable (a read-only mount or a path under a file is refused before a
model loads), and the run takes an exclusive lock on it (``.OUT.lock`` beside it, named from the folder's real path, so
a symlink or another spelling of the folder takes the same lock) held until the command ends, however it ends: a
second run into the same folder is refused, naming the holder (:func:`lock_output`).

Example:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     first = prepare_output(f"{d}/run", "evaluate", {"model": "a", "batch_size": 8})
    ...     _ = (first.path / "scores.jsonl").write_text("{}")  # the run starts writing
    ...     again = prepare_output(f"{d}/run", "evaluate", {"model": "a", "batch_size": 16}, resume=True,
    ...                            may_change=("batch_size",))
    ...     first.state, again.state
    ('new', 'resumed')
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import stat
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reward.core.errors import UserError
from reward.core.secrets import redact, redact_argv, redact_text
from reward.data.files import atomic_write_json, json_safe

logger = logging.getLogger(__name__)

RUN_FILE = "run.json"
SCHEMA = "perceptual-rewards-run/1"


class OutputFolderError(UserError):
    """An output folder that holds another run (or files this command did not write)."""


class RunComplete(Exception):  # noqa: N818 - not an error: the command has nothing to do
    """The identical command already ran to completion in this folder (``run.json``: ``"complete": true``), as
    ``make`` finds a target up to date; :func:`reward.core.cli.main` prints the message and exits with status 0."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"already complete: results in {path} (overwrite=true runs it anew)")
        self.path = path


def fingerprint(path: str | Path | None, *, roots: Sequence[str | Path] = ()) -> dict[str, Any] | None:
    """What identifies an input: its content (:func:`reward.core.fingerprints.fingerprint`: a file's SHA-256 and,
    for a manifest, the files its rows name; a folder's files; a ``datasets`` dataset; a cached Hub snapshot), with
    its resolved path for the reader. ``None`` for no input; a value naming nothing readable (a stream name such as
    ``synthetic``, a Hub id not in the cache) is kept as given."""
    from reward.core.fingerprints import fingerprint as content

    return content(path, roots=roots)


def _names_input(value: str) -> bool:
    """Whether a setting's value names something a run reads: an existing file or folder, a ``datasets`` dataset
    ``hf:...``, a public dataset ``NAME:FOLDER[:SPLIT]`` or a Hub model id held in the Hugging Face cache."""
    if not value or "://" in value or "\n" in value or "\0" in value or len(value) > 4096:
        return False
    try:
        if Path(value).expanduser().exists():
            return True
    except (OSError, ValueError):  # a name too long for the file system, and the like: not a file
        return False
    from reward.core.fingerprints import hub_snapshot
    from reward.data.datasets import parse_source

    try:
        if parse_source(value) is not None:
            return True
    except Exception:  # noqa: BLE001 - a malformed source: the command refuses it with its own message
        return False
    return hub_snapshot(value) is not None


SERVED = ("server", "servers")  # sections whose ``model`` is what a server runs: never read here


def path_inputs(settings: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Every setting whose value names an input (an existing file or folder such as a model, a scorer, a protocol or
    a manifest; a dataset ``hf:...`` or ``NAME:FOLDER``; a cached Hub model id), by its dotted key: the inputs of a
    run to fingerprint. Secret settings (:func:`reward.core.secrets.is_secret_key`) are never read, nor the model
    a ``server`` section names (served elsewhere: a local copy of it is not what the run reads; its ``tokenizer``
    is).

    >>> path_inputs({"model": "/", "server": {"base_url": "http://x", "model": "/", "tokenizer": "/"}})
    {'model': '/', 'server.tokenizer': '/'}
    """
    from reward.core.secrets import is_secret_key

    out: dict[str, str] = {}
    for key, value in settings.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if str(key) == "model" and prefix.rsplit(".", 1)[-1] in SERVED:
            continue
        if isinstance(value, Mapping):
            out.update(path_inputs(value, full))
        elif isinstance(value, list | tuple):
            out.update(path_inputs({str(i): v for i, v in enumerate(value)}, full))
        elif isinstance(value, str) and not is_secret_key(full) and _names_input(value):
            out[full] = value
    return out


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping) and node:
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: node}


def _matches(key: str, patterns: Sequence[str]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in patterns)


def may_change_keys(cls: type, prefix: str = "") -> tuple[str, ...]:
    """The settings of dataclass ``cls`` that a resumed run may change (dotted keys for :func:`prepare_output`), read
    from its fields: ``metadata={"may_change": True}`` marks a key (or a whole section), a tuple marks keys below a
    field (the entries of a dict such as ``trainer``, the keys of a config group such as ``reward``); nested
    settings dataclasses are read too.

    >>> from dataclasses import field, make_dataclass
    >>> Eval = make_dataclass("Eval", [("every", int, field(default=10, metadata={"may_change": True}))])
    >>> Run = make_dataclass("Run", [
    ...     ("lr", float, 0.1),
    ...     ("eval", Eval, field(default_factory=Eval)),
    ...     ("trainer", dict, field(default_factory=dict, metadata={"may_change": ("max_steps",)})),
    ... ])
    >>> may_change_keys(Run)
    ('eval.every', 'trainer.max_steps')
    """
    import dataclasses

    from reward.core.config import field_types, is_dataclass_type

    keys: list[str] = []
    types = field_types(cls)
    for f in dataclasses.fields(cls):
        full = f"{prefix}.{f.name}" if prefix else f.name
        mark = f.metadata.get("may_change")
        if mark is True:
            keys.append(full)
        elif mark:
            keys += [f"{full}.{key}" for key in mark]
        elif is_dataclass_type(types.get(f.name)):
            keys += may_change_keys(types[f.name], full)
    return tuple(keys)


def resume_field(help: str, default: str = "auto") -> Any:
    """A command's ``resume`` setting (auto | never, :func:`resume_mode`): it may differ on a resumed run."""
    return field(default=default, metadata={"help": help, "may_change": True})


def overwrite_field(help: str) -> Any:
    """A command's ``overwrite`` setting (an earlier run moved aside, never deleted): it may differ on a rerun."""
    return field(default=False, metadata={"help": help, "may_change": True})


def differences(saved: Mapping[str, Any], current: Mapping[str, Any], may_change: Sequence[str] = ()) -> list[str]:
    """``key: old -> new`` for every leaf setting or input that differs, except keys under ``may_change`` and secrets
    (a token or key given, changed or dropped never makes another run, and no value of one is ever shown).

    >>> differences({"a": 1, "t": {"lr": 0.1, "steps": 5}}, {"a": 1, "t": {"lr": 0.2, "steps": 9}}, ("t.steps",))
    ['t.lr: 0.1 -> 0.2']
    """
    from reward.core.secrets import is_secret_key

    old, new = _flatten(json_safe(dict(saved))), _flatten(json_safe(dict(current)))
    keys = sorted(set(old) | set(new))
    changed = [k for k in keys if old.get(k) != new.get(k) and not _matches(k, may_change) and not is_secret_key(k)]
    return [redact_text(f"{k}: {old.get(k)!r} -> {new.get(k)!r}") for k in changed]


@dataclass
class Output:
    """A checked output folder: ``state`` is ``new`` or ``resumed``; ``replace``: an old folder is moved aside on
    :meth:`create` (``overwrite=true``); ``moved_aside``: where it went."""

    path: Path
    state: str
    identity: dict[str, Any] = field(default_factory=dict)
    replace: bool = False
    moved_aside: Path | None = None
    lock: RunLock | None = field(default=None, repr=False, compare=False)  # held while this Output lives

    @property
    def resumed(self) -> bool:
        return self.state == "resumed"

    def create(self) -> None:
        """Move an old folder aside (``overwrite=true``), create the folder and write ``run.json`` (new runs)."""
        real = Path(os.path.realpath(self.path))  # a symlink to the folder (even one to a folder not made yet)
        if self.replace and real.is_dir():
            self.moved_aside = _move_aside(real)
        if self.resumed:
            logger.info("resuming the run in %s", self.path)
            if _saved_identity(self.path) != self.identity:  # running again: its settings, not complete
                atomic_write_json(self.path / RUN_FILE, self.identity)
            return
        real.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path / RUN_FILE, self.identity)

    def finish(self) -> None:
        """Mark the run complete in ``run.json``: the identical command run again then stops at once
        (:class:`RunComplete`). An input whose content was unknown when the run started (a Hub model or dataset
        downloaded by the run) is fingerprinted now."""
        inputs = dict(self.identity.get("inputs") or {})
        for role, record in inputs.items():
            if _unknown(record) and _main_rank():
                inputs[role] = fingerprint(record["path"]) or record
        self.identity = {**self.identity, "inputs": inputs}
        atomic_write_json(self.path / RUN_FILE, {**self.identity, "complete": True})

    def __getstate__(self) -> dict[str, Any]:
        """Sent to the other processes of a launch without the lock (only the main process holds it)."""
        return {**self.__dict__, "lock": None}

    def provenance(self) -> dict[str, Any]:
        """What a result file records about the run: the command, its inputs (model, data) and when it started."""
        return {k: self.identity.get(k) for k in ("command", "inputs", "started")}


def prepare_output(
    out: str | Path,
    command: str,
    settings: Mapping[str, Any],
    inputs: Mapping[str, str | Path | None] | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    may_change: Sequence[str] = (),
    main_process: bool = True,
    resume_hint: str | None = "resume=true",
    out_key: str = "out",
) -> Output:
    """Create ``out`` for a new run, or accept it for the same run resumed, or refuse (see the module docstring).

    ``settings``: everything that makes the run what it is (nested mappings compared key by key); ``inputs``: role ->
    path (``{"model": ..., "data": ...}``), fingerprinted; ``may_change``: setting keys (dotted, prefixes allowed) that
    may differ on resume. Under a distributed launch, call :func:`check_output` on every process, wait for all, then
    :meth:`Output.create` on the main process only (``main_process=False`` only checks). ``resume_hint`` and
    ``out_key``: the command's own spelling of "continue this run" and of its output setting, which a refusal names
    (``resume_hint=None``: a command that cannot continue a run).
    """
    output = check_output(
        out,
        command,
        settings,
        inputs,
        resume=resume,
        overwrite=overwrite,
        may_change=may_change,
        resume_hint=resume_hint,
        out_key=out_key,
    )
    if main_process:
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
    """What :func:`prepare_output` decides, without writing anything (every process of a launch can call it).
    ``resume_hint``: the setting that continues a run (``None``: the command cannot, and its refusal does not offer
    it); ``out_key``: the command's output setting (``out`` or ``output_dir``), as refusals name it."""
    path = Path(out)
    identity = {
        "schema": SCHEMA,
        "command": command,
        "settings": redact(json_safe(dict(settings))),
        "inputs": {},
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    if path.exists() and not path.is_dir():
        raise OutputFolderError(f"{out_key}={path} is a file; pass a folder to write into (it will be created)")
    check_writable(path, out_key)
    lock = lock_output(path, out_key)
    occupied = path.is_dir() and any(p.name != INNER_LOCK for p in path.iterdir())
    saved = _saved_identity(path) if occupied and not overwrite else None
    if occupied and not overwrite and saved is None:
        raise OutputFolderError(
            f"{path} already holds files that this command did not write (no {RUN_FILE}); pass another "
            f"{out_key}= folder, or overwrite=true to move it aside first"
        )
    identity["inputs"] = run_inputs(path, settings, inputs, saved, out_key)
    if saved is None:  # a new folder, or an old one moved aside (overwrite=true)
        return Output(path, "new", identity, replace=occupied, lock=lock)
    saved_inputs = saved.get("inputs") or {}
    before = {"command": saved.get("command"), **redact(saved.get("settings", {})), "inputs": saved_inputs}
    now = {"command": command, **identity["settings"], "inputs": _as_saved(saved_inputs, identity["inputs"])}
    if saved.get("complete") and not differences(before, now, ("resume", "overwrite")):
        raise RunComplete(path)
    if not saved.get("complete") and _never_started(path):  # a run that failed before writing anything
        logger.info("%s holds a run that never started; this run replaces it", path)
        return Output(path, "new", identity, lock=lock)
    diff = differences(before, now, may_change)
    if diff:
        raise OutputFolderError(
            f"{path} holds another run ({len(diff)} difference(s)):\n  - "
            + "\n  - ".join(diff[:12])
            + ("\n  - ..." if len(diff) > 12 else "")
            + f"\nPass another {out_key}= folder, or overwrite=true to move the old run aside to "
            f"{path.name}.old-<time> and start anew."
        )
    if not resume:  # (a command that resumes by itself, e.g. the demo, passes resume=True and no hint)
        ways = f"pass {resume_hint} to continue it, another" if resume_hint else "pass another"
        raise OutputFolderError(
            f"{path} holds this same run already; {ways} {out_key}= folder, or overwrite=true to move it aside and "
            "start anew"
        )
    identity["started"] = saved.get("started", identity["started"])
    return Output(path, "resumed", identity, lock=lock)


# settings naming what a command writes (or a cache it fills): never its inputs
OUTPUT_KEYS = ("out", "output", "output_dir", "logging_dir", "cache_dir", "offload_folder")


def run_inputs(
    out: Path,
    settings: Mapping[str, Any],
    inputs: Mapping[str, str | Path | None] | None,
    saved: Mapping[str, Any] | None = None,
    out_key: str = "out",
) -> dict[str, Any]:
    """The fingerprints of everything a run reads: the ``inputs`` named (role -> path or source) and every other
    setting naming an input (:func:`path_inputs`), except what the command writes (``out`` and the like, anything in
    the output folder). Computed by the main process only: the other processes of a launch follow it and take the
    fingerprints its ``run.json`` records (their own check then compares the settings alone)."""
    named = dict(inputs or {})
    out_real = os.path.realpath(out)

    def written(key: str, value: Any) -> bool:
        leaf = key.rsplit(".", 1)[-1]
        if leaf in OUTPUT_KEYS or key == out_key:
            return True
        real = os.path.realpath(os.path.expanduser(str(value)))
        return real == out_real or real.startswith(out_real + os.sep)

    given = {os.path.realpath(os.path.expanduser(str(v))) for v in named.values() if v is not None}
    for key, value in path_inputs(settings).items():
        if key not in named and not written(key, value) and os.path.realpath(os.path.expanduser(value)) not in given:
            named[key] = value
    if not _main_rank():
        saved_inputs = dict((saved or {}).get("inputs") or {})
        return {role: saved_inputs.get(role, {"path": str(p)} if p is not None else None) for role, p in named.items()}
    return {role: fingerprint(p) for role, p in sorted(named.items())}


def _unknown(record: Any) -> bool:
    """An input recorded by its name alone (nothing readable there when the run started: a Hub id not in the cache)."""
    return isinstance(record, Mapping) and set(record) == {"path"}


def _downloaded(record: Any) -> bool:
    return isinstance(record, Mapping) and ("repo" in record or "datasets_fingerprint" in record)


def _as_saved(saved: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """The current inputs as compared with a saved run: a Hub model or dataset the saved run knew by its name alone
    (absent from the cache then: the run downloaded it) and now found in the cache is the same input."""
    out = dict(current)
    for role, record in current.items():
        old = saved.get(role)
        if _downloaded(record) and (old is None or _unknown(old)):
            name = record.get("repo", record.get("path"))
            if old is None or old["path"] == name:
                out[role] = old
    return {role: record for role, record in out.items() if record is not None or role in saved}


def _main_rank() -> bool:
    return os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) in ("0", "")


def check_output_file(path: str | Path, *, overwrite: bool = False, companions: Sequence[str] = (".png",)) -> Path:
    """A command writing one result file (and companions beside it, e.g. its chart): refuse to replace an existing
    one unless ``overwrite=true``, which moves it (and its companions) aside to ``NAME.old-<time>``."""
    path = Path(path)
    if path.is_dir():
        raise OutputFolderError(
            f"out={path} is a folder; pass the path of the file to write (e.g. {path}/result.json)"
        )
    check_writable(path.parent, "out", shown=path)
    if path.exists():
        if not overwrite:
            raise OutputFolderError(
                f"out={path} exists already; pass another out=, or overwrite=true to move the old file aside"
            )
        for other in [path, *(path.with_suffix(s) for s in companions)]:
            if other.exists():
                _move_aside(other)
    return path


def _never_started(path: Path) -> bool:
    return all(p.name == RUN_FILE or p.name.startswith(".") for p in path.iterdir())


def _saved_identity(path: Path) -> dict[str, Any] | None:
    file = path / RUN_FILE
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise OutputFolderError(
            f"{file} is unreadable ({err}); pass overwrite=true to move the folder aside"
        ) from None
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else None


def _move_aside(path: Path) -> Path:
    target = path.with_name(f"{path.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}.old-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
        n += 1
    os.replace(path, target)
    logger.warning("overwrite=true: moved the old %s aside to %s", path, target)
    return target


INNER_LOCK = ".run.lock"  # the lock inside the folder, when its parent cannot be written


def check_writable(path: Path, out_key: str = "out", *, shown: Path | None = None) -> None:
    """Refuse now, before anything loads, an output ``path`` that cannot be written: under a file, or in a folder
    this process cannot create files in (read-only mount, permissions). A probe file is created and removed in
    ``path`` or, when it does not exist yet, in its nearest existing parent."""
    shown = shown or path
    target = path
    while not target.exists() and target.parent != target:
        target = target.parent
    if not target.is_dir():
        raise OutputFolderError(
            f"{out_key}={shown}: {target} is a file, so no folder can be made under it; pass a folder"
        )
    try:
        fd, probe = tempfile.mkstemp(dir=target, prefix=".write-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise OutputFolderError(
            f"{out_key}={shown}: cannot write in {target} ({err.strerror or err}); pass an {out_key}= folder this "
            "user can write to"
        ) from None


class RunLock:
    """An exclusive lock on an output folder held by this process (released when the last :class:`Output` holding
    it is gone, or when the process ends, however it ends)."""

    def __init__(self, lock: Any, file: Path) -> None:
        self.file = file
        self._lock = lock
        self._pid = os.getpid()  # a forked child never releases its parent's lock

    def release(self) -> None:
        """Remove the lock file while still holding it (no litter beside the folder), then let go."""
        if self._lock.is_locked and os.getpid() == self._pid:
            self.file.unlink(missing_ok=True)
            self._lock.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001 - at interpreter exit; the lock goes with the process anyway
            pass


_HELD: weakref.WeakValueDictionary[str, RunLock] = weakref.WeakValueDictionary()
_EXIT_HANDLER = False


def _release_all() -> None:
    """At exit, however the command ended (a traceback keeps its :class:`Output` alive to the end), every lock this
    process holds is released and its file removed (registered after filelock's own exit handler, so it runs
    first: the file is removed while still held)."""
    for held in list(_HELD.values()):
        try:
            held.release()
        except OSError:  # pragma: no cover - the lock goes with the process anyway
            pass


EXIT_SIGNALS = ("SIGTERM", "SIGHUP")  # a run stopped by these ends as on Ctrl-C: its lock file goes with it


def _exit_on_signals() -> None:
    """A run killed by ``kill`` (SIGTERM) or a closed terminal (SIGHUP) exits through Python (status 128 + the
    signal's number), so that its exit handlers remove the lock file; a handler set by someone else is kept."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    for name in EXIT_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None and signal.getsignal(number) is signal.SIG_DFL:
            signal.signal(number, _exit_by_signal)


def _exit_by_signal(number: int, frame: Any) -> None:
    raise SystemExit(128 + number)


def _lock_file(path: Path) -> Path:
    """``PARENT/.NAME.lock`` beside the folder (so that moving the folder aside keeps it locked), named from the
    folder's real path: every spelling of one folder (a symlink to it, ``..``, a symlinked parent) takes the same lock.
    Inside the folder when its parent cannot be written."""
    path = Path(os.path.realpath(path))
    parent = path.parent
    beside = parent / f".{path.name}.lock"
    if path.name and (not parent.exists() or os.access(parent, os.W_OK)):
        return beside
    return path / INNER_LOCK


def _holder(lock_file: Path) -> str:
    try:
        info = json.loads(lock_file.read_text(encoding="utf-8"))
        return f"PID {info['pid']} on {info['host']}, started {info['started']}, running: {info['command']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (its details could not be read)"


def lock_output(path: Path, out_key: str = "out") -> RunLock | None:
    """Take the exclusive lock on the output folder ``path`` for this run (main process of a launch only: the other
    processes follow it), or refuse at once naming the run that holds it. Taken again by the same process, the lock
    is shared."""
    if not _main_rank():
        return None
    from filelock import FileLock, Timeout

    global _EXIT_HANDLER
    if not _EXIT_HANDLER:
        _EXIT_HANDLER = bool(atexit.register(_release_all))
        _exit_on_signals()
    file = _lock_file(path)
    held = _HELD.get(str(file))
    if held is not None:
        return held
    file.parent.mkdir(parents=True, exist_ok=True)
    _check_lock_file(file, path, out_key)
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "command": " ".join(redact_argv([Path(sys.executable).name, *sys.argv])),
    }

    def write_holder(fd: int) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode("utf-8"), 0)

    lock = FileLock(str(file), timeout=0, thread_local=False, on_acquired=write_holder)
    try:
        lock.acquire()
    except Timeout:
        raise OutputFolderError(
            f"{out_key}={path} is in use by another run ({_holder(file)}). Wait for it to end (the lock goes with "
            f"it, even if it is killed), or pass another {out_key}= folder."
        ) from None
    except OSError as err:
        raise OutputFolderError(
            f"{out_key}={path}: cannot take its lock {file} ({err.strerror or err}); remove that path if no run is "
            f"using it, or pass another {out_key}= folder"
        ) from None
    held = _HELD[str(file)] = RunLock(lock, file)
    return held


def _check_lock_file(file: Path, path: Path, out_key: str) -> None:
    """Refuse a lock path that is something else than a plain file (a folder, a symlink: never followed)."""
    try:
        mode = os.lstat(file).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    kind = "a symlink" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else "not a plain file"
    raise OutputFolderError(
        f"{out_key}={path}: its lock path {file} is {kind}, not a lock file; remove it if no run is using it, or pass "
        f"another {out_key}= folder"
    )
