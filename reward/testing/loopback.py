"""A web app served on 127.0.0.1 for the length of a ``with`` block (tests reach a remote API without leaving the
machine): the socket bound first (a free port, no race), the block entered once uvicorn listens.
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
