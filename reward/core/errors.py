"""The exceptions for problems the user can fix: :func:`reward.core.cli.main` prints their message alone and exits 2
(any other exception is a bug and keeps its traceback). ``UserError`` is a ``ValueError`` for library callers. A
message naming an unknown word suggests the known one it was meant to be (:func:`close_match`).

    >>> isinstance(UserError("unknown key x"), ValueError)
    True
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence


class UserError(ValueError):
    """A problem the user can fix (a setting, an input, an output folder); the message names the key or file and the
    fix."""


class MissingInputError(UserError, FileNotFoundError):
    """An input file or folder named by the user does not exist."""


def is_main_process() -> bool:
    """Rank 0 of a distributed launch (or not launched at all), from the launcher's environment."""
    return os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) in ("0", "")


def close_match(name: str, choices: Sequence[str], fmt: str = " Did you mean {!r}?") -> str:
    """``fmt`` filled with the closest of ``choices`` to ``name``, or ``""`` when none is close.

    >>> close_match("temprature", ["temperature", "model"]), close_match("DeQA", ["nll", "deqa"])
    (" Did you mean 'temperature'?", " Did you mean 'deqa'?")
    """
    lowered = {str(c).lower(): str(c) for c in choices}  # the case aside: DeQA -> deqa
    found = difflib.get_close_matches(str(name).lower(), list(lowered), n=1, cutoff=0.5)
    return fmt.format(lowered[found[0]]) if found else ""
