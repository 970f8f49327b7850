"""An open stream's connection taken over from gunicorn's gevent worker
(docs/operating.md#serving-many-open-streams).

Under gunicorn's async worker a request whose app answers
``gunicorn.workers.base_async.ALREADY_HANDLED`` is left to the app: gunicorn sends
nothing, reads the connection for a next request and closes its own descriptor. The
stream writes its head and events itself on a duplicate of that descriptor, so a waiting
stream holds no greenlet and none of gunicorn's objects, only its own (about 15 KB a
stream less: docs/benchmarks.md, session 16). Only where the bytes on the socket are the
response's own: plain HTTP/1.x, never TLS (whose bytes gunicorn's socket wraps) nor
HTTP/2 (whose frames its connection writes), and never another server.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wsgiref.types import WSGIEnvironment

#: A handed-off stream's send buffer, in bytes (the kernel doubles it for its own
#: bookkeeping): some 60 summaries that its client has not read, then the next write
#: fails and the stream ends (its badge, if it is still there, reconnects). Without it,
#: Linux grows a loopback or fast connection's buffer to megabytes: a client that reads
#: nothing would hold that much kernel memory for as long as its stream is open.
SEND_BUFFER = 16 * 1024

#: gunicorn's access log: written where ``--access-logfile`` says, silent without it.
access_log = logging.getLogger("gunicorn.access")

#: Headers the hand-off writes itself, or that say how a body is framed: its body ends
#: with the connection.
_FRAMING = frozenset({"connection", "content-length", "transfer-encoding", "keep-alive"})


def already_handled() -> object | None:
    """gunicorn's answer for a request the app has answered itself, if gunicorn runs."""
    worker = sys.modules.get("gunicorn.workers.base_async")
    return None if worker is None else worker.ALREADY_HANDLED


def connection(environ: WSGIEnvironment) -> int | None:
    """A non-blocking duplicate of the request's connection when the server is gunicorn's
    gevent worker over plain HTTP/1.x; ``None`` otherwise. gunicorn's own descriptor then
    reads no more (its worker ends that request's greenlet at once, rather than after its
    keep-alive timeout): the stream's client sends nothing after its request."""
    sock = environ.get("gunicorn.socket")
    gevent_socket = sys.modules.get("gevent.socket")
    # Exactly gevent's plain socket: its SSL socket is a subclass; gunicorn's other
    # workers (sync, gthread) do not honour ALREADY_HANDLED and use the standard one.
    if (sock is None or gevent_socket is None or type(sock) is not gevent_socket.socket
            or already_handled() is None
            or environ.get("SERVER_PROTOCOL") not in ("HTTP/1.0", "HTTP/1.1")
            or environ.get("HTTP_VERSION") == "2"):
        return None
    fd = os.dup(sock.fileno())
    os.set_blocking(fd, False)  # shared with gunicorn's, which gevent already made so
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        sock.shutdown(socket.SHUT_RD)
    except OSError:  # the client has gone already: its first write fails
        pass
    return fd


def head(status: str, headers: Iterable[tuple[str, str]]) -> bytes:
    """The response's status line and headers, its body ending with the connection."""
    lines = [f"HTTP/1.1 {status}\r\n"]
    lines += [f"{name}: {value}\r\n" for name, value in headers
              if name.lower() not in _FRAMING]
    lines.append("Connection: close\r\n\r\n")
    return "".join(lines).encode("latin-1")  # as WSGI's headers are


def write(fd: int, data: bytes) -> bool:
    """Whether the connection took all of ``data`` at once. A client whose socket buffer
    is full (it reads nothing) or that has gone gets nothing more: the stream ends, and
    a badge that is still there reconnects."""
    try:
        return os.write(fd, data) == len(data)
    except OSError:
        return False


def close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


#: A handed-off stream's line in gunicorn's access log, in its default format
#: (``%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"``), less the time and
#: the body's bytes, which are known at its end: the address, then the request and its
#: status, then the referrer and the agent.
AccessLine = tuple[str, str, str]


def access_line(environ: WSGIEnvironment, status: str) -> AccessLine | None:
    """The access log's line for this request, but for its time and bytes; ``None``
    where gunicorn keeps no access log. gunicorn writes a request's line when its
    response ends, and never sees a handed-off stream's end: the stream writes it then
    (:func:`log_access`), so the log still shows the badge's streams, each with the
    bytes of its body. ``%(u)s`` is ``-`` (the streams are signed in by their session,
    never by HTTP authentication)."""
    if not access_log.hasHandlers():
        return None
    request = " ".join(str(environ.get(key, "-"))
                       for key in ("REQUEST_METHOD", "RAW_URI", "SERVER_PROTOCOL"))
    return (f"{environ.get('REMOTE_ADDR', '-')} - -",
            f"\"{request}\" {status.split(' ', 1)[0]}",
            f"\"{environ.get('HTTP_REFERER', '-')}\" \"{environ.get('HTTP_USER_AGENT', '-')}\"")


def log_access(line: AccessLine, sent: int) -> None:
    """Write a handed-off stream's line, now that it has ended (:func:`access_line`),
    at the time it ended, as gunicorn writes its own."""
    if access_log.isEnabledFor(logging.INFO):
        who, request, agent = line
        when = time.strftime("[%d/%b/%Y:%H:%M:%S %z]", time.localtime())
        access_log.info("%s %s %s %s %s", who, when, request, sent, agent)
