"""A server on 127.0.0.1 that accepts connections and never answers: what a hung Redis
or SMTP relay looks like from the client's side."""

from __future__ import annotations

import socket
import threading


class HungServer:
    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> HungServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._socket.close()
        for conn in self._held:
            conn.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._socket.accept()
            except OSError:
                return  # closed
            self.accepted += 1
            self._held.append(conn)  # kept open, never read, never answered
