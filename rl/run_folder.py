"""What GRPO and Best-of-N share about their output folder: the inputs a run reads (its identity and provenance) and
its preparation (new, resumed, moved aside, or refused), by the main process alone (:func:`on_main`: another could
take the folder it just made for an earlier run), the answer or the error reaching every process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from reward.core.config import to_plain
from reward.core.outputs import Output, prepare_output
from reward.integrations.reward_set import reward_configs

T = TypeVar("T")

MODEL_KEYS = ("model", "protocol", "fusion", "memory")  # config keys of rewards naming inputs


def run_inputs(
    files: Mapping[str, Any], rewards: Sequence[tuple[str, Sequence[Any]]], generator: Any
) -> dict[str, Any]:
    """Every input a run reads: ``files`` as given, then per role (``rewards``: role and its reward entries) each
    reward's model files as ``ROLE.NAME.KEY`` (``ROLE{i}`` when a role has an index), then the generator's model.

    >>> run_inputs({"data": "t.jsonl"}, [("reward", [{"name": "sa-iqa", "model": "/m"}])], {"path": "/g"})
    {'data': 't.jsonl', 'reward.sa-iqa.model': '/m', 'generator': '/g'}
    """
    inputs: dict[str, Any] = dict(files)
    for role, entries in rewards:
        indexed = role.endswith("{i}")
        for i, entry in enumerate(entries):
            label = role.replace("{i}", str(i)) if indexed else role
            ((name, models),) = reward_models([entry], where=label)
            inputs.update({f"{label}.{name}.{key}": path for key, path in models.items()})
    gen = to_plain(generator) if generator else {}
    if isinstance(gen.get("path"), str):
        inputs["generator"] = gen["path"]
    return inputs


def reward_models(entries: Sequence[Any], where: str = "reward") -> list[tuple[str, dict[str, str]]]:
    """Each reward entry's name and the model files its config names (``MODEL_KEYS``).

    >>> reward_models(["qbench", {"name": "sa-iqa", "model": "/scorer", "batch_size": 4}])
    [('qbench', {}), ('sa-iqa', {'model': '/scorer'})]
    """
    return [
        (name, {k: cfg[k] for k in MODEL_KEYS if isinstance(cfg.get(k), str)}) for name, cfg in reward_configs(entries)
    ]


def settings_record(settings: Any, *, leave_out: Sequence[str] = ()) -> dict[str, Any]:
    """A settings dataclass as plain JSON values (what the folder's identity compares)."""
    plain = json.loads(json.dumps(asdict(settings), default=str))
    return {k: v for k, v in plain.items() if k not in leave_out}


def prepare_run_folder(
    out: Path,
    command: str,
    settings: dict[str, Any],
    inputs: dict[str, Any],
    *,
    create: bool,
    overwrite: bool,
    **rules: Any,
) -> Output | None:
    """The run's output folder (``reward.core.outputs.prepare_output``: ``rules`` are its resume / may_change /
    hint keywords). With ``create=False`` only a refusal is checked and nothing is written, so that it comes before
    any model loads (a folder created then would hold a run whose models never loaded)."""
    if not create and (overwrite or not (out.is_dir() and any(out.iterdir()))) and not out.is_file():
        return None
    return prepare_output(out, command, settings, inputs, overwrite=overwrite, **rules)


def on_main(fn: Callable[[], T]) -> T:
    """``fn()`` on the main process, its result (or exception) on every process (accelerate's broadcast; a plain call
    in a single process)."""
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    box: list[Any] = [None]
    if PartialState().is_main_process:
        try:
            box = [(True, fn())]
        except Exception as err:  # noqa: BLE001 - every process must learn of it, or the others wait forever
            box = [(False, err)]
    ((ok, value),) = broadcast_object_list(box, from_process=0)
    if not ok:
        raise value
    return value
