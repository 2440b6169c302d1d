"""Loopback servers that stand in for remote services in tests (each served on 127.0.0.1 by
:func:`reward.testing.serve`): an OpenAI-compatible server that answers without a model and injects faults, one mode
per malformed answer (:data:`FAULTS`, with the failure reason each must give), a 500 and a hung request; and the few
Hugging Face Hub endpoints ``HfApi.create_repo`` and ``HfApi.upload_folder`` call (:class:`FakeHub`: every file taken
as a regular (base64) upload and kept in memory, so a test reads back exactly what was pushed).

No ``from __future__ import annotations`` here: FastAPI reads the handlers' ``Request`` annotations at runtime.
"""

import base64
import hashlib
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reward.testing.openai_server import data_url_image, openai_app

# the malformed-answer modes of serve_scripted, and the failure reason (docs/serving.md) each must give
FAULTS: dict[str, str] = {
    "html": "not_json",  # a 200 HTML page (a proxy's error page)
    "not_json": "not_json",  # a 200 body that is not JSON, served as application/json
    "deep_json": "not_json",  # a 200 body nested 100,000 deep (json's RecursionError)
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
# answered 500 at once; no answer until the server stops; 401 with the key it was sent in the message (as OpenAI's
# "Incorrect API key provided: sk-...")
TRANSPORT_FAULTS = ("http_500", "hang", "http_401")


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
    if fault == "deep_json":
        return Response("[" * 100_000 + "]" * 100_000, media_type="application/json")
    user = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    urls = [p["image_url"]["url"] for p in user if isinstance(p, dict) and p.get("type") == "image_url"]
    brightness = float(np.asarray(data_url_image(urls[-1]).convert("L"), dtype=np.float64).mean()) / 255.0
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

    from fastapi import Header
    from fastapi.responses import JSONResponse

    from reward.testing.loopback import serve

    if fault is not None and fault not in FAULTS and fault not in TRANSPORT_FAULTS:
        raise ValueError(f"unknown fault {fault!r}; known: {sorted(FAULTS) + list(TRANSPORT_FAULTS)}")
    app = openai_app(model_name)
    counts = stats if stats is not None else {}
    counts.update({"requests": 0, "faults": 0, "fault": fault} | counts)
    lock = threading.Lock()
    release = threading.Event()  # a hung request waits for this (set when the server stops)

    @app.post("/v1/chat/completions")
    def completions(body: dict[str, Any], authorization: str = Header(default="")) -> Any:
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
        if now == "http_401":
            return _unauthorized(authorization)
        return scripted_answer(options, body, now, model_name)

    with serve(app) as url:
        try:
            yield f"{url}/v1"
        finally:
            release.set()  # before the server stops: a hung request would hold up its shutdown


def _unauthorized(authorization: str) -> Any:
    from fastapi.responses import JSONResponse

    key = authorization.removeprefix("Bearer ")
    return JSONResponse({"error": {"message": f"Incorrect API key provided: {key}"}}, status_code=401)


@contextmanager
def serve_unauthorized() -> Iterator[str]:
    """A server refusing every request with 401, the key it was sent in the message; yields its ``.../v1`` URL."""
    from fastapi import FastAPI, Header

    from reward.testing.loopback import serve

    app = FastAPI()

    @app.api_route("/v1/{path:path}", methods=["GET", "POST"])
    def refuse(path: str, authorization: str = Header(default="")) -> Any:
        return _unauthorized(authorization)

    with serve(app) as url:
        yield f"{url}/v1"


def card_metadata_errors(readme: str) -> list[str]:
    """What the Hub would refuse in a model card's YAML front matter (a subset of its checks): the block must be a
    mapping; ``tags`` and ``datasets`` lists of strings; ``base_model`` a repo id ``ORG/NAME``."""
    import yaml

    if not readme.startswith("---\n"):
        return []
    block = readme.split("---\n", 2)[1]
    meta = yaml.safe_load(block)
    if not isinstance(meta, dict):
        return ["the metadata is not a mapping"]
    errors = [
        f"{key} must be a list of strings"
        for key in ("tags", "datasets")
        if key in meta and not (isinstance(meta[key], list) and all(isinstance(v, str) for v in meta[key]))
    ]
    base = meta.get("base_model")
    if base is not None and not (isinstance(base, str) and base.count("/") == 1 and not base.startswith("/")):
        errors.append(f"base_model {base!r} is not a model id ORG/NAME")
    return errors


@dataclass
class FakeHub:
    """The repos created and the files committed to each (path -> bytes), and the tokens the requests carried."""

    repos: list[str] = field(default_factory=list)
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)
    commits: list[dict[str, Any]] = field(default_factory=list)
    tokens: set[str] = field(default_factory=set)
    validated: int = 0  # model cards whose metadata was checked

    def app(self) -> Any:
        from fastapi import FastAPI, Request

        app = FastAPI()

        def _token(request: Request) -> None:
            auth = request.headers.get("authorization", "")
            if auth.startswith("Bearer "):
                self.tokens.add(auth[len("Bearer ") :])

        @app.post("/api/repos/create")
        async def create(request: Request) -> dict[str, Any]:
            _token(request)
            body = await request.json()
            repo = f"{body['organization']}/{body['name']}" if body.get("organization") else body["name"]
            if repo not in self.repos:
                self.repos.append(repo)
            self.files.setdefault(repo, {})
            return {"url": f"{request.base_url}{repo}", "name": repo, "id": repo}

        @app.post("/api/validate-yaml")
        async def validate_yaml(request: Request) -> Any:
            from fastapi.responses import JSONResponse

            errors = card_metadata_errors((await request.json())["content"])
            self.validated += 1
            return JSONResponse({"errors": [{"message": e} for e in errors], "warnings": []}, 400 if errors else 200)

        @app.post("/api/models/{org}/{name}/preupload/{revision}")
        async def preupload(org: str, name: str, revision: str, request: Request) -> dict[str, Any]:
            _token(request)
            body = await request.json()
            files = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in body["files"]]
            return {"files": files}

        @app.post("/api/models/{org}/{name}/commit/{revision}")
        async def commit(org: str, name: str, revision: str, request: Request) -> dict[str, Any]:
            _token(request)
            repo = f"{org}/{name}"
            stored = self.files.setdefault(repo, {})
            header: dict[str, Any] = {}
            for line in (await request.body()).decode().splitlines():
                item = json.loads(line)
                if item["key"] == "header":
                    header = item["value"]
                elif item["key"] == "file":
                    stored[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            oid = hashlib.sha1(json.dumps(sorted(stored)).encode()).hexdigest()
            self.commits.append({"repo": repo, "revision": revision, "summary": header.get("summary"), "oid": oid})
            return {"commitUrl": f"{request.base_url}{repo}/commit/{oid}", "commitOid": oid, "pullRequestUrl": None}

        return app
