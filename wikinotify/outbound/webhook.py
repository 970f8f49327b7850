"""The webhook sender: one signed POST to the address the SSRF guard checked.

The URL is checked again here, at send time (a name may resolve elsewhere today), and the
request goes to the checked address, not to the name: httpcore connects to the IP, sends the
name in ``Host``, and gives it to TLS as the SNI name that the certificate is checked
against, so HTTPS stays verified and there is no second DNS lookup to rebind. Redirects
are not followed (a redirect's target was never checked); proxies from the environment are
not used (the request must go where it was checked to go).

Timeouts: ``WIKINOTIFY_OUTBOUND_CONNECT_TIMEOUT`` (5 s) to connect, and
``WIKINOTIFY_OUTBOUND_TIMEOUT`` (15 s) for the whole request: every socket wait (connect,
TLS, each write and each read of the answer's headers and body) is bounded by what is left
of it, so a receiver that trickles its answer is cut off on time ("timed out after 15 s",
transient) instead of outliving the delivery's lease. httpcore (httpx's own transport) is
used directly because only its network backend lets every wait be bounded this way. Only
the first :data:`ANSWER_LIMIT` bytes of an answer are read.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from ..config import config
from ..models import Delivery, Endpoint, utcnow
from . import ssrf, standard_webhooks
from .outcomes import ANSWER_LIMIT, Message, Outcome, blocked, from_status, unreachable

USER_AGENT = "wikinotify-webhooks/1"


def send(endpoint: Endpoint, delivery: Delivery, message: Message) -> Outcome:
    """Sign ``message.body`` and POST it to ``endpoint``; the :class:`Outcome`."""
    if not endpoint.url:
        return blocked("the endpoint has no URL")
    try:
        target = ssrf.check(endpoint.url, allowed=ssrf.allowed())
    except ssrf.Unresolved as failed:
        # A lookup that failed today may work tomorrow: tried again, unlike a refusal.
        return unreachable(failed.reason)
    except ssrf.Blocked as refused:
        return blocked(refused.reason)
    now = utcnow()
    headers = {
        **standard_webhooks.headers(delivery.message_id, now, message.body,
                          standard_webhooks.signing_secrets(endpoint, now)),
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "Host": target.host_header,
    }
    return post(target, message.body, headers,
                connect_timeout=float(config("OUTBOUND_CONNECT_TIMEOUT")),
                timeout=float(config("OUTBOUND_TIMEOUT")))


def post(target: ssrf.Target, body: str | bytes, headers: dict[str, str], *,
         connect_timeout: float, timeout: float) -> Outcome:
    """POST ``body`` to ``target``'s checked address; never raises for what the network
    or the receiver did. The whole request (connecting, TLS, sending, the answer's headers
    and body) ends ``timeout`` seconds after it began, however the receiver paces it."""
    started = time.monotonic()

    def elapsed() -> int:
        return int((time.monotonic() - started) * 1000)

    backend = _Deadline(started + timeout)
    extensions: dict[str, Any] = {
        "timeout": {"connect": connect_timeout, "read": timeout, "write": timeout,
                    "pool": timeout},
        "sni_hostname": target.hostname,
    }
    try:
        with httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(),
                                     network_backend=backend) as pool, \
                pool.stream("POST", target.connect_url, headers=list(headers.items()),
                            content=body if isinstance(body, bytes) else body.encode(),
                            extensions=extensions) as response:
            answer = _read(response)
            found = {name.decode("latin-1").lower(): value.decode("latin-1")
                     for name, value in response.headers}
            return from_status(
                response.status, latency_ms=elapsed(),
                retry_after=found.get("retry-after"), location=found.get("location"),
                body=answer,
            )
    except httpcore.TimeoutException as error:
        if backend.spent or not isinstance(error, httpcore.ConnectTimeout):
            return unreachable(f"timed out after {timeout:g} s", latency_ms=elapsed())
        return unreachable(f"no connection within {connect_timeout:g} s", latency_ms=elapsed())
    except httpcore.ConnectError as error:
        return unreachable(f"could not connect: {_reason(error)}", latency_ms=elapsed())
    except (httpcore.NetworkError, httpcore.ProtocolError) as error:
        return unreachable(f"{type(error).__name__}: {_reason(error)}", latency_ms=elapsed())


def _read(response: httpcore.Response) -> bytes:
    answer = b""
    for chunk in response.iter_stream():
        answer += chunk
        if len(answer) >= ANSWER_LIMIT:
            break
    return answer[:ANSWER_LIMIT]


def _reason(error: Exception) -> str:
    """The error's own words, e.g. "[Errno 111] Connection refused" (no URL in it)."""
    return (str(error) or type(error).__name__)[:200]


class _Deadline(httpcore.NetworkBackend):
    """httpcore's own sockets, each wait bounded by what is left until ``deadline``
    (``time.monotonic()``): a per-read timeout alone lets a receiver that sends one byte
    a second hold the request for ever, past the lease, and be sent it again."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.spent = False
        self._inner = httpcore.SyncBackend()

    def left(self, timeout: float | None, timed_out: type[Exception]) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.spent = True
            raise timed_out("the request's time is spent")
        return remaining if timeout is None else min(timeout, remaining)

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(host, port, self.left(timeout, httpcore.ConnectTimeout),
                                         local_address, socket_options)
        return _DeadlineStream(stream, self)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None
                            ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("unix sockets are not a webhook's address")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(min(seconds, max(self.deadline - time.monotonic(), 0)))


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, backend: _Deadline) -> None:
        self._inner = inner
        self._backend = backend

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._backend.left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._backend.left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        stream = self._inner.start_tls(ssl_context, server_hostname,
                                       self._backend.left(timeout, httpcore.ConnectTimeout))
        return _DeadlineStream(stream, self._backend)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)
