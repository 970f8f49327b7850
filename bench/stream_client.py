"""Many open ``GET /stream`` connections, held by one asyncio process for ``bench/live.py``.

Ten thousand streams need an efficient client on a 2-core machine: one event loop, raw
sockets (``asyncio`` streams), no HTTP library. It runs in a process of its own, so its
reading does not share an interpreter lock with the process that commits and publishes;
times are ``time.monotonic()`` (``CLOCK_MONOTONIC``: the same clock in every process of
the machine). Driven by lines on stdin, it answers one line of JSON on stdout::

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


class Stream:
    def __init__(self, number: int) -> None:
        self.number = number
        self.seen = 0
        self.heard_at: float | None = None
        self.first = asyncio.Event()
        self.tail = b""
        #: The answer's first bytes: its status line, for a stream refused or closed.
        self.head = b""


async def hold(port: int, cookie: str, stream: Stream, gate: asyncio.Semaphore,
               closed: list[str]) -> None:
    async with gate:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET {STREAM} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\n"
                     "Accept: text/event-stream\r\n\r\n".encode())
        while not stream.first.is_set():
            if not await _read(reader, stream):
                status = stream.head.split(b"\r\n", 1)[0].decode(errors="replace")
                closed.append(f"closed before its first summary ({status or 'no answer'})")
                return
    while await _read(reader, stream):
        pass
    closed.append(f"stream {stream.number} closed by the server after {stream.seen} "
                  f"events: {stream.tail!r}")


async def _read(reader: asyncio.StreamReader, stream: Stream) -> bool:
    data = await reader.read(65536)
    if not data:
        return False
    if len(stream.head) < 200:
        stream.head += data[:200]
    # An event's name may arrive cut in two: look across the last read's tail.
    text = stream.tail + data
    events = text.count(EVENT) - stream.tail.count(EVENT)
    stream.tail = text[-len(EVENT):]
    if events:
        stream.seen += events
        if stream.heard_at is None:
            stream.heard_at = time.monotonic()
        stream.first.set()
    return True


async def main(port: int, cookies_file: str) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with open(cookies_file) as file:
        cookies = [line.strip() for line in file if line.strip()]
    streams = [Stream(n) for n in range(len(cookies))]
    closed: list[str] = []
    gate = asyncio.Semaphore(OPENING_AT_ONCE)
    tasks: list[asyncio.Task[None]] = []
    loop = asyncio.get_running_loop()
    marked: dict[int, int] = {}
    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).split()
        if not line or line[0] == "quit":
            break
        if line[0] == "open":
            started = time.monotonic()
            wanted = streams[len(tasks):int(line[1])]
            tasks += [asyncio.create_task(hold(port, cookies[stream.number], stream, gate,
                                               closed)) for stream in wanted]
            for stream in wanted:
                while not stream.first.is_set():
                    if closed:
                        raise SystemExit(f"a stream was {closed[0]} "
                                         f"({sum(s.first.is_set() for s in streams)} open)")
                    await asyncio.sleep(0.05)
            say({"opened": len(tasks), "seconds": time.monotonic() - started})
        elif line[0] == "mark":
            marked = {int(n): streams[int(n)].seen for n in line[1].split(",")}
            for n in marked:
                streams[n].heard_at = None
            say({"marked": len(marked)})
        elif line[0] == "collect":
            deadline = time.monotonic() + float(line[1])
            while (any(streams[n].seen == before for n, before in marked.items())
                   and time.monotonic() < deadline):
                await asyncio.sleep(0.01)
            say({"heard": [streams[n].heard_at if streams[n].seen > before else None
                           for n, before in marked.items()], "closed": closed})
    for task in tasks:
        task.cancel()


def say(answer: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
