"""A stand-in for the few Hugging Face Hub endpoints ``HfApi.create_repo`` and ``HfApi.upload_folder`` call, served
on 127.0.0.1 (:func:`reward.testing.loopback.serve`): every file is taken as a regular (base64) upload and kept in
memory, so a test reads back exactly what was pushed.

Example:
    >>> hub = FakeHub()  # doctest: +SKIP
    >>> with serve(hub.app()) as url:  # doctest: +SKIP
    ...     HfApi(endpoint=url, token="hf_test").upload_folder(repo_id="org/x", folder_path="dir")
    >>> sorted(hub.files["org/x"])  # doctest: +SKIP

No ``from __future__ import annotations`` here: FastAPI reads the handlers' ``Request`` annotations at runtime.
"""

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


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
