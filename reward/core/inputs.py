"""Checks of the paths a user names, made before anything loads: one line naming the key, never a library's traceback.

Example:
    >>> missing_model("/no/such/checkpoint", "model.path")
    'model.path=/no/such/checkpoint: no such folder, and not a Hub id (ORG/NAME); pass a checkpoint folder or a Hub id'

A name that could be a Hub id passes, unless it is an ``ORG/NAME`` id, the run is offline (``HF_HUB_OFFLINE=1``) and
the local cache has no snapshot of it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from reward.core.errors import MissingInputError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")  # NAME or ORG/NAME, as the Hub spells repo ids


def missing_model(value: str | None, key: str) -> str | None:
    """The problem with a model path ``value`` of setting ``key``, or ``None``: a folder that exists, or a name that
    could be a Hub id (resolved through the Hub cache when loaded), passes; anything else is named."""
    if not value or Path(str(value)).expanduser().exists():
        return None
    if HUB_ID.match(str(value)) and ".." not in str(value):
        if "/" in str(value) and _offline() and not _cached(str(value)):  # ORG/NAME: what users type for the Hub
            return (
                f"{key}={value}: no such folder, and that Hub id is not in the local Hugging Face cache while offline "
                f"(HF_HUB_OFFLINE=1); download it first (hf download {value}) or pass a checkpoint folder"
            )
        return None
    return f"{key}={value}: no such folder, and not a Hub id (ORG/NAME); pass a checkpoint folder or a Hub id"


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _cached(repo_id: str) -> bool:
    """Whether the Hugging Face cache holds a snapshot of model repo ``repo_id`` (its folder layout, no request)."""
    from huggingface_hub import constants

    snapshots = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    return snapshots.is_dir() and any(snapshots.iterdir())


def check_models(paths: dict[str, str | None]) -> None:
    """Every missing model of ``{key: path}`` in one :class:`MissingInputError` (none missing: nothing)."""
    problems = [p for key, value in paths.items() if (p := missing_model(value, key))]
    if problems:
        raise MissingInputError("\n".join(problems))
