"""A run that makes no progress for ``timeout_s`` (a peer dead inside a collective, a stale DeepSpeed build lock)
dumps every thread's stack (``faulthandler``), says in one line what it was doing and the setting to raise, and
exits 2 (the launcher stops the others). Progress: :meth:`Watchdog.beat`, each set-up phase and training step.

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
from typing import Any

from transformers import TrainerCallback


class Watchdog(TrainerCallback):
    """Exits this process (status 2) after ``timeout_s`` seconds without a :meth:`beat` (``0``: off); as a trainer
    callback, every step, micro-step, log and the end of training is one."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = float(timeout_s)
        self.doing = "starting"
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="stall-watchdog", daemon=True)

    def beat(self, doing: str | None = None) -> None:
        """Progress was made; ``doing`` names what comes next (shown if the process then waits too long)."""
        self._last = time.monotonic()
        self.doing = doing or self.doing

    def __enter__(self) -> Watchdog:
        if self.timeout_s > 0:
            self.beat()
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()  # gone before the interpreter shuts down

    def _watch(self) -> None:
        while not self._stop.wait(max(self._last + self.timeout_s - time.monotonic(), 0.0)):
            idle = time.monotonic() - self._last
            if idle >= self.timeout_s:
                faulthandler.dump_traceback(all_threads=True)
                sys.stderr.write(
                    f"no progress for {idle:.0f} s in process {os.environ.get('RANK', '0')} while {self.doing} "
                    "(stacks above: where it waits); stopping. A peer process may have failed (see its error), or "
                    f"a step is slower than stall_timeout_s={self.timeout_s:g}: raise it (0: no limit)\n"
                )
                sys.stderr.flush()
                os._exit(2)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.beat(f"training step {state.global_step + 1}")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.beat(f"after training step {state.global_step}")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.beat("saving after training")

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.beat()

    on_log = on_substep_end
