"""Decisions a launch of several processes must take once: the main process decides, the others are told.

An output folder is prepared (new, resumed or refused) by the main process alone: were every process to look for
itself, one could see the folder the main process has just created and take it for an earlier run. The answer, or
the error, reaches every process, so a refusal stops all of them with the same message instead of leaving some
waiting for the others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def on_main(fn: Callable[[], T]) -> T:
    """``fn()`` on the main process, its result (or exception) on every process; a plain call in a single one."""
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    state = PartialState()
    if state.num_processes == 1:
        return fn()
    box: list[Any] = [None]
    if state.is_main_process:
        try:
            box = [("ok", fn())]
        except Exception as err:  # noqa: BLE001 - every process must learn of it, or the others wait forever
            box = [("error", err)]
    broadcast_object_list(box, from_process=0)
    kind, value = box[0]
    if kind == "error":
        raise value
    return value


def wait_for_everyone() -> None:
    from accelerate import PartialState

    PartialState().wait_for_everyone()


def gather(value: Any) -> list[Any]:
    """Every process's ``value``, in process order (a one-item list in a single process). Collective."""
    from accelerate import PartialState
    from accelerate.utils import gather_object

    if PartialState().num_processes == 1:
        return [value]
    return gather_object([value])
