"""``GET /stream`` over real sockets: sign-in cookies, one event stream read block by
block, single requests, and a server with a fixed number of threads (as gunicorn's
``gthread`` worker has)."""

from __future__ import annotations

import http.client
import json
import queue
import threading
from urllib.parse import urlencode, urlsplit

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler

from . import tls

STREAM = "/_notifications/stream"
#: Long enough for any event on a loaded test machine: a bound on waiting, not a speed test.
WAIT = 10


def connection(base_url: str, timeout: float | None = None) -> http.client.HTTPConnection:
    """A connection to ``base_url``'s server: over TLS for ``https``, trusting the tests'
    own authority (:mod:`tests.helpers.tls`)."""
    where = urlsplit(base_url)
    if where.scheme == "https":
        return http.client.HTTPSConnection(where.hostname, where.port, timeout=timeout,
                                           context=tls.client_context())
    return http.client.HTTPConnection(where.hostname, where.port, timeout=timeout)


def session_cookie(base_url: str, username: str) -> str:
    """Sign in over HTTP; the ``Cookie`` header that carries the session."""
    conn = connection(base_url)
    try:
        body = urlencode({"username": username, "password": "password"})
        conn.request("POST", "/login", body=body,
                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        response = conn.getresponse()
        response.read()
        assert response.status == 302
        return response.getheader("Set-Cookie").split(";", 1)[0]
    finally:
        conn.close()


def request(base_url: str, method: str, path: str, **headers: str) -> http.client.HTTPResponse:
    """One request over a real socket (each its own request context, as in production:
    test clients that share a preserved context share Flask-Login's user); the body is
    read into ``response.body``."""
    conn = connection(base_url, WAIT)
    try:
        conn.request(method, path, headers=headers)
        response = conn.getresponse()
        response.body = response.read()
        return response
    finally:
        conn.close()


class EventStream:
    """``GET /stream`` over a real socket, read event by event. With ``answered=False``
    the request is only sent; :attr:`response` then waits for the answer."""

    def __init__(self, base_url: str, cookie: str | None, *, answered: bool = True,
                 **headers: str) -> None:
        self.conn = connection(base_url, WAIT)
        self.conn.request("GET", STREAM, headers={**({"Cookie": cookie} if cookie else {}),
                                                  **headers})
        self._response: http.client.HTTPResponse | None = None
        self.blocks: list[str] = []
        if answered:
            self.response  # noqa: B018  (waits for the status line and headers)

    @property
    def response(self) -> http.client.HTTPResponse:
        if self._response is None:
            self._response = self.conn.getresponse()
        return self._response

    def block(self) -> str | None:
        """The next block of lines (up to a blank line), or ``None`` at the stream's end."""
        lines = []
        while True:
            line = self.response.readline().decode()
            if not line:
                return None
            if line == "\n":
                self.blocks.append("".join(lines))
                return self.blocks[-1]
            lines.append(line)

    def next_summary(self) -> tuple[str, dict]:
        """The next ``summary`` event's id and body (comments and ``retry:`` skipped)."""
        while True:
            block = self.block()
            assert block is not None, "the stream ended"
            fields = dict(line.split(": ", 1) for line in block.splitlines()
                          if not line.startswith(":") and ": " in line)
            if fields.get("event") == "summary":
                return fields["id"], json.loads(fields["data"])

    def rest(self) -> list[str]:
        """Every block until the stream ends (a read that waits past :data:`WAIT` for the
        next one raises ``TimeoutError``)."""
        rest = []
        while (block := self.block()) is not None:
            rest.append(block)
        return rest

    def close(self) -> None:
        if self._response is not None:
            self._response.close()
        self.conn.close()


class _OneRequestPerConnection(WSGIRequestHandler):
    # gunicorn's gthread worker hands an idle keep-alive connection back to its poller;
    # this server would hold a thread on it instead, so it closes each one after its
    # answer.
    protocol_version = "HTTP/1.0"


class PooledWSGIServer(BaseWSGIServer):
    """werkzeug's server with a fixed pool of threads: a request waits for a free one,
    as under gunicorn ``-k gthread --threads N``. Daemon threads: a stream still open
    when the test ends does not keep the test process alive."""

    multithread = True

    def __init__(self, host: str, port: int, app, threads: int) -> None:
        self.waiting: queue.Queue = queue.Queue()
        for _ in range(threads):
            threading.Thread(target=self._serve_waiting, daemon=True).start()
        super().__init__(host, port, app, handler=_OneRequestPerConnection)

    def process_request(self, request, client_address) -> None:
        self.waiting.put((request, client_address))

    def _serve_waiting(self) -> None:
        while (item := self.waiting.get()) is not None:
            request, client_address = item
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)
