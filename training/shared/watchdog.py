"""A run that makes no progress for a set time says where it waits and exits, instead of hanging.

A multi-process launch can wait forever: a peer that died inside a collective, a DeepSpeed op build waiting on a lock
an interrupted build left behind. :class:`Watchdog` is told of progress (:meth:`Watchdog.beat`: each phase of the
set-up, each training step through :class:`WatchdogCallback`); when nothing happens for ``timeout_s`` it writes every
thread's stack (``faulthandler``), then one line naming what the process was doing, and exits with status 2 (the
launcher then stops the other processes).

Example:
    >>> with Watchdog(0) as dog:  # 0: off
    ...     dog.beat("loading the policy")
    >>> dog.doing
    'loading the policy'
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from transformers import TrainerCallback


class Watchdog:
    """Exits this process (status 2) after ``timeout_s`` seconds without a :meth:`beat`; ``timeout_s=0``: off."""

    def __init__(
        self,
        timeout_s: float,
        *,
        setting: str = "stall_timeout_s",
        stream: TextIO | None = None,
        exit_fn: Callable[[int], Any] = os._exit,
    ) -> None:
        self.timeout_s = float(timeout_s)
        self.setting = setting
        self.stream = stream or sys.stderr
        self.exit_fn = exit_fn
        self.doing = "starting"
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self, doing: str | None = None) -> None:
        """Progress was made; ``doing`` names what comes next (shown if the process then waits too long)."""
        self._last = time.monotonic()
        if doing is not None:
            self.doing = doing

    def __enter__(self) -> Watchdog:
        if self.timeout_s > 0:
            self._last = time.monotonic()
            self._thread = threading.Thread(target=self._watch, name="stall-watchdog", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def _watch(self) -> None:
        poll = min(max(self.timeout_s / 4, 0.05), 5.0)
        while not self._stop.wait(poll):
            idle = time.monotonic() - self._last
            if idle > self.timeout_s:
                self._bark(idle)
                return

    def _bark(self, idle: float) -> None:
        rank = os.environ.get("RANK", "0")
        faulthandler.dump_traceback(file=self.stream, all_threads=True)
        self.stream.write(
            f"no progress for {idle:.0f} s in process {rank} while {self.doing} (stacks above: where it waits); "
            f"stopping. A peer process may have failed (see its error), or a step is slower than "
            f"{self.setting}={self.timeout_s:g}: raise it (0: no limit)\n"
        )
        self.stream.flush()
        self.exit_fn(2)


class WatchdogCallback(TrainerCallback):
    """Tells a :class:`Watchdog` of every training step, log and evaluation."""

    def __init__(self, dog: Watchdog) -> None:
        self.dog = dog

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.dog.beat(f"training step {state.global_step + 1}")

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.dog.beat()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.dog.beat(f"after training step {state.global_step}")

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.dog.beat()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.dog.beat("saving after training")
