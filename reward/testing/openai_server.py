"""A loopback OpenAI-compatible server in front of an in-process VLM, for tests of the server client (what vLLM or
SGLang would serve): ``GET /v1/models``; ``POST /v1/chat/completions`` with text, images as data URLs, a final
assistant message continued with ``continue_final_message`` (vLLM's rules: it needs ``add_generation_prompt=false``,
and a final assistant message without it is refused here rather than answered as a new turn), and ``logprobs`` /
``top_logprobs`` of a one-token answer. :func:`serve_scripted` answers without a model and injects faults: one mode
per malformed answer (:data:`FAULTS`, with the failure reason each must give), a 500 and a hung request."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from PIL import Image

from reward.vlm import OptionQuery
from reward.vlm.model import IMAGE


def vocab_logprobs(vlm: Any, images: list[Image.Image], question: str, prefix: str, system: str | None) -> Any:
    """The model's whole next-token log-distribution after ``prefix`` (through the same primitive as in-process
    scoring: the end-of-turn token is a one-token option in any context, and ``return_vocab`` gives the rest)."""
    query = OptionQuery(question, (vlm.tokenizer.eos_token,), prefix, sep="")
    return vlm.option_logprobs([images], [query], system=system, return_vocab=True).vocab.reshape(-1)


def _app(model_name: str) -> Any:
    """A FastAPI app answering ``GET /v1/models`` with ``model_name``."""
    from fastapi import FastAPI

    app = FastAPI()
    app.get("/v1/models")(
        lambda: {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "me"}]}
    )
    return app


def _image(url: str) -> Image.Image:
    """The image of a ``data:`` URL."""
    import base64
    import io

    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))


@contextmanager
def serve_openai(vlm: Any, model_name: str = "tiny", stats: dict[str, Any] | None = None) -> Iterator[str]:
    """Serve ``vlm`` on 127.0.0.1 (a free port); yields the base URL (``.../v1``) and stops the server after.
    ``stats["requests"]`` counts the chat requests answered."""
    import threading

    from fastapi import HTTPException

    from reward.testing.loopback import serve

    app = _app(model_name)
    counts = stats if stats is not None else {}
    counts.setdefault("requests", 0)
    lock = threading.Lock()  # one request at a time through the model, as one GPU's queue would

    @app.post("/v1/chat/completions")
    def completions(body: dict[str, Any]) -> dict[str, Any]:
        msgs = list(body["messages"])
        prefix = ""
        if body.get("continue_final_message"):
            if body.get("add_generation_prompt", True):
                raise HTTPException(400, "Cannot set both `continue_final_message` and `add_generation_prompt`")
            if msgs[-1]["role"] != "assistant":
                raise HTTPException(400, "continue_final_message needs a final assistant message")
            prefix = msgs.pop()["content"]
        elif msgs[-1]["role"] == "assistant":
            raise HTTPException(
                400, "a final assistant message is answered as a new turn without continue_final_message"
            )
        system = next((m["content"] for m in msgs if m["role"] == "system"), None)
        user = [m for m in msgs if m["role"] == "user"][-1]["content"]
        parts = user if isinstance(user, list) else [{"type": "text", "text": user}]
        images = [_image(p["image_url"]["url"]).convert("RGB") for p in parts if p["type"] == "image_url"]
        # images stand where the message puts them (as the VLM renders <image> markers; images first: the same text)
        text = "".join(IMAGE if p["type"] == "image_url" else p["text"] for p in parts)
        with lock:
            choice = answer(body, images, text, prefix, system)
            counts["requests"] += 1
        return {
            "id": "chatcmpl-local",
            "object": "chat.completion",
            "created": 0,
            "model": model_name,
            "choices": [choice],
        }

    def answer(body: dict[str, Any], images: list[Image.Image], text: str, prefix: str, system: Any) -> dict:
        choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
        if body.get("logprobs"):
            top = vocab_logprobs(vlm, images, text, prefix, system).topk(int(body.get("top_logprobs") or 1))
            tokens = [vlm.tokenizer.decode([int(i)]) for i in top.indices]
            listed = [
                {"token": t, "logprob": float(v), "bytes": None} for t, v in zip(tokens, top.values, strict=True)
            ]
            choice["message"] = {"role": "assistant", "content": tokens[0]}
            choice["logprobs"] = {"content": [{**listed[0], "top_logprobs": listed}]}
        else:
            if prefix:
                raise HTTPException(400, "this loopback server continues a prefix only for one-token logprobs")
            out = vlm.generate([images], [text], system=system, max_new_tokens=int(body.get("max_tokens") or 64))
            choice["message"] = {"role": "assistant", "content": out[0]}
        return choice

    with serve(app) as url:
        yield f"{url}/v1"


# the malformed-answer modes of serve_scripted, and the failure reason (docs/serving.md) each must give
FAULTS: dict[str, str] = {
    "html": "not_json",  # a 200 HTML page (a proxy's error page)
    "not_json": "not_json",  # a 200 body that is not JSON, served as application/json
    "no_choices": "no_choices",  # a chat completion without "choices"
    "empty_choices": "no_choices",  # "choices": []
    "no_logprobs": "no_logprobs",  # a choice without "logprobs"
    "no_top_logprobs": "no_logprobs",  # logprobs.content[0] without "top_logprobs"
    "bad_entry": "malformed",  # a top_logprobs entry without "logprob"
    "nan_logprob": "bad_logprob",  # an option's log-prob is NaN
    "positive_logprob": "positive_logprob",  # an option's log-prob is above 0
    "options_absent": "options_absent",  # the top-k lists none of the option words (all its mass on other words)
    "option_missing": "options_absent",  # one option absent from a short top-k (missing_mass with a tokenizer)
}
TRANSPORT_FAULTS = ("http_500", "hang")  # answered 500 at once; no answer until the server stops


def scripted_top(options: list[str], brightness: float) -> list[tuple[str, float]]:
    """A plausible top-k answer over ``options`` (tokens as listed, e.g. " good") for an image of ``brightness`` in
    [0, 1]: the first option gets the most probability on a bright image, the last on a dark one; 0.1 of the mass
    on two other words.

    >>> top = scripted_top([" good", " poor"], 1.0)
    >>> [t for t, _ in top], round(sum(math.exp(v) for _, v in top), 6)
    ([' good', ' poor', ' the', ' a'], 1.0)
    """
    n = len(options)
    weights = [math.exp(-4.0 * abs(i / max(n - 1, 1) - (1.0 - brightness))) for i in range(n)]
    total = sum(weights)
    top = [(o, math.log(0.9 * w / total)) for o, w in zip(options, weights, strict=True)]
    return [*top, (" the", math.log(0.06)), (" a", math.log(0.04))]


def scripted_answer(options: list[str], body: dict[str, Any], fault: str | None, model_name: str) -> Any:
    """The chat completion :func:`serve_scripted` gives ``body``, made malformed as ``fault`` (a key of
    :data:`FAULTS`) says."""
    from fastapi.responses import Response

    if fault == "html":
        return Response("<html><body>502 Bad Gateway</body></html>", media_type="text/html")
    if fault == "not_json":
        return Response('{"choices": [', media_type="application/json")
    user = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    urls = [p["image_url"]["url"] for p in user if isinstance(p, dict) and p.get("type") == "image_url"]
    brightness = float(np.asarray(_image(urls[-1]).convert("L"), dtype=np.float64).mean()) / 255.0
    top: list[dict[str, Any]] = [
        {"token": t, "logprob": v, "bytes": None} for t, v in scripted_top(options, brightness)
    ]
    content = max(top[: len(options)], key=lambda e: e["logprob"])["token"]  # the answer: the likeliest option
    if fault == "options_absent":
        top = [{"token": " the", "logprob": math.log(0.7)}, {"token": " a", "logprob": math.log(0.3)}]
    elif fault == "option_missing":
        top = [e for e in top if e["token"] != options[-1]][:1]  # the first option alone, well below 1
    elif fault in ("nan_logprob", "positive_logprob"):
        top[0]["logprob"] = math.nan if fault == "nan_logprob" else 0.5
    elif fault == "bad_entry":
        del top[0]["logprob"]
    logprobs = {"content": [{**top[0], "top_logprobs": top}]}
    if fault == "no_top_logprobs":
        del logprobs["content"][0]["top_logprobs"]
    choice = {"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": content}}
    choice |= {} if fault == "no_logprobs" else {"logprobs": logprobs}
    answer: dict[str, Any] = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": model_name,
    }
    if fault != "no_choices":
        answer["choices"] = [] if fault == "empty_choices" else [choice]
    # allow_nan: a NaN log-prob goes out as the bare NaN some servers write
    return Response(json.dumps(answer), media_type="application/json")


@contextmanager
def serve_scripted(
    options: list[str],
    *,
    fault: str | None = None,
    fault_every: int = 1,
    model_name: str = "tiny",
    stats: dict[str, Any] | None = None,
) -> Iterator[str]:
    """An OpenAI-compatible server on 127.0.0.1 that answers without a model: the top log-probs of
    :func:`scripted_top` over ``options`` from the mean brightness of the request's last image (the answer's text:
    the most probable option), or, every ``fault_every``-th chat request (counted from 1), the fault
    ``stats["fault"]`` (``fault`` until a test changes it): a key of :data:`FAULTS` (a malformed 200 answer) or of
    :data:`TRANSPORT_FAULTS`. ``stats["requests"]`` counts chat requests, ``stats["faults"]`` the faulty ones. Yields
    the base URL (``.../v1``)."""
    import threading

    from fastapi.responses import JSONResponse

    from reward.testing.loopback import serve

    if fault is not None and fault not in FAULTS and fault not in TRANSPORT_FAULTS:
        raise ValueError(f"unknown fault {fault!r}; known: {sorted(FAULTS) + list(TRANSPORT_FAULTS)}")
    app = _app(model_name)
    counts = stats if stats is not None else {}
    counts.update({"requests": 0, "faults": 0, "fault": fault} | counts)
    lock = threading.Lock()
    release = threading.Event()  # a hung request waits for this (set when the server stops)

    @app.post("/v1/chat/completions")
    def completions(body: dict[str, Any]) -> Any:
        with lock:
            counts["requests"] += 1
            faulty = counts["fault"] is not None and counts["requests"] % fault_every == 0
            counts["faults"] += faulty
            now = counts["fault"] if faulty else None
        if now == "hang":
            release.wait(timeout=600)
            return JSONResponse({"error": "stopped"}, status_code=503)
        if now == "http_500":
            return JSONResponse({"error": {"message": "failing on purpose"}}, status_code=500)
        return scripted_answer(options, body, now, model_name)

    with serve(app) as url:
        try:
            yield f"{url}/v1"
        finally:
            release.set()  # before the server stops: a hung request would hold up its shutdown
