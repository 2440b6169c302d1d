"""A loopback OpenAI-compatible chat-completions server in front of an in-process VLM, for tests of the server
clients (what vLLM, SGLang or LMDeploy would serve): text, images as data URLs, and ``logprobs`` /
``top_logprobs`` of a one-token answer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from PIL import Image

from reward.vlm import OptionQuery


@contextmanager
def serve_openai(vlm: Any, model_name: str = "tiny") -> Iterator[str]:
    """Serve ``vlm`` on 127.0.0.1 (a free port) through the chat-completions subset PACE uses (text, images as data
    URLs, ``logprobs``/``top_logprobs`` of a one-token answer); yields the base URL and stops the server after."""
    import base64
    import io

    from fastapi import FastAPI

    from reward.testing.loopback import serve

    app = FastAPI()

    def decode(url: str) -> Image.Image:
        return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")

    @app.post("/v1/chat/completions")
    def completions(body: dict[str, Any]) -> dict[str, Any]:
        system = next((m["content"] for m in body["messages"] if m["role"] == "system"), None)
        user = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        parts = user if isinstance(user, list) else [{"type": "text", "text": user}]
        images = [decode(p["image_url"]["url"]) for p in parts if p["type"] == "image_url"]
        text = "".join(p["text"] for p in parts if p["type"] == "text")
        choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
        if body.get("logprobs"):
            out = vlm.option_logprobs([images], [OptionQuery(text, ("A",), "")], system=system, return_vocab=True)
            lp = out.vocab.reshape(-1)
            top = lp.topk(int(body.get("top_logprobs") or 1))
            tokens = [vlm.tokenizer.decode([int(i)]) for i in top.indices]
            listed = [
                {"token": t, "logprob": float(v), "bytes": None} for t, v in zip(tokens, top.values, strict=True)
            ]
            choice["message"] = {"role": "assistant", "content": tokens[0]}
            choice["logprobs"] = {"content": [{**listed[0], "top_logprobs": listed}]}
        else:
            answer = vlm.generate([images], [text], system=system, max_new_tokens=int(body.get("max_tokens") or 64))
            choice["message"] = {"role": "assistant", "content": answer[0]}
        return {
            "id": "chatcmpl-local",
            "object": "chat.completion",
            "created": 0,
            "model": model_name,
            "choices": [choice],
        }

    with serve(app) as url:
        yield f"{url}/v1"
