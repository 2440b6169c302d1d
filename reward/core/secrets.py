"""No secret in any file: the one redaction every writer of a record, card, log line or upload goes through.

A secret is a setting whose name says so (``hub_token``, ``api_key``, ``*_token``, ``*_key``, ``*secret*``,
``password``, ``credentials``: what Hugging Face and OpenAI clients treat as one; a tokenizer's special tokens such
as ``eos_token`` are not), a value given under such a name (remembered once seen, so that it is also caught where it
appears under another name or inside a text), the value of a secret environment variable (``HF_TOKEN``,
``OPENAI_API_KEY``, any ``*_TOKEN``, ``*_API_KEY``, ``*SECRET*``, ``*PASSWORD*``), the token saved by ``hf auth
login``, and the password of a URL (``https://user:PASSWORD@host``). A record keeps that a secret was given and
never its value: :data:`REDACTED`.

- :func:`redact`: a settings tree with every secret setting replaced (and its value remembered);
- :func:`redact_text`: a text (a JSON record, a card, a log line, a message) with every known secret value replaced;
- :func:`redact_argv`: a command line's ``key=value`` words redacted (the lock's holder, a card's command).

Example:
    >>> redact({"trainer": {"hub_token": "hf_abcdefgh1234", "eos_token": "<|im_end|>", "lr": 0.1}})
    {'trainer': {'hub_token': '<secret given>', 'eos_token': '<|im_end|>', 'lr': 0.1}}
    >>> redact_text("pushed with hf_abcdefgh1234 to https://bob:pa55word@host/x")
    'pushed with <secret given> to https://<secret given>@host/x'
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import traceback
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "REDACTED",
    "is_secret_key",
    "known_secrets",
    "redact",
    "redact_argv",
    "redact_text",
    "redact_tracebacks",
    "remember",
    "split_hub_token",
]

REDACTED = "<secret given>"
MIN_SECRET_CHARS = 8  # shorter values are never searched for in texts (they would match ordinary words)
PLACEHOLDERS = frozenset({"", "empty", "none", "null", "-", "dummy", "no-key"})  # "no key": kept as written
TOKENIZER_TOKENS = frozenset(  # special tokens of a tokenizer, named *_token but no secret
    f"{w}_token" for w in ("bos", "eos", "unk", "sep", "pad", "cls", "mask", "image", "video", "audio", "vision")
)
_SECRET_NAME = re.compile(
    r"(^|_)(token|key|apikey|secret|passwd|credentials?|cookie)$|secret|password|api_?key|authorization", re.I
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SPECIAL_TOKEN = re.compile(r"<\|?[^<>\s]{1,40}\|?>|\[[A-Z_]{2,20}\]|</?s>")  # <|im_end|>, [PAD]: a tokenizer's
_URL_QUERY_SECRET = re.compile(  # ?token=..., &api_key=..., &sig=...: a secret in a URL's query
    r"(?P<name>[?&;](?:[\w.-]*(?:token|key|secret|password|passwd|signature|credential)[\w.-]*|sig|auth)=)"
    r"(?P<value>[^&#\s\"'<>]+)",
    re.I,
)
_SECRET_ENV = re.compile(r"(^|_)(TOKEN|API_KEY|APIKEY|SECRET|SECRET_KEY|PASSWORD|PASSWD|ACCESS_KEY)$|SECRET|PASSWORD")
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://)(?P<userinfo>[^/\s:@]*:[^/\s@]+)@")
_remembered: set[str] = set()
_lock = threading.Lock()


def is_secret_key(key: str) -> bool:
    """Whether a setting named ``key`` (dotted: its last part counts) holds a secret.

    >>> [is_secret_key(k) for k in ("trainer.hub_token", "server.api_key", "eos_token", "api_key_env", "max_tokens")]
    [True, True, False, False, False]
    >>> [is_secret_key(k) for k in ("authToken", "x.apiKey", "access-token", "HF_TOKEN", "token")]
    [True, True, True, True, True]
    """
    last = str(key).rsplit(".", 1)[-1].lstrip("+~")
    name = _CAMEL.sub("_", last).replace("-", "_").lower()  # authToken, access-token: auth_token, access_token
    if name in TOKENIZER_TOKENS or name.endswith(("_env", "_file", "_path")):  # where a secret is, not what it is
        return False
    return bool(_SECRET_NAME.search(name))


def _worth_hiding(value: Any) -> bool:
    """A value that may be a secret: not a placeholder for "no key" (``EMPTY``), nor a tokenizer's special token."""
    if not isinstance(value, str) or value.strip().lower() in PLACEHOLDERS:
        return False
    return not _SPECIAL_TOKEN.fullmatch(value.strip())


def _given(value: Any) -> bool:
    """A secret value given: a string worth hiding (:func:`_worth_hiding`), or a number (a key of digits)."""
    return _worth_hiding(value) or (isinstance(value, int | float) and not isinstance(value, bool))


