"""One or more OpenAI-compatible servers (vLLM, SGLang) as a VLM: the option-log-prob primitive and free text.

Every VLM reward (``sa-iqa``, ``qbench``, ``pace``) can score through it instead of an in-process model::

    accelerate launch rl/grpo.py reward=sa-iqa reward.model=SCORER reward.backend=openai \\
        'reward.server.base_urls=[http://gpu7:8000/v1,http://gpu8:8000/v1]' reward.server.model=sa-iqa ...

- **Data parallel.** Requests are spread over ``base_urls`` (the least busy server first), at most ``concurrency``
  in flight over all of them.
- **Failures.** A request that times out or meets a connection error or a 5xx/429 is retried on another server,
  after an exponential backoff with jitter; a server that failed is avoided for a while. After the last retry the
  answer is a failure: its row of log-probabilities is NaN and flagged in ``OptionLogProbs.failed``, the reward
  turns it into ``None`` and the run goes on (counted in :attr:`OpenAIBackend.stats`, with the reason in
  ``stats["failed_reasons"]``). Free text (``chat``, PACE's agents) raises instead: an agent cannot go on without its
  answer.
- **Malformed answers.** A 200 answer that is not JSON (an HTML page), has no ``choices``, no ``top_logprobs``, a NaN
  or positive log-prob, fails its item at once with the reason (:data:`REASONS`), never the run, and is not retried.
- **Circuit breaker.** ``breaker_failures`` failed tries in a row (timeouts, connection errors, 5xx/429) mark a server
  down for ``breaker_cooldown`` seconds: requests skip it. When every server is down the run stops at once with one
  message (:class:`ServersDown`) instead of waiting out every timeout of every item.
- **The response prefix** (e.g. "The quality of the image is") is sent as a final assistant message with
  ``continue_final_message=true, add_generation_prompt=false`` (vLLM's and SGLang's extension), so the server
  continues it exactly as the in-process model does; the answer is one token (``max_tokens=1``) with its
  ``top_logprobs``.
- **Options outside the top-k.** A score is made only from options the answer resolves; an absent option is never
  given a share of the unlisted mass. An option absent from the server's top-k list holds at most the k-th listed
  probability; with a local tokenizer (which proves every option is one token) the absent ones are taken as 0 when
  that bound, as a share of the options' probability, is at most ``max_missing_mass`` (the score then moves by at
  most that fraction of its range), and the bound is reported (``OptionLogProbs.missing_mass``;
  ``stats["missing_mass_max"]``). Otherwise, and always without a local tokenizer (an absent word may be several
  tokens), the item fails (``options_absent`` / ``missing_mass``). vLLM caps k at ``--max-logprobs`` (default 20).
- **Listed twice.** A token listed twice (two token ids decoding to the same text) counts once, at its larger
  log-prob.

Example (the loopback server of the tests stands in for vLLM)::

    >>> backend = OpenAIBackend(ServerConfig(base_urls=["http://127.0.0.1:8000/v1"]))  # doctest: +SKIP
    >>> query = OptionQuery("Rate the quality.", ("good", "poor"), "It is")  # doctest: +SKIP
    >>> backend.option_logprobs([[image]], [query]).logprobs.shape  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import io
import json
import logging
import math
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from PIL import Image

from reward.core.config import FRACTION, RETRIES, above, at_least, parse
from reward.core.errors import ConfigError, UserError
from reward.vlm.model import OptionLogProbs, OptionQuery, content_parts

logger = logging.getLogger(__name__)
T = TypeVar("T")

RETRY_STATUS = (408, 409, 429)  # and every 5xx: worth another try (on another server)
LOGPROB_TOLERANCE = 1e-6  # a listed log-prob above this is malformed (a probability above 1)
REASONS = {  # why an item failed (the keys of stats["failed_reasons"]), besides http_<status>
    "timeout": "the server did not answer in server.timeout seconds, on any try",
    "connection": "no connection to the server, on any try",
    "not_json": "a 200 answer that is not JSON (e.g. an HTML page from a proxy)",
    "no_choices": "an answer without choices",
    "no_logprobs": "an answer without logprobs / top_logprobs",
    "bad_logprob": "a NaN, infinite or non-numeric log-prob, or listed probabilities summing above 1",
    "positive_logprob": "a log-prob above 0",
    "malformed": "an answer of another shape than a chat completion",
    "options_absent": "an option word not in the answer's top-k and not bounded (no option listed, or no tokenizer)",
    "missing_mass": "options absent from the top-k could hold more than server.max_missing_mass",
    "server_down": "every server was marked down by the circuit breaker (the run stops)",
}


@dataclass
class ServerConfig:
    base_urls: list[str] = field(
        default_factory=list, metadata={"help": "e.g. [http://gpu7:8000/v1, http://gpu8:8000/v1]"}
    )
    base_url: str | None = field(default=None, metadata={"help": "one server (the same as base_urls=[URL])"})
    model: str | None = field(default=None, metadata={"help": "the served model name; null: the servers' only model"})
    api_key: str | None = field(default="EMPTY", metadata={"help": "or the OPENAI_API_KEY environment variable"})
    top_logprobs: int = field(
        default=20,
        metadata={
            "help": "options outside the top-k: bounded by the k-th probability (vLLM: --max-logprobs)",
            "range": at_least(1, 1_000_000),  # up to a whole vocabulary (a check of served vs in-process scores)
        },
    )
    max_missing_mass: float = field(
        default=0.01,
        metadata={
            "help": (
                "most option probability absent options may hold (upper bound, as a share of the options' "
                "mass) for an item to be scored, absent ones as 0: the score moves by at most this fraction"
                " of its range"
            ),
            "range": FRACTION,
        },
    )
    timeout: float = field(default=60.0, metadata={"help": "seconds per request", "range": above(0)})
    max_retries: int = field(
        default=3,
        metadata={
            "help": "further tries of a failed request (another server first), each after a backoff",
            "range": RETRIES,
        },
    )
    backoff: float = field(
        default=0.5,
        metadata={
            "help": "seconds before the first retry, doubled each time (with jitter), at most backoff_max",
            "range": at_least(0),
        },
    )
    backoff_max: float = field(
        default=8.0, metadata={"help": "the longest wait between retries, in seconds", "range": at_least(0)}
    )
    concurrency: int = field(
        default=8, metadata={"help": "requests in flight at most, over all servers", "range": at_least(1, 4096)}
    )
    breaker_failures: int = field(
        default=5,
        metadata={
            "help": "failed tries in a row that mark a server down (0: never); all down: the run stops",
            "range": at_least(0),
        },
    )
    breaker_cooldown: float = field(
        default=60.0,
        metadata={"help": "seconds a server marked down is skipped before it is tried again", "range": at_least(0)},
    )
    tokenizer: str | None = field(
        default=None,
        metadata={"help": "a local tokenizer folder to check option words are one token (default: the model's)"},
    )
    chat_template_kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "e.g. {enable_thinking: false} (Qwen3-VL)"}
    )

    @property
    def urls(self) -> list[str]:
        return list(dict.fromkeys([*([self.base_url] if self.base_url else []), *self.base_urls]))


class ServerUnavailable(UserError):
    """No configured server answered at the start, or the served model is not the one asked for."""


class ServerRequestError(RuntimeError):
    """One request that failed on every try (or was refused by the server, or answered with a malformed answer);
    ``reason`` is a key of :data:`REASONS` or ``http_<status>``."""

    def __init__(self, message: str, reason: str = "failed") -> None:
        super().__init__(message)
        self.reason = reason


class ServersDown(UserError):
    """Every server is marked down by the circuit breaker: the run stops with this message."""


class AnswerError(ValueError):
    """A 200 answer that cannot give a score (malformed, or its options not resolved); ``reason``: a key of
    :data:`REASONS`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _answer_json(body: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        raise AnswerError("not_json", f"the answer is not JSON: {body[:80]!r}") from None
    if not isinstance(data, dict):
        raise AnswerError("malformed", f"the answer is not a JSON object: {body[:80]!r}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise AnswerError("no_choices", f"the answer has no choices: {body[:80]!r}")
    return choices[0]


def answer_text(body: str) -> str:
    """The text of a chat completion's first choice (raw JSON ``body``); :class:`AnswerError` when there is none.

    >>> answer_text('{"choices": [{"message": {"role": "assistant", "content": "A cat."}}]}')
    'A cat.'
    """
    message = _answer_json(body).get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if content is not None and not isinstance(content, str):
        raise AnswerError("malformed", f"the answer's message content is not text: {content!r:.80}")
    return content or ""


def answer_top_logprobs(body: str) -> list[tuple[Any, Any]]:
    """The ``(token, logprob)`` list of a one-token chat completion's first position (raw JSON ``body``), unchecked;
    :class:`AnswerError` (with its reason) when the answer is not JSON, has no choices or no top_logprobs.

    >>> top = '[{"top_logprobs": [{"token": "A", "logprob": 0}]}]'
    >>> answer_top_logprobs('{"choices": [{"logprobs": {"content": ' + top + "}}]}")
    [('A', 0)]
    >>> answer_top_logprobs("<html>502 Bad Gateway</html>")
    Traceback (most recent call last):
    reward.vlm.server.AnswerError: the answer is not JSON: '<html>502 Bad Gateway</html>'
    """
    logprobs = _answer_json(body).get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    top = (
        content[0].get("top_logprobs")
        if isinstance(content, list) and content and isinstance(content[0], dict)
        else None
    )
    if not isinstance(top, list) or not top:
        raise AnswerError(
            "no_logprobs",
            "the answer has no top_logprobs; the server must support logprobs and top_logprobs on chat completions "
            "(vLLM and SGLang do)",
        )
    if not all(isinstance(t, dict) and "token" in t and "logprob" in t for t in top):
        raise AnswerError("malformed", f"a top_logprobs entry is not {{token, logprob}}: {top[:3]!r:.120}")
    return [(t["token"], t["logprob"]) for t in top]


def image_url(image: Image.Image) -> str:
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="PNG")  # lossless: the server sees the pixels the local model would
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def messages(
    prompt: str, images: Sequence[Image.Image], system: str | None = None, response_prefix: str = ""
) -> list[dict[str, Any]]:
    """The chat messages of one query, laid out as the local VLM renders it (images where ``<image>`` markers place
    them, else first, then the text); the response prefix as a final assistant message, to be continued
    (``continue_final_message``).

    >>> [p["type"] for p in messages("A: <image> B: <image>", [Image.new("RGB", (2, 2))] * 2)[0]["content"]]
    ['text', 'image_url', 'text', 'image_url']
    """
    urls = iter([image_url(im) for im in images])
    content = [
        {"type": "image_url", "image_url": {"url": next(urls)}} if part["type"] == "image" else part
        for part in content_parts(len(images), prompt)
    ]
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    out.append({"role": "user", "content": content})
    if response_prefix:
        out.append({"role": "assistant", "content": response_prefix})  # a plain string: SGLang ignores lists here
    return out


def letter_logprobs(
    top: Sequence[tuple[Any, Any]],
    letters: Sequence[str],
    sep: str = "",
    *,
    max_missing_mass: float = 0.01,
    single_tokens: bool = True,
) -> tuple[list[float], float]:
    """Log-probabilities of ``letters`` from a top-k list of (token, logprob), and the share of the options'
    probability that absent ones could hold (an upper bound; 0 when every option is listed). Absent options are
    taken as 0 (``-inf``) only when ``single_tokens`` (a tokenizer proved each is one token) and that bound is at
    most ``max_missing_mass``; else, and for a malformed list, :class:`AnswerError` with the reason.

    A letter is the token ``sep + letter`` exactly, as the local model reads it (" A" is another token than "A"). A
    token listed twice counts once, at its larger log-prob.

    >>> lp, missing = letter_logprobs([("A", math.log(0.6)), ("B", math.log(0.3)), ("x", math.log(0.099))], "ABC")
    >>> [round(math.exp(v), 3) for v in lp], round(missing, 4)  # C holds at most 0.001 of 0.901
    ([0.6, 0.3, 0.0], 0.0011)
    >>> letter_logprobs([("x", -0.01), ("y", -5.0)], ["A", "B"])
    Traceback (most recent call last):
    reward.vlm.server.AnswerError: none of the options ['A', 'B'] is in the top-2 list
    """
    listed: dict[str, float] = {}
    for token, value in top:
        if not isinstance(token, str) or isinstance(value, bool) or not isinstance(value, int | float):
            raise AnswerError("malformed", f"top_logprobs entry ({token!r}, {value!r}) is not (text, number)")
        lp = float(value)
        if math.isnan(lp) or lp == math.inf:
            raise AnswerError("bad_logprob", f"the log-prob of {token!r} is {lp}")
        if lp > LOGPROB_TOLERANCE:
            raise AnswerError("positive_logprob", f"the log-prob of {token!r} is {lp} > 0 (a probability above 1)")
        listed[token] = max(listed.get(token, -math.inf), min(lp, 0.0))
    mass = sum(math.exp(v) for v in listed.values())
    if mass > 1.0 + 1e-3:
        raise AnswerError("bad_logprob", f"the listed probabilities sum to {mass:.4f} > 1")
    found = {c: listed[sep + c] for c in letters if sep + c in listed}
    found_mass = sum(math.exp(v) for v in found.values())
    absent = [c for c in letters if c not in found]
    if found_mass <= 0.0:
        raise AnswerError("options_absent", f"none of the options {list(letters)} is in the top-{len(listed)} list")
    share = 0.0
    if absent:
        if not single_tokens:
            raise AnswerError(
                "options_absent",
                f"options {absent} are not in the top-{len(listed)} list, and without a local tokenizer "
                "(server.tokenizer) an absent word may be several tokens",
            )
        bound = len(absent) * min(min(math.exp(v) for v in listed.values()), max(1.0 - mass, 0.0))
        share = bound / (bound + found_mass)
        if share > max_missing_mass:
            raise AnswerError(
                "missing_mass",
                f"options {absent} are not in the top-{len(listed)} list and could hold {share:.3f} of the options' "
                f"probability > server.max_missing_mass={max_missing_mass}; raise server.top_logprobs and the "
                "server's --max-logprobs",
            )
    return [found.get(c, -math.inf) for c in letters], share


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Seconds to wait before retry ``attempt`` (1, 2, ...): ``base * 2^(attempt-1)``, at most ``cap``, times a
    jitter in [0.5, 1] so that many clients do not retry in step.

    >>> [backoff_delay(a, 0.5, 8.0, random.Random(0)) <= 0.5 * 2 ** (a - 1) for a in (1, 2, 3)]
    [True, True, True]
    >>> backoff_delay(9, 0.5, 8.0, random.Random(0)) <= 8.0
    True
    """
    return min(cap, base * 2 ** (attempt - 1)) * rng.uniform(0.5, 1.0)


class ServerPool:
    """The servers of one backend: least-busy choice, a bound on requests in flight, retries with backoff, and a
    circuit breaker (a server failing ``breaker_failures`` tries in a row is skipped for ``breaker_cooldown`` s)."""

    def __init__(self, cfg: ServerConfig) -> None:
        from openai import OpenAI

        self.cfg = cfg
        self.urls = cfg.urls
        key = cfg.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        # the openai client's own retries are off: this pool retries, on another server first
        self.clients = {u: OpenAI(base_url=u, api_key=key, timeout=cfg.timeout, max_retries=0) for u in self.urls}
        self._lock = threading.Lock()
        self._gate = threading.BoundedSemaphore(max(1, cfg.concurrency))
        self._busy = dict.fromkeys(self.urls, 0)
        self._avoid_until = dict.fromkeys(self.urls, 0.0)
        self._streak = dict.fromkeys(self.urls, 0)  # failed tries in a row
        self._down_until = dict.fromkeys(self.urls, 0.0)  # circuit breaker: skipped until then
        self._tripped = dict.fromkeys(self.urls, False)  # marked down once: one more failure marks it down again
        self._last_error = dict.fromkeys(self.urls, "")
        self._turn = 0
        self._rng = random.Random(0)
        self.stats: dict[str, Any] = {
            "requests": 0,
            "failed": 0,
            "failed_reasons": Counter(),
            "retries": 0,
            "answers": 0,
            "missing_mass_sum": 0.0,
            "missing_mass_max": 0.0,
            "marked_down": 0,
            "per_server": dict.fromkeys(self.urls, 0),
        }

    def _pick(self, avoid: str | None) -> str:
        now = time.monotonic()
        with self._lock:
            up = [u for u in self.urls if self._down_until[u] <= now]
            if not up:
                report = "; ".join(self._last_error[u] for u in self.urls)
                raise ServersDown(
                    f"every scoring server is down ({self.cfg.breaker_failures} failed tries in a row; {report}); "
                    "the run stops instead of waiting out every request. Check the servers (docs/serving.md), or set "
                    "server.breaker_failures (0: never mark a server down) / "
                    "server.timeout"
                )
            healthy = [u for u in up if self._avoid_until[u] <= now and u != avoid]
            pool = healthy or [u for u in up if u != avoid] or up
            self._turn += 1
            k = self._turn % len(pool)
            url = min(pool[k:] + pool[:k], key=lambda u: self._busy[u])  # least busy; ties in turn
            self._busy[url] += 1
        return url

    def _record(self, url: str, error: str | None) -> None:
        """One try's outcome on ``url`` (``error=None``: it answered): the breaker's count of failures in a row."""
        with self._lock:
            if error is None:
                self._streak[url] = 0
                self._tripped[url] = False
                self._avoid_until[url] = 0.0
                return
            self._last_error[url] = error
            self._streak[url] += 1
            self._avoid_until[url] = time.monotonic() + self.cfg.backoff_max  # keep away for a while
            n = self.cfg.breaker_failures
            if n > 0 and (self._streak[url] >= n or self._tripped[url]):
                already = self._down_until[url] > time.monotonic()  # a request sent before it was marked down
                self._down_until[url] = time.monotonic() + self.cfg.breaker_cooldown
                self._tripped[url] = True
                self._streak[url] = 0
                if already:
                    return
                self.stats["marked_down"] += 1
                logger.warning(
                    "scoring server %s marked down for %.0f s after %d failed tries in a row (last: %s)",
                    url,
                    self.cfg.breaker_cooldown,
                    n,
                    error,
                )

    def call(self, fn: Callable[[Any], T]) -> T:
        """``fn(client)`` on one server; retried (elsewhere first) after timeouts, connection errors and 5xx/429.
        A malformed answer (:class:`AnswerError`, raised by ``fn``'s parsing) fails at once, without a retry: the
        server answered. Raises :class:`ServerRequestError` (with its reason), or :class:`ServersDown`."""
        import openai

        last: str | None = None
        errors: list[str] = []
        reason = "failed"
        for attempt in range(self.cfg.max_retries + 1):
            if attempt:
                with self._lock:
                    self.stats["retries"] += 1
                time.sleep(backoff_delay(attempt, self.cfg.backoff, self.cfg.backoff_max, self._rng))
            url = self._pick(last if len(self.urls) > 1 else None)
            try:
                with self._gate:
                    result = fn(self.clients[url])
                with self._lock:
                    self.stats["requests"] += 1
                    self.stats["per_server"][url] += 1
                self._record(url, None)
                return result
            except openai.APITimeoutError:
                reason, error = "timeout", f"{url}: timeout after {self.cfg.timeout:g} s"
            except openai.APIConnectionError as err:
                reason, error = "connection", f"{url}: {type(err).__name__}"
            except openai.APIStatusError as err:
                reason, error = f"http_{err.status_code}", f"{url}: HTTP {err.status_code}"
                if err.status_code < 500 and err.status_code not in RETRY_STATUS:
                    self._record(url, None)  # it answered: a refusal of this request, not a server down
                    raise ServerRequestError(
                        f"{url} refused the request ({err.status_code}): {err.message}", reason
                    ) from err
            except AnswerError as err:
                self._record(url, None)
                raise ServerRequestError(f"{url}: {err}", err.reason) from err
            except (openai.APIResponseValidationError, json.JSONDecodeError) as err:
                self._record(url, None)
                raise ServerRequestError(f"{url}: a malformed answer ({type(err).__name__})", "malformed") from err
            finally:
                with self._lock:
                    self._busy[url] -= 1
            errors.append(error)
            self._record(url, error)
            last = url
        raise ServerRequestError(
            f"no answer after {self.cfg.max_retries + 1} tries: " + "; ".join(errors[-3:]), reason
        )

    def map(self, fn: Callable[[Any], T], items: Sequence[Any]) -> list[T]:
        """``fn`` over ``items`` concurrently (at most ``concurrency`` at once), in order; errors propagate."""
        if len(items) <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=max(1, min(self.cfg.concurrency, len(items)))) as pool:
            return list(pool.map(fn, items))

    def served_models(self) -> dict[str, list[str] | str]:
        """Each server's model ids, or the error that kept it from answering."""
        out: dict[str, list[str] | str] = {}
        for url, client in self.clients.items():
            try:
                out[url] = [m.id for m in client.models.list().data]
            except Exception as err:  # noqa: BLE001 - any reason a server does not answer is reported
                out[url] = f"{type(err).__name__}: {str(err)[:120]}"
        return out


class OpenAIBackend:
    """Chat completions and option log-probabilities from one or more OpenAI-compatible servers.

    The same ``option_logprobs`` as :class:`reward.vlm.VLM` (``reuse_prefix`` is accepted and left to the server's
    own prefix caching), so a reward takes either.
    """

    def __init__(self, cfg: ServerConfig, *, check: bool = True) -> None:
        if not cfg.urls:
            raise ConfigError(
                "backend=openai needs server.base_urls (e.g. [http://localhost:8000/v1]) or server.base_url: "
                "the OpenAI-compatible server(s) to score with"
            )
        if cfg.top_logprobs < 1:
            raise ConfigError(f"server.top_logprobs must be >= 1, got {cfg.top_logprobs}")
        if cfg.max_retries < 0 or cfg.concurrency < 1 or cfg.timeout <= 0 or cfg.backoff < 0:
            raise ConfigError(
                "server.max_retries must be >= 0, server.concurrency >= 1, server.timeout > 0 and server.backoff "
                f">= 0; got {cfg.max_retries}, {cfg.concurrency}, {cfg.timeout}, {cfg.backoff}"
            )
        if not 0.0 <= cfg.max_missing_mass < 1.0:
            raise ConfigError(
                f"server.max_missing_mass={cfg.max_missing_mass}: give a share in [0, 1), e.g. 0.01 (the most option "
                "probability that options absent from the top-k may hold for an item to be scored)"
            )
        if cfg.breaker_failures < 0 or cfg.breaker_cooldown < 0:
            raise ConfigError(
                f"server.breaker_failures={cfg.breaker_failures} and server.breaker_cooldown={cfg.breaker_cooldown} "
                "must be >= 0 (breaker_failures=0: never mark a server down)"
            )
        self.cfg = cfg
        self.pool = ServerPool(cfg)
        self.model = cfg.model
        self.tokenizer: Any = None
        self._tokenizer_asked = False  # use_tokenizer was called (else check() looks for server.tokenizer)
        self._warned: set[str] = set()
        if check:
            self.check_servers()
        if self.model is None:
            raise ConfigError("backend=openai needs server.model, the served model name (the servers list it)")

    @classmethod
    def from_config(cls, raw: dict[str, Any] | ServerConfig, **kwargs: Any) -> OpenAIBackend:
        cfg = raw if isinstance(raw, ServerConfig) else parse(ServerConfig, raw, where="server")
        return cls(cfg, **kwargs)

    @property
    def stats(self) -> dict[str, Any]:
        return self.pool.stats

    def check_servers(self) -> None:
        """Fail at the start, naming each server's problem, when none answers or none serves ``server.model``; a
        server that does not answer now is warned about and tried again later. ``model: null`` takes the servers'
        only model."""
        served = self.pool.served_models()
        up = {u: ids for u, ids in served.items() if isinstance(ids, list)}
        report = "\n  - ".join(f"{u}: {v}" for u, v in served.items())
        if not up:
            raise ServerUnavailable(
                f"no scoring server answered:\n  - {report}\nStart it (docs/serving.md) or fix "
                "server.base_urls; each URL ends in /v1"
            )
        ids = sorted({i for v in up.values() for i in v})
        if self.model is None and len(ids) == 1:
            self.model = ids[0]
        if self.model is not None and not any(self.model in v for v in up.values()):
            raise ServerUnavailable(f"no server serves model {self.model!r}; served: {ids}. Set server.model to one")
        for url in served.keys() - up.keys():
            logger.warning("scoring server %s does not answer (%s); the others take its share", url, served[url])

    def use_tokenizer(self, path: str | None) -> None:
        """Check option words against this tokenizer (``server.tokenizer`` wins over ``path``); without one, a word
        that is not one token is never in the top-k list, so an item whose answer does not list every option fails
        (``options_absent``) instead of being scored."""
        self._tokenizer_asked = True
        source = self.cfg.tokenizer or path
        if not source:
            logger.warning(
                "no local tokenizer for the served model (server.tokenizer): option words cannot be checked to be "
                "one token, so an item whose answer's top-%d does not list every option fails (options_absent)",
                self.cfg.top_logprobs,
            )
            return
        from transformers import AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source)
        except (OSError, ValueError) as err:
            logger.warning("no tokenizer at %s (%s): option words are not checked before scoring", source, err)

    def candidate_ids(self, query: OptionQuery, system: str | None = None) -> list[int]:
        """The options' token ids after the response prefix, by the local tokenizer (fails on a word of several
        tokens, as in-process scoring does); ``[]`` when there is no local tokenizer."""
        if self.tokenizer is None:
            return []
        from reward.vlm.tokens import resolve_candidates

        return resolve_candidates(self.tokenizer, query.response_prefix, query.options, query.separator)

    def check(self, queries: Sequence[OptionQuery], *, system: str | None = None) -> None:
        """Fail before any scoring when an option word is not one token (with a local tokenizer; see
        :meth:`use_tokenizer`), as PACE's local backend does."""
        if not self._tokenizer_asked:
            self.use_tokenizer(None)
        for q in queries:
            self.candidate_ids(q, system)

    def _extra(self, prefix: str) -> dict[str, Any] | None:
        extra: dict[str, Any] = {}
        if prefix:
            extra.update(continue_final_message=True, add_generation_prompt=False)
        if self.cfg.chat_template_kwargs:
            extra["chat_template_kwargs"] = dict(self.cfg.chat_template_kwargs)
        return extra or None

    def chat(
        self,
        prompts: Sequence[str],
        images: Sequence[Sequence[Image.Image]],
        *,
        system: str | None = None,
        max_new_tokens: int = 512,
    ) -> list[str]:
        """One deterministic answer per (prompt, image group); a request that fails on every try raises."""

        def one(item: tuple[str, Sequence[Image.Image]]) -> str:
            def ask(client: Any) -> str:
                resp = client.chat.completions.with_raw_response.create(
                    model=self.model,
                    messages=messages(item[0], item[1], system),
                    temperature=0.0,
                    max_tokens=max_new_tokens,
                    extra_body=self._extra(""),
                )
                return answer_text(resp.http_response.text)

            return self.pool.call(ask)

        return self.pool.map(one, list(zip(prompts, images, strict=True)))

    def image_preparer(self) -> None:
        """No image processor here: the server prepares the images it is sent (PIL images are encoded as PNG)."""
        return None

    def option_logprobs(
        self,
        images: Sequence[Sequence[Image.Image]],
        queries: Sequence[OptionQuery],
        *,
        system: str | None = None,
        reuse_prefix: bool = True,
    ) -> OptionLogProbs:
        """Every query about every image group, one request each; a request that fails on every try, a malformed
        answer or one whose options are not resolved gives a NaN row flagged in ``failed`` (counted in ``stats`` with
        its reason), never an exception -- except :class:`ServersDown` when every server is marked down."""
        items = [(g, q) for g in range(len(images)) for q in range(len(queries))]
        k_max = max(len(q.options) for q in queries)

        def one(item: tuple[int, int]) -> tuple[list[float], float] | None:
            group, query = images[item[0]], queries[item[1]]

            def ask(client: Any) -> list[tuple[Any, Any]]:
                resp = client.chat.completions.with_raw_response.create(
                    model=self.model,
                    messages=messages(query.question, group, system, query.response_prefix),
                    temperature=0.0,
                    max_tokens=1,
                    logprobs=True,
                    top_logprobs=self.cfg.top_logprobs,
                    extra_body=self._extra(query.response_prefix),
                )
                return answer_top_logprobs(resp.http_response.text)

            try:
                top = self.pool.call(ask)
                return letter_logprobs(
                    top,
                    query.options,
                    query.separator,
                    max_missing_mass=self.cfg.max_missing_mass,
                    single_tokens=self.tokenizer is not None,
                )
            except (ServerRequestError, AnswerError) as err:
                self._failed(err.reason, str(err))
                return None
            except ServersDown as err:  # counted, then the run stops
                self._failed("server_down", str(err))
                raise

        results = self.pool.map(one, items)
        logprobs = torch.full((len(images), len(queries), k_max), -math.inf)
        missing = torch.zeros(len(images), len(queries))
        failed = torch.zeros(len(images), len(queries), dtype=torch.bool)
        for (g, q), res in zip(items, results, strict=True):
            if res is None:
                logprobs[g, q] = math.nan
                failed[g, q] = True
                continue
            lps, miss = res
            logprobs[g, q, : len(lps)] = torch.tensor(lps)
            missing[g, q] = miss
        self._count_missing(missing[~failed])
        options = [[q.options for q in queries] for _ in images]
        return OptionLogProbs(logprobs, options, missing_mass=missing, failed=failed)

    def _failed(self, reason: str, message: str) -> None:
        with self.pool._lock:
            self.stats["failed"] += 1
            self.stats["failed_reasons"][reason] += 1
            first = reason not in self._warned
            self._warned.add(reason)
        if first:
            logger.warning("a scoring item failed (scored as None, counted as %s): %s", reason, message)

    def count_failed(self, reason: str, message: str, n: int = 1) -> None:
        """Items a reward could not score from answers counted as resolved (moved to ``stats["failed"]``, with
        ``reason``)."""
        with self.pool._lock:
            self.stats["answers"] -= n
        for _ in range(n):
            self._failed(reason, message)

    def _count_missing(self, missing: torch.Tensor) -> None:
        if missing.numel() == 0:
            return
        worst = float(missing.max())
        with self.pool._lock:
            self.stats["answers"] += missing.numel()
            self.stats["missing_mass_sum"] += float(missing.sum())
            self.stats["missing_mass_max"] = max(self.stats["missing_mass_max"], worst)
        if worst > 0 and "missing" not in self._warned:
            self._warned.add("missing")
            logger.info(
                "options absent from the server's top-%d log-probs were taken as 0 (they could hold at most %.4f of "
                "an answer's option probability; server.max_missing_mass=%g)",
                self.cfg.top_logprobs,
                worst,
                self.cfg.max_missing_mass,
            )


def failure_summary(stats: dict[str, Any]) -> str:
    """A short line of a backend's failures: ``"3 of 8 items failed (http_500 2, not_json 1)"``.

    >>> failure_summary({"failed": 3, "answers": 5, "failed_reasons": {"http_500": 2, "not_json": 1}})
    '3 of 8 items failed (http_500 2, not_json 1)'
    """
    reasons = sorted(dict(stats.get("failed_reasons") or {}).items(), key=lambda kv: (-kv[1], kv[0]))
    total = int(stats.get("failed", 0)) + int(stats.get("answers", 0))
    detail = ", ".join(f"{r} {n}" for r, n in reasons)
    return f"{stats.get('failed', 0)} of {total} items failed" + (f" ({detail})" if detail else "")


def server_report(stats: dict[str, Any]) -> dict[str, Any]:
    """The counters of a backend as plain JSON (for metrics.json and summaries).

    >>> server_report({"requests": 2, "failed": 1, "failed_reasons": Counter(not_json=1), "per_server": {}})
    {'requests': 2, 'failed': 1, 'failed_reasons': {'not_json': 1}}
    """
    out = {k: v for k, v in stats.items() if k not in ("failed_reasons", "per_server", "missing_mass_sum")}
    out["failed_reasons"] = dict(sorted(dict(stats.get("failed_reasons") or {}).items()))
    return out


def served_stats(reward: Any) -> dict[str, Any] | None:
    """The request counters of a reward that scores through servers (``backend=openai``), else ``None``."""
    for attr in ("vlm", "backend"):
        stats = getattr(getattr(reward, attr, None), "stats", None)
        if isinstance(stats, dict) and "requests" in stats:
            return stats
    return None


def served_vlm(server: ServerConfig | dict[str, Any], *, tokenizer: str | None = None) -> OpenAIBackend:
    """The backend a reward scores through with ``backend=openai``: checked at the start (servers up, model served),
    option words checked with ``tokenizer`` (a local copy of the served model's, e.g. the scorer folder)."""
    backend = OpenAIBackend.from_config(server)
    backend.use_tokenizer(tokenizer)
    return backend


def check_backend(backend: str, where: str = "reward") -> None:
    if backend not in ("local", "openai"):
        raise ConfigError(
            f"{where}.backend={backend!r}: use local (the model in this process) or openai (OpenAI-compatible servers)"
        )
