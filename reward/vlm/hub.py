"""A model folder named by a path or a Hub repo id (``reward.model=ORG/NAME``), resolved as ``from_pretrained`` does:
through the Hugging Face cache, offline too (``HF_HUB_OFFLINE=1``); an existing folder is always that folder.

Example:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     resolve_model_dir(d, key="reward.model") == Path(d)
    True
"""

from __future__ import annotations

import logging
from pathlib import Path

from reward.core.errors import MissingInputError
from reward.core.fingerprints import HUB_ID

__all__ = ["check_models", "is_repo_id", "missing_model", "resolve_model_dir"]

logger = logging.getLogger(__name__)


def is_repo_id(value: str) -> bool:
    """Whether ``value`` is written as a Hub repo id ``ORG/NAME`` (it may still be a relative path).

    >>> is_repo_id("org/scorer"), is_repo_id("runs/a/scorer"), is_repo_id("/abs/dir")
    (True, False, False)
    """
    return value.count("/") == 1 and bool(HUB_ID.match(value)) and ".." not in value


def resolve_model_dir(value: str | Path, *, key: str, revision: str | None = None, what: str = "scorer") -> Path:
    """The local folder ``value`` names: an existing folder as given, else the cached (or, online, downloaded)
    snapshot of the Hub repo id ``value``. Anything else fails in one line naming ``key``, the value and the fix."""
    if not str(value).strip():
        raise MissingInputError(f"{key}= is empty: name a {what} folder or a Hub repo id ORG/NAME")
    path = Path(str(value)).expanduser()
    if path.exists():
        return path
    text = str(value)
    if not is_repo_id(text):
        raise MissingInputError(f"{key}={text}: no such folder; pass a {what} folder or a Hub repo id ORG/NAME")
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    offline = bool(constants.HF_HUB_OFFLINE)
    try:
        local = snapshot_download(text, revision=revision, local_files_only=offline)
    except LocalEntryNotFoundError:
        raise MissingInputError(
            f"{key}={text}: not a folder, and the Hub repo {text} is not in the Hugging Face cache "
            f"({constants.HF_HUB_CACHE}){' while offline (HF_HUB_OFFLINE=1)' if offline else ''}; download it first "
            f"(hf download {text}) or point {key} at a {what} folder"
        ) from None
    except HfHubHTTPError as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise MissingInputError(
            f"{key}={text}: not a folder, and the Hub could not give repo {text} ({reason}); check the id and your "
            f"access (hf auth login), or point {key} at a {what} folder"
        ) from None
    logger.info("%s=%s: the Hub snapshot at %s", key, text, local)
    return Path(local)


def missing_model(value: str | None, key: str, *, cached: bool = False) -> str | None:
    """The problem with a model path ``value`` of setting ``key``, or ``None``: a folder that exists, or a name that
    could be a Hub id (resolved through the Hub cache when loaded), passes; anything else is named. ``cached`` (checks
    made right before the model loads): offline (``HF_HUB_OFFLINE=1``) a Hub id passes only when the Hugging Face
    cache holds it."""
    if value is None:
        return None
    if not str(value).strip():
        return f"{key}= is empty: name a checkpoint folder or a Hub id (ORG/NAME) (an unset shell variable?)"
    folder = Path(str(value)).expanduser()
    checkpoint = any((folder / f).is_file() for f in ("config.json", "adapter_config.json"))
    if cached and folder.is_dir() and not checkpoint:  # right before loading: a folder that holds no model
        return f"{key}={value}: not a checkpoint folder (no config.json in it); pass a model's folder or a Hub id"
    if folder.exists():
        return None
    if not (HUB_ID.match(str(value)) and ".." not in str(value)):
        return f"{key}={value}: no such folder, and not a Hub id (ORG/NAME); pass a checkpoint folder or a Hub id"
    from huggingface_hub import constants

    if cached and constants.HF_HUB_OFFLINE:  # offline, a Hub id the cache lacks would fail when its model loads
        try:
            resolve_model_dir(str(value), key=key, what="local")
        except MissingInputError as err:
            return str(err)
    return None


def check_models(paths: dict[str, str | None]) -> None:
    """Every missing model of ``{key: path}`` in one :class:`MissingInputError` (none missing: nothing), made right
    before the models load: offline, a Hub id the cache lacks is missing too."""
    problems = [p for key, value in paths.items() if (p := missing_model(value, key, cached=True))]
    if problems:
        raise MissingInputError("\n".join(problems))
