"""A loopback OpenAI-compatible server in front of an in-process VLM, for tests of the server client and the bench
(what vLLM or SGLang would serve): ``GET /v1/models``; ``POST /v1/chat/completions`` with text, images as data URLs,
a final assistant message continued with ``continue_final_message`` (vLLM's rules: it needs
``add_generation_prompt=false``, and a final assistant message without it is refused here rather than answered as a
new turn), and ``logprobs`` / ``top_logprobs`` of a one-token answer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from PIL import Image

from reward.vlm import OptionQuery
from reward.vlm.model import IMAGE


def openai_app(model_name: str) -> Any:
    """A FastAPI app answering ``GET /v1/models`` with ``model_name``."""
    from fastapi import FastAPI

    app = FastAPI()
    app.get("/v1/models")(
        lambda: {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "me"}]}
    )
    return app


def data_url_image(url: str) -> Image.Image:
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

    app = openai_app(model_name)
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
        images = [data_url_image(p["image_url"]["url"]).convert("RGB") for p in parts if p["type"] == "image_url"]
        # images stand where the message puts them (as the VLM renders <image> markers; images first: the same text)
        text = "".join(IMAGE if p["type"] == "image_url" else p["text"] for p in parts)
        choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
        with lock:
            if body.get("logprobs"):
                # the whole next-token log-distribution after the prefix, through the in-process primitive: the
                # end-of-turn token is a one-token option in any context, and return_vocab gives the rest
                query = OptionQuery(text, (vlm.tokenizer.eos_token,), prefix, sep="")
                vocab = vlm.option_logprobs([images], [query], system=system, return_vocab=True).vocab.reshape(-1)
                top = vocab.topk(int(body.get("top_logprobs") or 1))
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
            counts["requests"] += 1
        answer = {"id": "chatcmpl-local", "object": "chat.completion", "created": 0, "model": model_name}
        return answer | {"choices": [choice]}

    with serve(app) as url:
        yield f"{url}/v1"
