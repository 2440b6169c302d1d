"""The one exception type for problems the user can fix: a bad key, a bad file, a refused output folder.

Every command runs through :func:`reward.core.cli.main`, which prints a :class:`UserError`'s message alone (no
traceback) and exits with status 2; any other exception is a bug and keeps its traceback. Messages name the file or
the key and say how to fix it. ``UserError`` is a ``ValueError``, so library callers that catch ``ValueError`` still
catch it.

Example:
    >>> err = ConfigError("unknown key reward.temprature (did you mean 'temperature'?)")
    >>> isinstance(err, UserError) and isinstance(err, ValueError)
    True
"""

from __future__ import annotations

import os


class UserError(ValueError):
    """A problem the user can fix; the message names the file or key and the fix."""


class ConfigError(UserError):
    """A config value that is unknown, missing, of the wrong type or out of range."""


class MissingInputError(UserError, FileNotFoundError):
    """An input file or folder named by the user does not exist."""


def is_main_process() -> bool:
    """Rank 0 of a distributed launch (or not launched at all), from the launcher's environment."""
    return os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) in ("0", "")
