"""A web app served on 127.0.0.1 for the length of a ``with`` block: how tests reach a remote API (an
OpenAI-compatible judge or VLM server) without leaving the machine.

The socket is bound before the server starts (a free port, no race) and the block is entered only once uvicorn
listens.

Example:
    >>> from fastapi import FastAPI  # doctest: +SKIP
    >>> with serve(FastAPI()) as url:  # doctest: +SKIP
    ...     print(url)  # http://127.0.0.1:PORT
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """Serve the ASGI ``app`` on 127.0.0.1 at a free port; yields its base URL and stops the server after."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    started = threading.Event()
    while not server.started:  # readiness, not a delay: uvicorn sets this once the socket listens
        if not thread.is_alive():
            sock.close()
            raise RuntimeError(f"the loopback server did not start on port {sock.getsockname()[1]}")
        started.wait(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
