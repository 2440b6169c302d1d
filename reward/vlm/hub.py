"""A model folder named by a path or a Hub repo id (``reward.model=ORG/NAME``), resolved as ``from_pretrained`` does:
through the Hugging Face cache, offline too (``HF_HUB_OFFLINE=1``); an existing folder is always that folder.

Example:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     resolve_model_dir(d, key="reward.model") == Path(d)
    True
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from reward.core.errors import MissingInputError
from reward.core.fingerprints import HUB_ID

__all__ = ["check_models", "folder_problem", "is_repo_id", "missing_model", "resolve_model_dir"]

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
    if cached and folder.is_dir():  # right before loading: a folder that holds no usable model
        return folder_problem(folder, key)
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


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def folder_problem(folder: Path, key: str) -> str | None:
    """What makes the model folder ``folder`` (setting ``key``) unloadable, found from its files without loading it:
    no ``config.json`` (nor a LoRA adapter's), a text-only model (no vision tower), no weights, a shard its index
    names but the folder lacks, a truncated or damaged ``.safetensors`` file; ``None``: none of these."""
    from reward.data.files import read_json_object

    shown = f"{key}={folder}"
    config, adapter = folder / "config.json", folder / "adapter_config.json"
    if not config.is_file() and not adapter.is_file():
        return f"{shown}: not a checkpoint folder (no config.json in it); pass a model's folder or a Hub id"
    if config.is_file():
        settings = read_json_object(config, "the model folder is damaged: download or save it again")
        if not is_vision_model(settings):
            return (
                f"{shown}: a text-only model ({settings.get('model_type') or 'no model_type'}: no vision tower), "
                "which cannot see an image; pass a vision-language model's folder (the families: docs/backbones.md)"
            )
    weights = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    for index in (folder / name for name in INDEXES if (folder / name).is_file()):
        shards = read_json_object(index, "download or save the model again").get("weight_map") or {}
        if lacking := sorted({s for s in shards.values() if not (folder / str(s)).is_file()}):
            return f"{shown}: {index.name} names {lacking[0]}, which the folder lacks; download or save it again"
    if not weights:
        return (
            f"{shown}: no model weights in it (model.safetensors, pytorch_model.bin, their shards or a LoRA "
            "adapter's); download the model again, or pass the folder save_pretrained wrote"
        )
    for file in (w for w in weights if w.suffix == ".safetensors"):
        if problem := safetensors_problem(file):
            return f"{shown}: {file.name} {problem}; download or save the model again"
    return None


def is_vision_model(config: dict) -> bool:
    """Whether a model's ``config.json`` describes a vision-language model: a vision tower's settings, a family of
    :data:`reward.vlm.families.FAMILIES`, or a model type transformers reads images and text with."""
    from reward.vlm.families import FAMILIES

    kind = config.get("model_type")
    if "vision_config" in config or kind in FAMILIES:
        return True
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return kind in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with a ``.safetensors`` file, read from its header alone (``None``: nothing): cut short (the
    header places its tensors past the file's end), or a header that is not one.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     header = b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'
    ...     _ = Path(d, "m.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bytes(4))
    ...     safetensors_problem(Path(d, "m.safetensors"))
    'is truncated: 73 bytes of the 77 its header places tensors in'
    """
    size = path.stat().st_size
    with path.open("rb") as f:
        length = int.from_bytes(f.read(8), "little") if size >= 8 else -1
        if not 0 < length <= size - 8:
            return f"is truncated or not a safetensors file ({size} bytes, its header says {max(length, 0)})"
        try:
            header = json.loads(f.read(length))
            end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return "has a damaged header (not the JSON safetensors writes)"
    if 8 + length + end > size:
        return f"is truncated: {size} bytes of the {8 + length + end} its header places tensors in"
    return None


def check_models(paths: dict[str, str | None]) -> None:
    """Every missing model of ``{key: path}`` in one :class:`MissingInputError` (none missing: nothing), made right
    before the models load: offline, a Hub id the cache lacks is missing too."""
    problems = [p for key, value in paths.items() if (p := missing_model(value, key, cached=True))]
    if problems:
        raise MissingInputError("\n".join(problems))
