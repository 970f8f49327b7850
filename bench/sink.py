"""The SMTP sink of ``bench/drain.py``: aiosmtpd on 127.0.0.1 in a process of its own (so
it never shares a core's GIL with what it measures), counting messages, bytes and
recipients, keeping only the last message. Imports nothing of the wiki, so the process
starts quickly."""

from __future__ import annotations

import multiprocessing
import socket
import sys
import threading
from collections import Counter
from multiprocessing.connection import Connection
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port



class _Counting:
    """aiosmtpd handler: counts messages, bytes and recipients; keeps the last message
    only (the raw reference sends its like, bench/drain.py)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.mails = 0
            self.bytes = 0
            self.recipients: Counter[str] = Counter()
            self.last = b""

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.lock:
            self.mails += 1
            self.last = envelope.original_content or envelope.content
            self.bytes += len(self.last)
            self.recipients.update(envelope.rcpt_tos)
        return "250 OK"

    def stats(self) -> dict[str, int]:
        with self.lock:
            return {"mails": self.mails, "bytes": self.bytes,
                    "recipients": len(self.recipients),
                    "duplicates": sum(n - 1 for n in self.recipients.values() if n > 1)}


def _sink_main(conn: Connection, port: int) -> None:
    from aiosmtpd.controller import Controller

    handler = _Counting()
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    conn.send("ready")
    while True:
        command = conn.recv()
        if command == "stats":
            conn.send(handler.stats())
        elif command == "last":
            conn.send(handler.last)
        elif command == "reset":
            handler.reset()
            conn.send("ok")
        else:
            break
    controller.stop()


class Sink:
    """The sink process: start, ask for its counts, reset them, stop."""

    def __init__(self) -> None:
        self.port = free_port()
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_sink_main, args=(child, self.port),
                                        daemon=True)
        self._process.start()
        if not self._conn.poll(60) or self._conn.recv() != "ready":
            sys.exit("the SMTP sink did not start")

    def _ask(self, command: str) -> Any:
        self._conn.send(command)
        if not self._conn.poll(30):
            sys.exit(f"the SMTP sink did not answer {command!r}")
        return self._conn.recv()

    def stats(self) -> dict[str, int]:
        result: dict[str, int] = self._ask("stats")
        return result

    def reset(self) -> None:
        self._ask("reset")

    def last(self) -> bytes:
        """The last message the sink took, as it came."""
        result: bytes = self._ask("last")
        return result

    def stop(self) -> None:
        self._conn.send("stop")
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.terminate()
