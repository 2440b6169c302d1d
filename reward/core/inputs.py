"""Checks of the paths a user names, made before anything loads: one line naming the key, never a library's traceback.

Example:
    >>> missing_model("/no/such/checkpoint", "model.path")
    'model.path=/no/such/checkpoint: no such folder, and not a Hub id (ORG/NAME); pass a checkpoint folder or a Hub id'
    >>> missing_model("Qwen/Qwen2.5-VL-3B-Instruct", "model.path") is None  # a Hub id: resolved when loaded
    True
"""

from __future__ import annotations

import re
from pathlib import Path

from reward.core.errors import MissingInputError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")  # NAME or ORG/NAME, as the Hub spells repo ids


def missing_model(value: str | None, key: str, *, cached: bool = False) -> str | None:
    """The problem with a model path ``value`` of setting ``key``, or ``None``: a folder that exists, or a name that
    could be a Hub id (resolved through the Hub cache when loaded), passes; anything else is named. ``cached`` (checks
    made right before the model loads): offline (``HF_HUB_OFFLINE=1``) a Hub id passes only when the Hugging Face
    cache holds it."""
    if not value or Path(str(value)).expanduser().exists():
        return None
    if HUB_ID.match(str(value)) and ".." not in str(value):
        return _not_cached_offline(str(value), key) if cached else None
    return f"{key}={value}: no such folder, and not a Hub id (ORG/NAME); pass a checkpoint folder or a Hub id"


def _not_cached_offline(repo: str, key: str) -> str | None:
    """Offline, a Hub id the cache lacks, named (it would fail when its model loads); online: ``None``."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    if not constants.HF_HUB_OFFLINE:
        return None
    try:
        snapshot_download(repo, local_files_only=True)
    except (LocalEntryNotFoundError, HFValidationError):
        return (
            f"{key}={repo}: not a folder, and the Hub repo {repo} is not in the Hugging Face cache "
            f"({constants.HF_HUB_CACHE}) while offline (HF_HUB_OFFLINE=1); download it first (hf download {repo}) "
            f"or point {key} at a local folder"
        )
    return None


def check_models(paths: dict[str, str | None]) -> None:
    """Every missing model of ``{key: path}`` in one :class:`MissingInputError` (none missing: nothing), made right
    before the models load: offline, a Hub id the cache lacks is missing too."""
    problems = [p for key, value in paths.items() if (p := missing_model(value, key, cached=True))]
    if problems:
        raise MissingInputError("\n".join(problems))
