"""No secret in any file. Tokens are read where their libraries read them (``HF_TOKEN`` or ``hf auth login`` for
``huggingface_hub``, ``OPENAI_API_KEY`` or the variable a setting names for the ``openai`` client), never taken as
settings (:func:`secret_problems`); :func:`redact` is what the one writer of ``run.json`` and of the model cards
applies to settings, so that a value that slips through (a URL's password) is shown as ``<secret given>``.

Example:
    >>> redact({"server": {"base_url": "https://bob:pa55word@host/v1", "api_key": "sk-abc"}, "eos_token": "<eos>"})
    {'server': {'base_url': 'https://<secret given>@host/v1', 'api_key': '<secret given>'}, 'eos_token': '<eos>'}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

REDACTED = "<secret given>"
_SECRET_NAME = re.compile(r"(^|_)(token|key|apikey|secret|passwd|credentials?)$|secret|password|api_?key|auth", re.I)
_NOT_SECRET = re.compile(r"^(bos|eos|unk|sep|pad|cls|mask|image|video|vision)_token$|_(env|file|path)$|^max_")
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://)[^/\s:@]*:[^/\s@]+@")
_URL_QUERY = re.compile(r"(?P<name>[?&;][\w.-]*(?:token|key|secret|password|sig|auth)[\w.-]*=)[^&#\s]+", re.I)


def is_secret_key(key: str) -> bool:
    """Whether a setting named ``key`` (its last dotted part, camelCase or with hyphens) holds a secret.

    >>> [is_secret_key(k) for k in ("trainer.hub_token", "apiKey", "eos_token", "api_key_env", "max_tokens")]
    [True, True, False, False, False]
    """
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", str(key).rsplit(".", 1)[-1]).replace("-", "_").lower()
    return not _NOT_SECRET.search(name) and bool(_SECRET_NAME.search(name))


def _given(value: Any) -> bool:
    return value not in (None, "", False) and str(value).strip().lower() not in ("empty", "none", "null", "no-key")


def secret_problems(values: Mapping[str, Any], prefix: str = "") -> list[str]:
    """A secret given as a setting, named with where it belongs instead (settings are written to ``run.json``,
    checkpoints and cards)."""
    found = []
    for key, value in values.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            found += secret_problems(value, full)
        elif is_secret_key(full) and _given(value):
            found.append(
                f"{full}: a token or key is never a setting (settings are written to run.json, checkpoints and "
                "cards): give the Hub's token with HF_TOKEN or `hf auth login`, a server's key with OPENAI_API_KEY"
            )
    return found


def redact(node: Any, key: str = "") -> Any:
    """A copy of a settings tree with every secret setting's value and every URL password replaced."""
    if isinstance(node, Mapping):
        return {k: REDACTED if is_secret_key(str(k)) and _given(v) else redact(v, str(k)) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [redact(v, key) for v in node]
    if isinstance(node, str) and "://" in node:
        node = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{REDACTED}@", node)
        return _URL_QUERY.sub(lambda m: f"{m['name']}{REDACTED}", node)
    return node
