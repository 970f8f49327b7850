"""A TCP relay on 127.0.0.1 in front of a real server (a database): it forwards each
connection byte for byte, or holds new connections silent (a hung network path) until
they are let through, or for ever."""

from __future__ import annotations

import socket
import threading


class Relay:
    """Forwards connections on :attr:`port` to ``target`` (host, port). While
    :attr:`holding`, a new connection is accepted and held: nothing goes through until
    :meth:`release` lets the held ones through; :meth:`stop` closes them all."""

    def __init__(self, target: tuple[str, int] | None, *, holding: bool = False) -> None:
        self.target = target
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.sock.settimeout(0.1)  # closing a socket does not wake a blocked accept()
        self.holding = holding
        self.held: list[socket.socket] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                connection, _ = self.sock.accept()
            except TimeoutError:
                continue
            with self._lock:
                self._sockets.append(connection)
                if self.holding:
                    self.held.append(connection)
                    continue
            self._forward(connection)

    def release(self) -> None:
        """Let the held connections through."""
        with self._lock:
            held, self.held = self.held, []
        for connection in held:
            self._forward(connection)

    def _forward(self, connection: socket.socket) -> None:
        assert self.target is not None, "a relay with no target only holds"
        upstream = socket.create_connection(self.target, timeout=5)
        upstream.settimeout(None)
        with self._lock:
            self._sockets.append(upstream)
        for source, sink in ((connection, upstream), (upstream, connection)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)
        self.sock.close()
        with self._lock:
            for connection in self._sockets:
                connection.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass  # the other side closed: so does this one
    finally:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
