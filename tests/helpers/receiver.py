"""A real HTTP receiver on 127.0.0.1 for the outbound channels' tests: it records every
request and answers each path as the test tells it (a status, headers, a delay, a body as
large as a test needs, streamed)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: How often a serving thread looks whether it was told to stop (socketserver's
#: ``serve_forever``, 0.5 s by default): ``shutdown()`` waits for that look, and at 0.5 s
#: the tests that start a server spent 140 s of a whole run's teardowns waiting for it.
SHUTDOWN_POLL = 0.02


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay: float = 0.0
    #: Seconds between the bytes of the status line and headers (a receiver that trickles
    #: its answer, never idle long enough for a read timeout); 0 sends them at once.
    trickle: float = 0.0
    #: Bytes of body streamed after ``body`` (a receiver answering far more than anyone
    #: should read), in chunks, never held whole; the send stops when the client hangs up.
    stream: int = 0
    #: Seconds between the bytes of the body and ``stream``, sent after the whole head (a
    #: receiver that trickles the body a client reads up to its bound); 0 sends at once.
    body_trickle: float = 0.0


class Receiver:
    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.answers: dict[str, Answer] = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                path = self.path.split("?", 1)[0]
                receiver.requests.append(
                    Received(self.command, path, dict(self.headers), body)
                )
                answer = receiver.answers.get(path, Answer())
                time.sleep(answer.delay)
                if answer.trickle:
                    self._trickle(answer)
                    return
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body) + answer.stream))
                self.end_headers()
                try:
                    if answer.body_trickle:
                        self._drip(answer.body + b" " * answer.stream, answer.body_trickle)
                    else:
                        self.wfile.write(answer.body)
                        self._stream(answer.stream)
                except OSError:  # the client stopped reading, as it should at its bound
                    self.close_connection = True

            def _drip(self, data: bytes, pause: float) -> None:
                self.wfile.flush()
                for byte in data:
                    time.sleep(pause)
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()

            def _stream(self, size: int) -> None:
                chunk = b"x" * 65536
                while size > 0:
                    self.wfile.write(chunk[:size])
                    size -= len(chunk)

            def _trickle(self, answer: Answer) -> None:
                head = f"HTTP/1.1 {answer.status} OK\r\n" + "".join(
                    f"{name}: {value}\r\n" for name, value in answer.headers.items()
                ) + f"Content-Length: {len(answer.body)}\r\n\r\n"
                try:
                    for byte in head.encode():
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(answer.trickle)
                    self.wfile.write(answer.body)
                except OSError:  # the client hung up, as it should at its deadline
                    self.close_connection = True

            do_POST = do_PUT = do_GET = _handle

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": SHUTDOWN_POLL}, daemon=True)
        self.thread.start()

    def url(self, path: str = "/", scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def answer(self, path: str, status: int = 200, **kwargs: object) -> None:
        self.answers[path] = Answer(status, **kwargs)  # type: ignore[arg-type]

    def at(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
