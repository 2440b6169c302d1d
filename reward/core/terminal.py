"""Ctrl-C under ``accelerate launch`` of one process reaches the command alone, which says where the run stands.

A terminal sends Ctrl-C's SIGINT to its foreground process group: under ``accelerate launch`` of one process, the
launcher and the command. The command prints its one ``interrupted:`` line and exits 130; the launcher, interrupted
in its wait for it, ended in a ``KeyboardInterrupt`` traceback after that line. So a command started by accelerate's
launcher in the foreground of a terminal moves to a process group of its own and holds the terminal's foreground
while it runs: Ctrl-C reaches it alone, and the launcher sees it exit (``-q``: accelerate's status 1, nothing
printed). Ctrl-Z stops the launcher and the command together, as the shell's one job (``fg`` and ``bg`` continue
both); at exit the terminal goes back to the launcher's group. Several processes (``WORLD_SIZE`` > 1) run in
sessions of their own, without the terminal: torch's launcher stops them itself.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
from collections.abc import Iterator


def hold_terminal() -> None:
    """Take the terminal's foreground when accelerate's launcher started this process in it (see the module)."""
    launched = "ACCELERATE_USE_CPU" in os.environ and os.environ.get("WORLD_SIZE", "1") == "1"
    if os.name != "posix" or not launched or not os.isatty(2):  # (its messages go elsewhere: a log, a test's pipe)
        return
    try:
        tty = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)  # the controlling terminal, if there is one
    except OSError:
        return
    launcher = os.getpgrp()
    try:
        if os.tcgetpgrp(tty) != launcher or os.getpgid(os.getppid()) != launcher:  # a background job, or no launcher
            os.close(tty)
            return
        _foreground(tty)
    except OSError:
        os.close(tty)
        return
    atexit.register(_give_back, tty, launcher)
    signal.signal(signal.SIGTSTP, lambda *_: _suspend(tty, launcher))
    signal.signal(signal.SIGCONT, lambda *_: _resume(tty, launcher))


@contextlib.contextmanager
def _quiet_ttou() -> Iterator[None]:
    """A process group not in the foreground may set the terminal's group only with SIGTTOU blocked."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _foreground(tty: int) -> None:
    os.setpgid(0, 0)
    with _quiet_ttou():
        os.tcsetpgrp(tty, os.getpgrp())


def _give_back(tty: int, launcher: int) -> None:
    with contextlib.suppress(OSError), _quiet_ttou():
        if os.tcgetpgrp(tty) == os.getpgrp() != launcher:
            os.tcsetpgrp(tty, launcher)


def _suspend(tty: int, launcher: int) -> None:
    """Ctrl-Z: the terminal back to the launcher's group, which this process rejoins, and the whole group stopped:
    the shell sees its job stopped, and its ``fg`` / ``bg`` continue the launcher and this process."""
    _give_back(tty, launcher)
    with contextlib.suppress(OSError):
        os.setpgid(0, launcher)
        os.killpg(launcher, signal.SIGSTOP)


def _resume(tty: int, launcher: int) -> None:
    """Continued in the foreground (``fg``): the foreground again, for this process alone."""
    with contextlib.suppress(OSError):
        if os.getpgrp() == launcher and os.tcgetpgrp(tty) == launcher:
            _foreground(tty)
