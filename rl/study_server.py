"""The study page's web server on 127.0.0.1, which answers only its own page, as Jupyter's does.

- ``Host`` must be ``127.0.0.1:PORT`` or ``localhost:PORT``: a page of another site whose name was rebound to
  127.0.0.1 (DNS rebinding) can neither read the study nor post answers.
- An ``Origin`` header, when sent, must be the page's own; answers are posted as ``Content-Type: application/json``,
  which a cross-site form or a "simple" cross-site request cannot send without a preflight, never granted here.
- Requests are bounded: a body over :data:`MAX_BODY` bytes is answered 413 before a byte of it is read, one without
  a ``Content-Length`` 411; a body that is not strict JSON (``NaN``, ``Infinity``, nesting too deep) 400; an idle
  connection is closed after :data:`IDLE_S`. Every refusal is a JSON ``{"error": ...}`` answer, never a traceback or a
  dropped connection.

The standard library's threading server is enough for a handful of raters on one machine; ``fastapi``/``uvicorn``
(test-only dependencies here) would add Host checking and nothing else this needs. What the page reads and writes
is the :class:`Site`'s.
"""

from __future__ import annotations

import json
import logging
import re
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from reward.data.manifest import parse_json

logger = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # bytes of a request's body at most (an answer is about 60)
IDLE_S = 30.0  # seconds a connection may wait for its request (or the rest of its body)
DRAIN_BYTES = (
    1 << 20
)  # an unread body (411/413) is read and dropped up to this much, so the refusal reaches the client
HOSTS = ("127.0.0.1", "localhost")
PNG = b"\x89PNG\r\n\x1a\n"
HEADERS = {  # every answer: never cached, never framed by another page, never sniffed as another type
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class Site(Protocol):
    def state(self, rater: str) -> dict[str, Any]:
        """``GET /state?rater=NAME``: what the page shows that rater."""

    def answer(self, body: Any) -> None:
        """``POST /answer``: save the answer (JSON, parsed); a ``ValueError`` is the 400's message."""

    def image(self, path: str) -> bytes | None:
        """``GET path``: a PNG's bytes, or ``None`` (404)."""


class StudyServer(ThreadingHTTPServer):
    """The page at ``/`` and what ``site`` answers, on 127.0.0.1 at ``port`` (0: any free one), listening from the
    start: a request waits until :meth:`serve_forever` takes it."""

    daemon_threads = True

    def __init__(self, port: int, page: bytes, site: Site) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.page, self.site = page, site
        self.port = self.server_address[1]
        self.hosts = {f"{host}:{self.port}" for host in HOSTS}

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed (the client went away mid-request) is a debug line, not a traceback."""
        logger.debug("request from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: StudyServer
    timeout = IDLE_S

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if not self._own_page():
            return
        url = urlsplit(self.path)
        if url.path == "/":
            self._send(200, self.server.page, "text/html; charset=utf-8")
        elif url.path == "/state":
            rater = parse_qs(url.query).get("rater", [""])[0]
            self._send(200, json.dumps(self.server.site.state(rater)).encode(), "application/json")
        elif (png := self.server.site.image(url.path)) is not None and png.startswith(PNG):
            self._send(200, png, "image/png")
        else:
            self._error(404, f"no {url.path} here")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self._body()
        if body is None or not self._own_page():
            return
        if urlsplit(self.path).path != "/answer":
            return self._error(404, "POST /answer only")
        if self.headers.get_content_type() != "application/json":
            return self._error(415, "POST /answer takes Content-Type: application/json")
        try:
            self.server.site.answer(parse_json(body.decode("utf-8"), allow_nan=False))
        except ValueError as err:  # not JSON, not UTF-8, or not an answer
            return self._error(400, str(err))
        self._send(200, b'{"saved": true}', "application/json")

    def _own_page(self) -> bool:
        """Whether the request comes to this server by its own name and, if it says, from its own page (else 403)."""
        hosts = self.headers.get_all("Host") or []
        host = hosts[0].lower() if len(hosts) == 1 else ""
        if host not in self.server.hosts:
            self._error(403, f"this server answers only http://127.0.0.1:{self.server.port}/ (Host: {host or 'none'})")
            return False
        origin = self.headers.get_all("Origin")
        if origin is not None and [o.lower() for o in origin] != [f"http://{host}"]:
            self._error(403, "answers come from the study's own page only (Origin)")
            return False
        return True

    def _body(self) -> bytes | None:
        """The request's body, at most :data:`MAX_BODY` bytes; ``None`` once refused (411 or 413, nothing kept)."""
        length = self.headers.get("Content-Length", "")
        if "Transfer-Encoding" in self.headers or not re.fullmatch(r"[0-9]{1,30}", length.strip()):
            self._refuse_unread(411, "a POST needs a Content-Length (no chunked body)")
            return None
        if int(length) > MAX_BODY:
            self._refuse_unread(413, f"a body of {int(length)} bytes; an answer takes at most {MAX_BODY}")
            return None
        try:
            body = self.rfile.read(int(length))
        except OSError:  # the client stopped sending (IDLE_S) or went away
            body = b""
        if len(body) < int(length):
            self.close_connection = True
            return None
        return body

    def _refuse_unread(self, status: int, message: str) -> None:
        """Answer ``status``, then read and drop what the client still sends (up to :data:`DRAIN_BYTES`, or until it
        is idle :data:`IDLE_S`), so that closing the socket with unread bytes does not reset the connection before
        the client has read the answer."""
        self._error(status, message)
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            drained = 0
            while drained < DRAIN_BYTES and (chunk := self.connection.recv(65536)):
                drained += len(chunk)
        except OSError:
            pass

    def _error(self, status: int, message: str) -> None:
        self.close_connection = True
        self._send(status, json.dumps({"error": message}).encode(), "application/json")

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        for name, value in {**HEADERS, "Content-Type": kind, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        logger.debug(format, *args)