def remember(value: Any) -> None:
    """Remember a secret value given under a secret name, so that :func:`redact_text` finds it anywhere."""
    if _worth_hiding(value) and len(value) >= MIN_SECRET_CHARS:
        with _lock:
            _remembered.add(value)


def _token_file() -> str | None:
    """The token ``hf auth login`` saved (``HF_TOKEN_PATH``, else ``HF_HOME/token``), if any."""
    path = os.environ.get("HF_TOKEN_PATH") or str(
        Path(os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "huggingface")
        / "token"
    )
    try:
        token = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return token or None


def known_secrets() -> list[str]:
    """Every secret value known now (remembered, the environment's, the saved Hub token), longest first."""
    found = set(_remembered)
    for name, value in os.environ.items():
        if _SECRET_ENV.search(name.upper()) and _worth_hiding(value) and len(value.strip()) >= MIN_SECRET_CHARS:
            found.add(value.strip())
    token = _token_file()
    if token and len(token) >= MIN_SECRET_CHARS:
        found.add(token)
    return sorted(found, key=len, reverse=True)


def redact_text(text: str) -> str:
    """``text`` with every known secret value (also as JSON escapes it) and every URL password replaced."""
    if not isinstance(text, str) or not text:
        return text
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    if "=" in text:
        text = _URL_QUERY_SECRET.sub(lambda m: f"{m['name']}{REDACTED}", text)
    for secret in known_secrets():
        if secret in text:
            text = text.replace(secret, REDACTED)
        escaped = json.dumps(secret)[1:-1]
        if escaped != secret and escaped in text:
            text = text.replace(escaped, REDACTED)
    return text


def redact(node: Any, key: str = "") -> Any:
    """A copy of a settings tree (mappings, lists, scalars) with the value of every secret setting replaced by
    :data:`REDACTED` (a placeholder such as ``EMPTY`` or ``null`` is kept: no secret was given) and every known secret
    value removed from the other strings. The values replaced are remembered (:func:`remember`)."""
    if isinstance(node, Mapping):
        out = {}
        for k, v in node.items():
            if is_secret_key(str(k)) and isinstance(v, int | float) and not isinstance(v, bool):
                remember(str(v))  # a key of digits, read as a number by the config parser
                out[k] = REDACTED
            elif is_secret_key(str(k)) and _worth_hiding(v):
                remember(v)
                out[k] = REDACTED
            elif is_secret_key(str(k)) and isinstance(v, Mapping | list | tuple):
                out[k] = REDACTED
            else:
                out[k] = redact(v, str(k))
        return out
    if isinstance(node, list | tuple):
        return [redact(v, key) for v in node]
    if isinstance(node, str):
        return redact_text(node)
    return node


def redact_argv(argv: Iterable[str]) -> list[str]:
    """Command-line words with the value of every secret ``key=value`` replaced (and remembered).

    >>> redact_argv(["training/sft.py", "trainer.hub_token=hf_abcdefgh1234", "out=o"])
    ['training/sft.py', 'trainer.hub_token=<secret given>', 'out=o']
    """
    out = []
    for word in argv:
        key, sep, value = str(word).partition("=")
        if sep and is_secret_key(key.lstrip("+~")) and _worth_hiding(value.strip("'\"")):
            remember(value.strip("'\""))
            out.append(f"{key}={REDACTED}")
        else:
            out.append(redact_text(str(word)))
    return out


def split_hub_token(trainer: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``trainer.*`` settings without any secret (``hub_token``, and any other key named like one), and the Hub
    token. transformers pickles its ``TrainingArguments`` into every ``training_args.bin`` (and trl writes them into
    checkpoints): the token is passed to the upload, or through the environment (``HF_TOKEN``), never through the
    arguments.

    >>> split_hub_token({"learning_rate": 0.1, "hub_token": "hf_abcdefgh1234", "eos_token": "<|im_end|>"})
    ({'learning_rate': 0.1, 'eos_token': '<|im_end|>'}, 'hf_abcdefgh1234')
    """
    args = {k: v for k, v in trainer.items() if k == "hub_token" or not is_secret_key(k) or not _given(v)}
    for key in set(trainer) - set(args):
        remember(str(trainer[key]))
    token = args.pop("hub_token", None)
    token = str(token) if _given(token) else token
    if _worth_hiding(token):
        remember(token)
        return args, token
    return args, None


def redact_tracebacks() -> None:
    """Uncaught exceptions and warnings are printed (to the console, or to the log a run's output is redirected to)
    with every known secret replaced: an exception's message may quote a URL, a header or a setting."""
    if getattr(sys.excepthook, "_redacting", False):
        return

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        sys.stderr.write(redact_text("".join(traceback.format_exception(kind, value, tb))))
        sys.stderr.flush()

    def formatwarning(*args: Any, **kwargs: Any) -> str:
        return redact_text(plain_format(*args, **kwargs))

    plain_format = warnings.formatwarning
    hook._redacting = True  # type: ignore[attr-defined]
    sys.excepthook = hook
    warnings.formatwarning = formatwarning  # type: ignore[assignment]
