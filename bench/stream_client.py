"""Many open ``GET /stream`` connections, held by one asyncio process for ``bench/live.py``.

Ten thousand streams need an efficient client on a 2-core machine: one event loop, one
``asyncio.Protocol`` a connection (no task, no stream reader, no HTTP library: an event's
arrival is stamped in ``data_received``, called by the loop as it reads the socket, not
when a task woken by it gets its turn). It runs in a process of its own, so its reading
does not share an interpreter lock with the process that commits and publishes; times are
``time.monotonic()`` (``CLOCK_MONOTONIC``: the same clock in every process of the
machine). Driven by lines on stdin, it answers one line of JSON on stdout, each with
``cpu``, the CPU seconds this process has used so far::

    python -m bench.stream_client PORT COOKIES_FILE     # one cookie a line, one stream each

    open N            -> {"opened": n, "seconds": s}      streams up to N open, each heard its first
    mark I,J,K...     -> {"marked": 3}                     these streams are to hear a change
    collect TIMEOUT   -> {"heard": [t, ...]}               when each marked one heard (or null)
    quit
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time

STREAM = "/_notifications/stream"
#: Streams being opened at once: browsers reconnect spread over their `retry` delay, not
#: all in the same millisecond (and each opening reads the database).
OPENING_AT_ONCE = 50
EVENT = b"event: summary"


class Round:
    """The marked streams still to hear a change, and a future done when none is left."""

    def __init__(self, count: int) -> None:
        self.left = count
        self.done = asyncio.get_running_loop().create_future()
        if not count:
            self.done.set_result(None)

    def heard(self) -> None:
        self.left -= 1
        if not self.left:
            self.done.set_result(None)


class Stream(asyncio.Protocol):
    """One open stream: counts the ``summary`` events it reads, stamping the first after
    each :meth:`mark` with the time its bytes were read."""

    def __init__(self, number: int, cookie: str, closed: list[str]) -> None:
        self.number = number
        self.request = (f"GET {STREAM} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\n"
                        "Accept: text/event-stream\r\n\r\n").encode()
        self.closed = closed
        self.seen = 0
        self.heard_at: float | None = None
        self.first = asyncio.get_running_loop().create_future()
        self.tail = b""
        #: The answer's first bytes: its status line, for a stream refused or closed.
        self.head = b""
        self.transport: asyncio.Transport | None = None
        self.round: Round | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        if len(self.head) < 200:
            self.head += data[:200]
        # An event's name may arrive cut in two: look across the last read's tail.
        text = self.tail + data
        events = text.count(EVENT) - self.tail.count(EVENT)
        self.tail = text[-len(EVENT):]
        if events:
            self.seen += events
            if self.heard_at is None:
                self.heard_at = now
            if self.round is not None:
                self.round.heard()
                self.round = None
            if not self.first.done():
                self.first.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.first.done():
            status = self.head.split(b"\r\n", 1)[0].decode(errors="replace")
            self.closed.append(f"closed before its first summary ({status or 'no answer'})")
            self.first.set_result(None)
        else:
            self.closed.append(f"stream {self.number} closed by the server after "
                               f"{self.seen} events: {self.tail!r}")

    def mark(self, round_: Round) -> int:
        self.heard_at, self.round = None, round_
        return self.seen


async def open_one(port: int, stream: Stream, gate: asyncio.Semaphore) -> None:
    async with gate:
        await asyncio.get_running_loop().create_connection(lambda: stream, "127.0.0.1", port)
        await stream.first


async def main(port: int, cookies_file: str) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with open(cookies_file) as file:
        cookies = [line.strip() for line in file if line.strip()]
    closed: list[str] = []
    streams = [Stream(n, cookie, closed) for n, cookie in enumerate(cookies)]
    gate = asyncio.Semaphore(OPENING_AT_ONCE)
    opened = 0
    loop = asyncio.get_running_loop()
    marked: dict[int, int] = {}
    round_ = Round(0)
    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).split()
        if not line or line[0] == "quit":
            break
        if line[0] == "open":
            started = time.monotonic()
            wanted = streams[opened:int(line[1])]
            opened += len(wanted)
            await asyncio.gather(*(open_one(port, stream, gate) for stream in wanted))
            if closed:
                raise SystemExit(f"a stream was {closed[0]} "
                                 f"({sum(s.first.done() for s in streams) - len(closed)} open)")
            say({"opened": opened, "seconds": time.monotonic() - started})
        elif line[0] == "mark":
            chosen = list(dict.fromkeys(int(n) for n in line[1].split(",")))
            round_ = Round(len(chosen))
            marked = {n: streams[n].mark(round_) for n in chosen}
            say({"marked": len(marked)})
        elif line[0] == "collect":
            try:
                await asyncio.wait_for(asyncio.shield(round_.done), float(line[1]))
            except TimeoutError:
                pass
            say({"heard": [streams[n].heard_at if streams[n].seen > before else None
                           for n, before in marked.items()], "closed": closed})
    for stream in streams:
        if stream.transport is not None:
            stream.transport.close()


def say(answer: dict[str, object]) -> None:
    sys.stdout.write(json.dumps({**answer, "cpu": time.process_time()}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
