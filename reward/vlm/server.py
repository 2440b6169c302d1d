"""One or more OpenAI-compatible servers (vLLM, SGLang) as a VLM: the option-log-prob primitive and free text.

Every VLM reward (``sa-iqa``, ``qbench``, ``pace``) can score through it instead of an in-process model::

    accelerate launch rl/grpo.py reward=sa-iqa reward.path=SCORER reward.backend=openai \\
        'reward.server.base_urls=[http://gpu7:8000/v1,http://gpu8:8000/v1]' reward.server.model=sa-iqa ...

- **Data parallel.** Requests are spread over ``base_urls`` (the least busy server first), at most ``concurrency``
  in flight over all of them.
- **Failures.** A request that times out or meets a connection error or a 5xx/429 is retried on another server,
  after an exponential backoff with jitter; a server that failed is avoided for a while. After the last retry the
  answer is a failure: its row of log-probabilities is NaN and flagged in ``OptionLogProbs.failed``, the reward
  turns it into ``None`` and the run goes on (counted in :attr:`OpenAIBackend.stats`). Free text (``chat``, PACE's
  agents) raises instead: an agent cannot go on without its answer.
- **The response prefix** (e.g. "The quality of the image is") is sent as a final assistant message with
  ``continue_final_message=true, add_generation_prompt=false`` (vLLM's and SGLang's extension), so the server
  continues it exactly as the in-process model does; the answer is one token (``max_tokens=1``) with its
  ``top_logprobs``.
- **Missing mass.** An option absent from the server's top-k list is not given zero probability silently: it gets
  the smaller of the k-th listed probability and an equal share of the unlisted mass (an upper bound), and that
  assigned mass is reported per query (``OptionLogProbs.missing_mass``; ``stats["missing_mass_max"]``). vLLM caps k
  at ``--max-logprobs`` (default 20): enough for five level words.

Example (the loopback server of the tests stands in for vLLM)::

    >>> backend = OpenAIBackend(ServerConfig(base_urls=["http://127.0.0.1:8000/v1"]))  # doctest: +SKIP
    >>> query = OptionQuery("Rate the quality.", ("good", "poor"), "It is")  # doctest: +SKIP
    >>> backend.option_logprobs([[image]], [query]).logprobs.shape  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import io
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from PIL import Image

from reward.core.config import parse
from reward.core.errors import ConfigError, UserError
from reward.vlm.model import OptionLogProbs, OptionQuery, content_parts

logger = logging.getLogger(__name__)
T = TypeVar("T")

RETRY_STATUS = (408, 409, 429)  # and every 5xx: worth another try (on another server)


@dataclass
class ServerConfig:
    base_urls: list[str] = field(default_factory=list)  # e.g. [http://gpu7:8000/v1, http://gpu8:8000/v1]
    base_url: str | None = None  # one server (the same as base_urls=[URL])
    model: str | None = None  # the served model name; null: the servers' only model
    api_key: str | None = "EMPTY"  # or the OPENAI_API_KEY environment variable
    top_logprobs: int = 20  # options outside the top-k are reported as missing mass (vLLM: --max-logprobs)
    timeout: float = 60.0  # seconds per request
    max_retries: int = 3  # further tries of a failed request (another server first), each after a backoff
    backoff: float = 0.5  # seconds before the first retry, doubled each time (with jitter), at most backoff_max
    backoff_max: float = 8.0
    concurrency: int = 8  # requests in flight at most, over all servers
    tokenizer: str | None = None  # a local tokenizer folder to check option words are one token (default: the model's)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # e.g. {enable_thinking: false} (Qwen3-VL)

    @property
    def urls(self) -> list[str]:
        return list(dict.fromkeys([*([self.base_url] if self.base_url else []), *self.base_urls]))


class ServerUnavailable(UserError):
    """No configured server answered at the start, or the served model is not the one asked for."""


class ServerRequestError(RuntimeError):
    """One request that failed on every try (or was refused by the server)."""


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
    top: Sequence[tuple[str, float]], letters: Sequence[str], sep: str = ""
) -> tuple[list[float], float]:
    """Log-probabilities of ``letters`` from a top-k list of (token, logprob); and the mass assigned to absent ones.

    A letter is the token ``sep + letter`` exactly, as the local model reads it (" A" is another token than "A").

    >>> lp, missing = letter_logprobs([("A", math.log(0.6)), ("B", math.log(0.3))], ["A", "B", "C"])
    >>> [round(math.exp(v), 3) for v in lp], round(missing, 3)
    ([0.6, 0.3, 0.1], 0.1)
    """
    wanted = {sep + c: c for c in letters}
    found: dict[str, float] = {wanted[t]: lp for t, lp in top if t in wanted}
    listed = sum(math.exp(lp) for _, lp in top)
    absent = [c for c in letters if c not in found]
    missing = 0.0
    if absent:
        kth = min((math.exp(lp) for _, lp in top), default=1.0)
        share = min(kth, max(1.0 - listed, 0.0) / len(absent))
        missing = share * len(absent)
        for c in absent:
            found[c] = math.log(share) if share > 0 else -math.inf
    return [found[c] for c in letters], missing


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
    """The servers of one backend: least-busy choice, a bound on requests in flight, retries with backoff."""

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
        self._turn = 0
        self._rng = random.Random(0)
        self.stats: dict[str, Any] = {
            "requests": 0,
            "failed": 0,
            "retries": 0,
            "answers": 0,
            "missing_mass_sum": 0.0,
            "missing_mass_max": 0.0,
            "per_server": dict.fromkeys(self.urls, 0),
        }

    def _pick(self, avoid: str | None) -> str:
        now = time.monotonic()
        with self._lock:
            healthy = [u for u in self.urls if self._avoid_until[u] <= now and u != avoid]
            pool = healthy or [u for u in self.urls if u != avoid] or self.urls
            self._turn += 1
            k = self._turn % len(pool)
            url = min(pool[k:] + pool[:k], key=lambda u: self._busy[u])  # least busy; ties in turn
            self._busy[url] += 1
        return url

    def call(self, fn: Callable[[Any], T]) -> T:
        """``fn(client)`` on one server; retried (elsewhere first) after timeouts, connection errors and 5xx/429."""
        import openai

        last: str | None = None
        errors: list[str] = []
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
                    self._avoid_until[url] = 0.0
                return result
            except (openai.APIConnectionError, openai.APITimeoutError) as err:
                errors.append(f"{url}: {type(err).__name__}")
            except openai.APIStatusError as err:
                if err.status_code < 500 and err.status_code not in RETRY_STATUS:
                    raise ServerRequestError(f"{url} refused the request ({err.status_code}): {err.message}") from err
                errors.append(f"{url}: HTTP {err.status_code}")
            finally:
                with self._lock:
                    self._busy[url] -= 1
            last = url
            with self._lock:  # keep away from a failing server for a while
                self._avoid_until[url] = time.monotonic() + self.cfg.backoff_max
        raise ServerRequestError(f"no answer after {self.cfg.max_retries + 1} tries: " + "; ".join(errors[-3:]))

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
        self.cfg = cfg
        self.pool = ServerPool(cfg)
        self.model = cfg.model
        self.tokenizer: Any = None
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
                f"no scoring server answered:\n  - {report}\nStart it (README: serving a reward) or fix "
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
        that is not one token is never in the top-k list and shows up as missing mass."""
        source = self.cfg.tokenizer or path
        if not source:
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
                resp = client.chat.completions.create(
                    model=self.model,
                    messages=messages(item[0], item[1], system),
                    temperature=0.0,
                    max_tokens=max_new_tokens,
                    extra_body=self._extra(""),
                )
                return resp.choices[0].message.content or ""

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
        """Every query about every image group, one request each; a request that fails on every try gives a NaN
        row flagged in ``failed`` (counted in ``stats``), never an exception."""
        items = [(g, q) for g in range(len(images)) for q in range(len(queries))]
        k_max = max(len(q.options) for q in queries)

        def one(item: tuple[int, int]) -> tuple[list[float], float] | None:
            group, query = images[item[0]], queries[item[1]]

            def ask(client: Any) -> list[tuple[str, float]]:
                resp = client.chat.completions.create(
                    model=self.model,
                    messages=messages(query.question, group, system, query.response_prefix),
                    temperature=0.0,
                    max_tokens=1,
                    logprobs=True,
                    top_logprobs=self.cfg.top_logprobs,
                    extra_body=self._extra(query.response_prefix),
                )
                content = resp.choices[0].logprobs.content if resp.choices[0].logprobs else None
                if not content:
                    raise ServerRequestError(
                        "the server returned no logprobs; it must support logprobs and top_logprobs on chat "
                        "completions (vLLM and SGLang do)"
                    )
                return [(t.token, t.logprob) for t in content[0].top_logprobs]

            try:
                top = self.pool.call(ask)
            except ServerRequestError as err:
                self._failed(str(err))
                return None
            return letter_logprobs(top, query.options, query.separator)

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

    def _failed(self, message: str) -> None:
        with self.pool._lock:
            self.stats["failed"] += 1
            first = message not in self._warned
            self._warned.add(message)
        if first:
            logger.warning("scoring request failed (scored as None, counted): %s", message)

    def _count_missing(self, missing: torch.Tensor) -> None:
        if missing.numel() == 0:
            return
        worst = float(missing.max())
        with self.pool._lock:
            self.stats["answers"] += missing.numel()
            self.stats["missing_mass_sum"] += float(missing.sum())
            self.stats["missing_mass_max"] = max(self.stats["missing_mass_max"], worst)
        if worst > 0.05 and "missing" not in self._warned:
            self._warned.add("missing")
            logger.warning(
                "up to %.3f of an answer's option probability was missing from the server's top-%d log-probs "
                "(filled in as an upper bound); raise server.top_logprobs and the server's --max-logprobs",
                worst,
                self.cfg.top_logprobs,
            )


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
