"""An OpenAI-compatible server (e.g. vLLM) as a VLM: chat completions (free text), and ``logprobs`` /
``top_logprobs`` of a one-token answer for the option words of :class:`~reward.vlm.OptionQuery` queries.

    python pace_judge/judge.py backend=openai server.base_url=http://localhost:8000/v1 server.model=NAME ...

A letter absent from the server's top-k list is not given zero probability silently: it gets the smaller of the
k-th listed probability and an equal share of the unlisted mass (an upper bound), and that assigned mass is
reported per probe as ``missing_mass`` in the explanations. vLLM caps k at ``--max-logprobs`` (default 20).
"""

from __future__ import annotations

import base64
import io
import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image

from reward.core.config import from_mapping
from reward.vlm.model import OptionLogProbs, OptionQuery


@dataclass
class ServerConfig:
    base_url: str | None = None  # e.g. http://localhost:8000/v1
    model: str | None = None  # the served model name
    api_key: str | None = "EMPTY"  # or the OPENAI_API_KEY environment variable
    top_logprobs: int = 20  # letters outside the top-k are reported as missing mass
    timeout: float = 60.0  # seconds per request
    max_retries: int = 2  # the openai client's retries on connection errors and 5xx
    concurrency: int = 8  # requests in flight


def image_url(image: Image.Image) -> str:
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def messages(
    prompt: str, images: Sequence[Image.Image], system: str | None = None, response_prefix: str = ""
) -> list[dict[str, Any]]:
    """The chat messages of one query: images first, then the text (as the local VLM renders it)."""
    content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": image_url(im)}} for im in images]
    content.append({"type": "text", "text": prompt})
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    out.append({"role": "user", "content": content})
    if response_prefix:
        out.append({"role": "assistant", "content": response_prefix})
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


class OpenAIBackend:
    """Chat completions and option-letter log-probabilities from an OpenAI-compatible server."""

    def __init__(self, cfg: ServerConfig) -> None:
        from openai import OpenAI

        if not cfg.base_url or not cfg.model:
            raise ValueError(
                "backend=openai needs server.base_url (e.g. http://localhost:8000/v1) and server.model "
                "(the served model name)"
            )
        if cfg.top_logprobs < 1:
            raise ValueError(f"server.top_logprobs must be >= 1, got {cfg.top_logprobs}")
        self.cfg = cfg
        key = cfg.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self.client = OpenAI(base_url=cfg.base_url, api_key=key, timeout=cfg.timeout, max_retries=cfg.max_retries)

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> OpenAIBackend:
        return cls(from_mapping(ServerConfig, raw, where="server"))

    def _map(self, fn: Any, items: list[Any]) -> list[Any]:
        with ThreadPoolExecutor(max_workers=max(1, self.cfg.concurrency)) as pool:
            return list(pool.map(fn, items))

    def chat(
        self,
        prompts: Sequence[str],
        images: Sequence[Sequence[Image.Image]],
        *,
        system: str | None = None,
        max_new_tokens: int = 512,
    ) -> list[str]:
        def one(item: tuple[str, Sequence[Image.Image]]) -> str:
            msgs = messages(item[0], item[1], system)
            resp = self.client.chat.completions.create(
                model=self.cfg.model, messages=msgs, temperature=0.0, max_tokens=max_new_tokens
            )
            return resp.choices[0].message.content or ""

        return self._map(one, list(zip(prompts, images, strict=True)))

    def option_logprobs(
        self, images: Sequence[Sequence[Image.Image]], queries: Sequence[OptionQuery], *, system: str | None = None
    ) -> OptionLogProbs:
        items = [(g, q) for g in range(len(images)) for q in range(len(queries))]
        k_max = max(len(q.options) for q in queries)

        def one(item: tuple[int, int]) -> tuple[list[float], float]:
            group, query = images[item[0]], queries[item[1]]
            extra = {"continue_final_message": True, "add_generation_prompt": False} if query.response_prefix else {}
            resp = self.client.chat.completions.create(
                model=self.cfg.model,
                messages=messages(query.question, group, system, query.response_prefix),
                temperature=0.0,
                max_tokens=1,
                logprobs=True,
                top_logprobs=self.cfg.top_logprobs,
                extra_body=extra or None,
            )
            content = resp.choices[0].logprobs.content if resp.choices[0].logprobs else None
            if not content:
                raise ValueError(
                    f"{self.cfg.base_url}: the server returned no logprobs; it must support logprobs "
                    "and top_logprobs on chat completions (vLLM does)"
                )
            top = [(t.token, t.logprob) for t in content[0].top_logprobs]
            return letter_logprobs(top, query.options, query.separator)

        results = self._map(one, items)
        logprobs = torch.full((len(images), len(queries), k_max), -math.inf)
        missing = torch.zeros(len(images), len(queries))
        for (g, q), (lps, miss) in zip(items, results, strict=True):
            logprobs[g, q, : len(lps)] = torch.tensor(lps)
            missing[g, q] = miss
        return OptionLogProbs(logprobs, [[q.options for q in queries] for _ in images], missing_mass=missing)
