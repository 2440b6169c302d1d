"""The exceptions for problems the user can fix: :func:`reward.core.cli.main` prints their message alone and exits 2
(any other exception is a bug and keeps its traceback). ``UserError`` is a ``ValueError`` for library callers.

    >>> isinstance(UserError("unknown key x"), ValueError)
    True
"""

from __future__ import annotations

import os


class UserError(ValueError):
    """A problem the user can fix (a setting, an input, an output folder); the message names the key or file and the
    fix."""


class MissingInputError(UserError, FileNotFoundError):
    """An input file or folder named by the user does not exist."""


def is_main_process() -> bool:
    """Rank 0 of a distributed launch (or not launched at all), from the launcher's environment."""
    return os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) in ("0", "")
