"""No secret in any file or line. Tokens are read where their libraries read them (``HF_TOKEN`` or ``hf auth login``
for ``huggingface_hub``, ``OPENAI_API_KEY`` or the variable a setting names for the ``openai`` client:
:func:`api_key`), never taken as settings (:func:`secret_problems`, which also refuses a key given where a variable's
name belongs); :func:`redact` is what the one writer of ``run.json`` and of the model cards applies to settings, so
that a value that slips through (a URL's password) is shown as ``<secret given>``, and :func:`mask` what every
printed line and error goes through (URL passwords, and the keys :func:`api_key` read, wherever a server echoes them).

Example:
    >>> redact({"server": {"base_url": "https://bob:pa55word@host/v1", "api_key": "sk-abc"}, "eos_token": "<eos>"})
    {'server': {'base_url': 'https://<secret given>@host/v1', 'api_key': '<secret given>'}, 'eos_token': '<eos>'}
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

REDACTED = "<secret given>"
NO_KEY = "EMPTY"  # the key sent when the variable is unset: vLLM and SGLang take any key unless started with one
MIN_MASKED = 8  # a key read from the environment is masked in every line when at least this long (shorter: too
# common a string to replace everywhere, and a guess away anyway)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_read_keys: set[str] = set()  # the keys api_key() read in this process, and its URLs' passwords
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


def _names_a_key(key: str) -> bool:
    """Whether setting ``key`` names the environment variable of a secret (``api_key_env``, ``hub_token_env``)."""
    name = str(key).rsplit(".", 1)[-1]
    return name.lower().endswith("_env") and is_secret_key(name[: -len("_env")])


def _names_no_variable(key: str, value: Any) -> bool:
    """Whether ``value`` of a setting naming a secret's environment variable cannot be one: no variable's name
    (``sk-...``), or a name set in no environment here (a key pasted in its place; the run would go on without a key).
    ``OPENAI_API_KEY``, the ``openai`` client's own variable, may be unset (no key, as vLLM takes)."""
    if not _names_a_key(key) or value is None or value == "OPENAI_API_KEY":
        return False
    return not (isinstance(value, str) and _ENV_NAME.fullmatch(value) and value in os.environ)


def secret_problems(values: Mapping[str, Any], prefix: str = "") -> list[str]:
    """A secret given as a setting, named with where it belongs instead (settings are written to ``run.json``,
    checkpoints and cards); a variable's name that is none (its value never repeated: it may be the key)."""
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
        elif _names_no_variable(full, value):
            found.append(
                f"{full}: names no environment variable set here (the value is not shown: it may be a key); give "
                f"the NAME of the variable holding the key ({full}=MY_KEY after export MY_KEY=...), or leave the "
                "default OPENAI_API_KEY (unset: no key, as vLLM takes)"
            )
    return found


def redact(node: Any, key: str = "") -> Any:
    """A copy of a settings tree with every secret setting's value, every URL password and every value naming no
    environment variable where a variable's name belongs replaced."""
    if isinstance(node, Mapping):
        out = {}
        for k, v in node.items():
            secret = is_secret_key(str(k)) and _given(v)
            # a key pasted where a variable's name belongs (``api_key_env=sk-...``): no variable's name at all
            pasted = _names_a_key(str(k)) and isinstance(v, str) and not _ENV_NAME.fullmatch(v)
            out[k] = REDACTED if secret or pasted else redact(v, str(k))
        return out
    if isinstance(node, list | tuple):
        return [redact(v, key) for v in node]
    if isinstance(node, str):
        return mask(node)
    return node


def api_key(env: str, urls: Sequence[str] = ()) -> str:
    """The key in environment variable ``env`` (:data:`NO_KEY` when unset) for a client of ``urls``, remembered with
    the URLs' passwords (and the basic-authentication header the HTTP client makes of them) so that :func:`mask` hides
    them in every line where a server or a library would repeat them (a 401 answer echoing what it was sent)."""
    key = os.environ.get(env) or NO_KEY
    for secret in [key, *(s for url in urls for s in _url_credentials(url))]:
        if secret != NO_KEY and len(secret) >= MIN_MASKED:
            _read_keys.add(secret)
    return key


def _url_credentials(url: str) -> list[str]:
    """A URL's password and its ``user:password`` as HTTP basic authentication sends it (base64)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL: the client will say so
        return []
    if parts.password is None:
        return []
    user, password = unquote(parts.username or ""), unquote(parts.password)
    return [password, base64.b64encode(f"{user}:{password}".encode()).decode()]


def mask(text: str) -> str:
    """``text`` with URL passwords and URL query keys, and every key and password :func:`api_key` remembered, shown
    as ``<secret given>``: what every printed line, error and written value of ours goes through.

    >>> mask("GET https://bob:pa55@host/v1/models?api_key=sk-1 failed")
    'GET https://<secret given>@host/v1/models?api_key=<secret given> failed'
    """
    text = str(text)
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
        text = _URL_QUERY.sub(lambda m: f"{m['name']}{REDACTED}", text)
    for key in sorted(_read_keys, key=len, reverse=True):  # the longest first: a key holding another is hidden whole
        text = text.replace(key, REDACTED)
    return text
