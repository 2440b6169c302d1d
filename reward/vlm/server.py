"""One or more OpenAI-compatible servers (vLLM, SGLang) as a VLM: the option-log-prob primitive and free text
(``reward.backend=openai 'reward.server.base_urls=[URL,...]'``; docs/serving.md has the rules and the reasons).

One ``openai.OpenAI`` client per URL times out and retries; items take the URLs in turn, a failed one going on to the
next. An item failed on every URL, malformed or with its options unresolved is a NaN row flagged in
``OptionLogProbs.failed`` and counted by reason in ``stats``, never a made-up number; ``chat`` raises instead.
"""

from __future__ import annotations

import base64
import io
import itertools
import logging
import math
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from PIL import Image

from reward.core.config import parse
from reward.core.errors import UserError
from reward.core.secrets import api_key, mask
from reward.data.manifest import parse_json
from reward.vlm.loading import ServerConfig
from reward.vlm.model import OptionLogProbs, OptionQuery, content_parts

logger = logging.getLogger(__name__)


class AnswerError(ValueError):
    """A 200 answer that cannot give a score (malformed, or its options not resolved); ``reason`` names why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def parse_answer(body: str, top_logprobs: bool = True) -> Any:
    """A chat completion's (raw JSON ``body``) first-position ``(token, logprob)`` list (checked by
    :func:`letter_logprobs`), or its text (not ``top_logprobs``); :class:`AnswerError` with the reason if it has none.

    >>> parse_answer('{"choices": [{"logprobs": {"content": [{"top_logprobs": [{"token": "A", "logprob": 0}]}]}}]}')
    [('A', 0)]
    >>> parse_answer("<html>502 Bad Gateway</html>")
    Traceback (most recent call last):
    reward.vlm.server.AnswerError: the answer is not JSON: '<html>502 Bad Gateway</html>'
    """
    try:
        data = parse_json(body)  # a body nested too deeply for json is not JSON here either
    except ValueError:
        raise AnswerError("not_json", f"the answer is not JSON: {body[:80]!r}") from None
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise AnswerError("no_choices", f"the answer has no choices: {body[:80]!r}")
    if not top_logprobs:
        message = choices[0].get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if content is not None and not isinstance(content, str):
            raise AnswerError("malformed", f"the answer's message content is not text: {type(content).__name__}")
        return content or ""
    try:
        top = choices[0]["logprobs"]["content"][0]["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        top = None
    if not isinstance(top, list) or not top:
        raise AnswerError("no_logprobs", "the answer has no top_logprobs: the server must give them (vLLM, SGLang do)")
    return [(t.get("token"), t.get("logprob")) if isinstance(t, dict) else (t, None) for t in top]  # checked later


def messages(
    prompt: str, images: Sequence[Image.Image], system: str | None = None, response_prefix: str = ""
) -> list[dict[str, Any]]:
    """The chat messages of one query, laid out as the local VLM renders it (images where ``<image>`` markers place
    them, else first, then the text); the response prefix as a final assistant message, to be continued
    (``continue_final_message``).

    >>> [p["type"] for p in messages("A: <image> B: <image>", [Image.new("RGB", (2, 2))] * 2)[0]["content"]]
    ['text', 'image_url', 'text', 'image_url']
    """
    pngs = [io.BytesIO() for _ in images]
    for im, buf in zip(images, pngs, strict=True):  # lossless: the server sees the pixels the local model would
        im.convert("RGB").save(buf, format="PNG")
    urls = iter(["data:image/png;base64," + base64.b64encode(buf.getvalue()).decode() for buf in pngs])
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
        if lp > 1e-6:
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


class OpenAIBackend:
    """Chat completions and option log-probabilities from one or more OpenAI-compatible servers: the same
    ``option_logprobs`` as :class:`reward.vlm.VLM` (``reuse_prefix`` left to the server's prefix cache)."""

    def __init__(self, cfg: ServerConfig) -> None:
        from openai import OpenAI

        if not cfg.urls:
            raise UserError(
                "backend=openai needs server.base_urls (e.g. [http://localhost:8000/v1]) or server.base_url: "
                "the OpenAI-compatible server(s) to score with"
            )
        self.cfg, self.urls, self.model, self.tokenizer = cfg, cfg.urls, cfg.model, None
        # "EMPTY" when unset: vLLM and SGLang take any key unless started with one
        key = api_key(cfg.api_key_env, self.urls)
        self.clients = [
            OpenAI(base_url=u, api_key=key, timeout=cfg.timeout, max_retries=cfg.max_retries) for u in self.urls
        ]
        self.stats: dict[str, Any] = dict(requests=0, failed=0, failed_reasons=Counter(), answers=0)
        self.stats |= dict(missing_mass_sum=0.0, missing_mass_max=0.0)
        self._turn, self._warned = itertools.count(), set()  # round-robin: each item starts at the next URL
        self.check_servers()

    def check_servers(self) -> None:
        """Fail at the start, naming each server's problem in one line, when none answers or none serves
        ``server.model`` (``null``: the servers' only model); a server that does not answer now is warned about."""
        served: dict[str, Any] = {}
        for url, client in zip(self.urls, self.clients, strict=True):
            try:
                served[url] = [m.id for m in client.models.list().data]
            except Exception as err:  # noqa: BLE001 - any reason a server does not answer is reported
                served[url] = f"{type(err).__name__}: {mask(str(err))[:120]}"  # a 401 body may echo the key
        up = {u: ids for u, ids in served.items() if isinstance(ids, list)}
        if not up:
            named = "; ".join(f"{mask(u)}: {v}" for u, v in served.items())
            raise UserError(
                f"no scoring server answered ({named}); start it (docs/serving.md) or fix server.base_urls"
            )
        ids = sorted({i for v in up.values() for i in v})
        self.model = self.model or (ids[0] if len(ids) == 1 else None)
        if self.model not in ids:
            raise UserError(f"no server serves model {self.model!r}; served: {ids}. Set server.model to one")
        for url in served.keys() - up.keys():
            logger.warning("scoring server %s does not answer (%s); the others take its share", mask(url), served[url])

    def use_tokenizer(self, path: str | None) -> None:
        """Check option words against this tokenizer (``server.tokenizer`` wins over ``path``); without one, an item
        whose answer does not list every option fails (``options_absent``): an absent word may be several tokens."""
        source = self.cfg.tokenizer or path
        if source:
            from transformers import AutoTokenizer

            try:
                self.tokenizer = AutoTokenizer.from_pretrained(source)
                return
            except (OSError, ValueError) as err:
                source = f"{source}: {err}"
        logger.warning(
            "no local tokenizer for the served model (server.tokenizer; %s): option words are not checked, and an "
            "item whose answer does not list every option fails (options_absent)",
            source,
        )

    def candidate_ids(self, query: OptionQuery, system: str | None = None) -> list[int]:
        """The options' token ids after the response prefix by the local tokenizer (fails on a word of several
        tokens, as in-process scoring does); ``[]`` without one."""
        from reward.vlm.tokens import resolve_candidates

        if self.tokenizer is None:
            return []
        return resolve_candidates(self.tokenizer, query.response_prefix, query.options, query.separator)

    def image_preparer(self) -> None:
        return None  # the server prepares the images it is sent

    def _ask(self, msgs: list[dict[str, Any]], unreachable: dict[int, Exception], **kw: Any) -> Any:
        """One chat completion, parsed (:func:`parse_answer`), on the URL whose turn it is, then on the next ones while
        it fails (each client retrying first; a URL not reached joins ``unreachable`` for the rest of the call).
        Raises the last error when every URL failed; an :class:`AnswerError` at once (the server answered)."""
        import openai

        extra = {"chat_template_kwargs": self.cfg.chat_template_kwargs} if self.cfg.chat_template_kwargs else {}
        if msgs[-1]["role"] == "assistant":  # the response prefix, continued (vLLM's and SGLang's extension)
            extra |= dict(continue_final_message=True, add_generation_prompt=False)
        start, error = next(self._turn), None
        for i in (i % len(self.urls) for i in range(start, start + len(self.urls))):
            if i in unreachable:
                error = error or unreachable[i]
                continue
            try:
                answer = self.clients[i].chat.completions.with_raw_response.create(
                    model=self.model, messages=msgs, temperature=0.0, extra_body=extra or None, **kw
                )
            except openai.APIError as err:  # after the client's own retries
                error = err
                if isinstance(err, openai.APIConnectionError):  # refused, or timed out: not asked again
                    unreachable[i] = err
                continue
            return parse_answer(answer.http_response.text, top_logprobs="top_logprobs" in kw)
        raise error  # type: ignore[misc]  # set: every URL failed for this item, or was left out before

    def _map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``fn`` over ``items`` in threads (HTTP only), its result or error each; counted here: answered requests,
        failures."""
        import openai

        def caught(item: Any) -> Any:
            try:
                return fn(item)
            except (AnswerError, openai.APIError) as err:
                return err

        with ThreadPoolExecutor(max_workers=max(1, min(self.cfg.concurrency, len(items)))) as pool:
            results = list(pool.map(caught, items))
        for result in results:
            self.stats["requests"] += not isinstance(result, openai.APIError)
            if isinstance(result, Exception):
                self._failed(result)
        return results

    def answers(
        self,
        prompts: Sequence[str],
        images: Sequence[Sequence[Image.Image]],
        *,
        system: str | None = None,
        max_new_tokens: int = 512,
        parse: Callable[[str], Any] | None = None,
    ) -> list[Any]:
        """One deterministic answer per (prompt, image group), read by ``parse`` (an :class:`AnswerError` it raises
        fails the item), or the item's error; failures counted in ``stats`` with their reason, never raised."""
        unreachable: dict[int, Exception] = {}

        def one(item: tuple[str, Sequence[Image.Image]]) -> Any:
            text = self._ask(messages(item[0], item[1], system), unreachable, max_tokens=max_new_tokens)
            return parse(text) if parse else text

        results = self._map(one, list(zip(prompts, images, strict=True)))
        self.stats["answers"] += sum(not isinstance(r, Exception) for r in results)
        return results

    def chat(
        self,
        prompts: Sequence[str],
        images: Sequence[Sequence[Image.Image]],
        *,
        system: str | None = None,
        max_new_tokens: int = 512,
    ) -> list[str]:
        """One deterministic answer per (prompt, image group); a request that failed on every server raises."""
        texts = self.answers(prompts, images, system=system, max_new_tokens=max_new_tokens)
        for text in texts:
            if isinstance(text, Exception):  # an agent cannot go on without its answer
                raise RuntimeError(f"a chat request failed on every server: {mask(str(text))}") from None
        return texts

    def option_logprobs(
        self,
        images: Sequence[Sequence[Image.Image]],
        queries: Sequence[OptionQuery],
        *,
        system: str | None = None,
        reuse_prefix: bool = True,
    ) -> OptionLogProbs:
        """Every query about every image group, one request each; an item that failed on every server, a malformed
        answer or one whose options are not resolved is a NaN row flagged in ``failed`` (counted in ``stats`` with
        its reason), never an exception."""
        items = [(g, q) for g in range(len(images)) for q in range(len(queries))]
        unreachable: dict[int, Exception] = {}

        def one(item: tuple[int, int]) -> tuple[list[float], float]:
            q = queries[item[1]]
            msgs = messages(q.question, images[item[0]], system, q.response_prefix)
            top = self._ask(msgs, unreachable, max_tokens=1, logprobs=True, top_logprobs=self.cfg.top_logprobs)
            mass, single = self.cfg.max_missing_mass, self.tokenizer is not None
            return letter_logprobs(top, q.options, q.separator, max_missing_mass=mass, single_tokens=single)

        logprobs = torch.full((len(images), len(queries), max(len(q.options) for q in queries)), -math.inf)
        missing = torch.zeros(len(images), len(queries))
        failed = torch.zeros(len(images), len(queries), dtype=torch.bool)
        for (g, q), res in zip(items, self._map(one, items), strict=True):
            if isinstance(res, Exception):
                logprobs[g, q], failed[g, q] = math.nan, True
            else:
                logprobs[g, q, : len(res[0])], missing[g, q] = torch.tensor(res[0]), res[1]
        scored = missing[~failed].tolist()
        self.stats["answers"] += len(scored)
        self.stats["missing_mass_sum"] += sum(scored)
        self.stats["missing_mass_max"] = max([self.stats["missing_mass_max"], *scored])
        options = [[q.options for q in queries] for _ in images]
        return OptionLogProbs(logprobs, options, missing_mass=missing, failed=failed)

    def _failed(self, err: Exception) -> None:
        """Count a failed item by its reason: an :class:`AnswerError`'s, or for an openai client error (after its
        retries, on every server) ``http_<status>``, ``timeout`` or ``connection``."""
        import openai

        if isinstance(err, AnswerError):
            reason = err.reason
        elif isinstance(err, openai.APIStatusError):
            reason = f"http_{err.status_code}"
        else:
            reason = "timeout" if isinstance(err, openai.APITimeoutError) else "connection"
        self.stats["failed"] += 1
        self.stats["failed_reasons"][reason] += 1
        if reason not in self._warned:
            self._warned.add(reason)
            logger.warning("a scoring item failed (scored as None, counted as %s): %s", reason, mask(str(err)))

    def count_failed(self, reason: str, message: str, n: int = 1) -> None:
        """Items a reward could not score from answers counted as resolved (moved to ``stats["failed"]``)."""
        self.stats["answers"] -= n
        for _ in range(n):
            self._failed(AnswerError(reason, message))


def served_vlm(server: ServerConfig | dict[str, Any], *, tokenizer: str | None = None) -> OpenAIBackend:
    """The backend a reward scores through with ``backend=openai``: checked at the start (servers up, model served),
    option words checked with ``tokenizer`` (a local copy of the served model's, e.g. the scorer folder)."""
    backend = OpenAIBackend(
        server if isinstance(server, ServerConfig) else parse(ServerConfig, server, where="server")
    )
    backend.use_tokenizer(tokenizer)
    return backend
