"""Chat through Apprise: a reader's notifications as messages in Telegram, Slack, Matrix,
Discord, ntfy, Mattermost or any service Apprise knows (docs/channels.md#webhooks,
docs/rules.md#channels).

The target is an Apprise URL, which often carries a token, so it is stored sealed
(:mod:`wikinotify.outbound.secrets_box`) and shown only as Apprise's own privacy-masked form.

Apprise makes its own HTTP requests, so the SSRF guard cannot hand it a checked address the
way the webhook sender does. Instead, while a message is sent, every name the sending thread
resolves goes through the guard (:func:`guarded`): whatever host the service's plugin talks
to (a self-hosted ntfy, a Matrix homeserver, a redirect it is told to follow), the address it
connects to is the address that was checked, with no second lookup. The same guard records
the last HTTP answer, so a 429's ``Retry-After`` and a 410 are classed as they are for
webhooks, reads no more of an answer than a webhook's (:data:`ANSWER_LIMIT`), and keeps the
connections the thread makes, so that a send given up at its deadline ends them
(:class:`_Connections`). What a target's URL may say is :mod:`.chat_targets`'.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..config import config
from ..models import Delivery, Endpoint
from . import chat_targets as targets
from . import secrets_box, ssrf
from .chat_targets import InvalidChatTarget as InvalidChatTarget
from .outcomes import (
    ANSWER_LIMIT,
    PERMANENT,
    Message,
    Outcome,
    blocked,
    from_status,
    unreachable,
)

#: Says why an address may not be reached, or None when it may (the SSRF guard's rule).
Refusal = Callable[[str, "ipaddress.IPv4Address | ipaddress.IPv6Address"], "str | None"]


@dataclass(frozen=True)
class ChatAnswer:
    """What one message's sending came to."""

    ok: bool
    #: The last HTTP status the service answered, if it answered at all.
    status: int | None
    #: The last answer's ``Retry-After`` header, as given.
    retry_after: str | None
    #: Set when the guard refused an address: the reason, and no connection was made.
    blocked: str | None
    latency_ms: int
    #: Apprise's own account of a failure (its warnings), without the target's secrets.
    error: str | None


class _Connections:
    """The sockets one send's thread has connected, so that the caller can end them when
    it gives the send up: requests bounds each wait, not the whole request, and a service
    that sends a byte just within each read timeout would keep the thread and its socket
    for as long as it cares to (hours, for an answer read to its bound), a pair for every
    attempt, until the worker ran out of descriptors.

    Each is kept as a duplicate: TLS wraps the socket in a new object and detaches the
    one connected, and shutting down the duplicate ends the connection under both."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._ended = False

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            if not self._ended:
                self._sockets.append(sock.dup())
                return
        sock.close()
        raise OSError("the message's time is spent")

    def end(self) -> None:
        """Hang up every connection, so that whatever waits on one returns at once; a
        connection made afterwards is hung up as it is made."""
        with self._lock:
            self._ended = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):  # the service may have hung up first
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class _Guard(threading.local):
    refusal: Refusal | None = None
    blocked: str | None = None
    status: int | None = None
    retry_after: str | None = None
    connections: _Connections | None = None


_guard = _Guard()
_installed = threading.Lock()
_real_getaddrinfo = socket.getaddrinfo


def _guarded_getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
    results = _real_getaddrinfo(host, port, *args, **kwargs)
    refusal = _guard.refusal
    if refusal is None:
        return results
    for *_, sockaddr in results:
        reason = refusal(str(host), ipaddress.ip_address(sockaddr[0]))
        if reason is not None:
            _guard.blocked = reason
            raise OSError(f"refused by wikinotify's SSRF guard: {reason}")
    return results


def _install() -> None:
    """Route the process's name lookups, requests' connections and their answers through
    the guard. The wrappers do nothing unless the calling thread is inside
    :func:`guarded`."""
    import requests
    import urllib3.util.connection

    with _installed:
        if socket.getaddrinfo is _guarded_getaddrinfo:
            return
        socket.getaddrinfo = _guarded_getaddrinfo
        real_connect = urllib3.util.connection.create_connection

        def create_connection(*args: Any, **kwargs: Any) -> socket.socket:
            sock = real_connect(*args, **kwargs)
            if _guard.connections is not None:
                _guard.connections.add(sock)
            return sock

        urllib3.util.connection.create_connection = create_connection
        real_send = requests.Session.send

        def send(self: requests.Session, request: Any, **kwargs: Any) -> Any:
            if _guard.refusal is None:
                return real_send(self, request, **kwargs)
            # No proxy from the environment: through one, the guard would see only the
            # proxy's name, and the proxy would reach whatever the URL names. No redirect
            # followed (requests reads each one's answer whole). The answer streamed, so
            # that only its first ANSWER_LIMIT bytes are read, uncompressed as sent: an
            # answer of that size could be any size unpacked.
            kwargs.update(proxies={}, allow_redirects=False, stream=True)
            request.headers["Accept-Encoding"] = "identity"
            response = real_send(self, request, **kwargs)
            _bound(response)
            _guard.status = response.status_code
            _guard.retry_after = response.headers.get("Retry-After")
            return response

        requests.Session.send = send  # type: ignore[method-assign]


def _bound(response: Any) -> None:
    """Read the first :data:`ANSWER_LIMIT` bytes of a streamed answer, as the plugin's
    ``content`` and ``text``, and hang up on the rest, unread."""
    try:
        body = response.raw.read(ANSWER_LIMIT, decode_content=False)
    finally:
        response.close()
    response._content = body


@contextmanager
def guarded(refusal: Refusal, connections: _Connections | None = None) -> Iterator[_Guard]:
    """Check every address this thread resolves with ``refusal`` until the block ends,
    and keep the connections it makes in ``connections``."""
    _install()
    _guard.refusal, _guard.blocked, _guard.status, _guard.retry_after = refusal, None, None, None
    _guard.connections = connections
    try:
        yield _guard
    finally:
        _guard.refusal = _guard.connections = None


def _asset() -> Any:
    import apprise

    # No redirects, as for webhooks; nothing kept on disk between messages.
    return apprise.AppriseAsset(http_redirects=False, storage_mode="memory")


def service(url: str, *, connect_timeout: float = 5.0, timeout: float = 15.0) -> Any:
    """The Apprise plugin for ``url``, or :class:`InvalidChatTarget`: the rules a target
    meets when it is saved and again at every send."""
    try:
        import apprise
    except ImportError as missing:  # an optional extra: chat is the one channel needing it
        raise InvalidChatTarget(targets.NO_APPRISE) from missing
    if not isinstance(url, str) or not url.strip() or len(url) > 2000:
        raise InvalidChatTarget(targets.NOT_GIVEN)
    url = url.strip()
    plugin = apprise.Apprise.instantiate(url, asset=_asset())
    if plugin is None:
        raise InvalidChatTarget(targets.NOT_APPRISE)
    targets.check(plugin, url)
    # requests has no total deadline; the read timeout bounds each wait for the service.
    plugin.socket_connect_timeout = connect_timeout
    plugin.socket_read_timeout = timeout
    return plugin


def hint(url: str) -> str:
    """What anyone is shown of a target (its owner, the audit, an error): the service's
    scheme, and the host of a self-hosted one (:func:`host_of`), never what follows it nor
    a hosted service's tokens, which stand where a host would (Apprise's privacy mask keeps
    a token's first and last characters and ntfy's short form's topic, as good as a
    password). A name of one label is shown as none: a server on the internet has a dotted
    name or an address, and ``ntfy://topic/other`` more likely misplaces a topic."""
    scheme = str(service(url).url(privacy=True)).partition("://")[0]
    host = host_of(url)
    if host is None or not ("." in host or ":" in host or _ipv4(host)):
        return f"{scheme}://…"
    return f"{scheme}://{f'[{host}]' if ':' in host else host}/…"[:255]


def _ipv4(host: str) -> bool:
    """Whether ``host`` is an IPv4 address in any of its written forms (``2130706433``)."""
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return True


def host_of(url: str) -> str | None:
    """The host a self-hosted service's URL names (ntfy, Matrix, Mattermost...), so it can
    be checked when saved, however it is written (``LOCALHOST``, ``2130706433``,
    ``0x7f000001``); ``None`` for a hosted service, whose URL names only tokens where a
    host would be (``tgram://123456:ABC/...``), which are never looked up in DNS. Which is
    which, Apprise's plugin says: only a self-hosted one has a ``host`` in its URL
    templates."""
    plugin = service(url)
    host = getattr(plugin, "host", None)
    if "host" not in type(plugin).template_tokens or not isinstance(host, str) or not host:
        return None
    return host.strip("[]")


class _Warnings(logging.Handler):
    """Apprise's warnings about one message, from the sending thread only."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.thread = threading.get_ident()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.messages.append(record.getMessage())


def check_target(url: str, allowed: ssrf.Allowed) -> str:
    """Refuse a target that Apprise cannot use (:class:`InvalidChatTarget`) or whose host
    the SSRF guard refuses (:class:`ssrf.Blocked`), when it is saved; return its hint.

    A hosted service's URL names no host (its plugin knows the service's), so only its
    form is checked here; every address any send resolves is checked again then.
    """
    shown = hint(url)
    host = host_of(url)
    if host is not None:
        # The guard's lookup and rules; the scheme and port do not matter to an address.
        literal = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL writes it
        ssrf.check(f"http://{literal}/", allowed=allowed)
    return shown


def _scrubbed(text: str, url: str) -> str:
    """``text`` without any part of ``url`` after its scheme: Apprise's warnings name the
    topic, channel or token they failed on, and those are the target's secrets."""
    parts = re.split(r"[/:@?&=#,;]+", url.partition("://")[2])
    for part in sorted((p for p in parts if len(p) >= 3), key=len, reverse=True):
        text = text.replace(part, "…")
    return text


def send(url: str, *, title: str, body: str, refusal: Refusal,
         connect_timeout: float = 5.0, timeout: float = 15.0) -> ChatAnswer:
    """Send one message to ``url``, every address checked by ``refusal``, given up after
    ``timeout`` seconds in all.

    The plugin is called directly, not through ``Apprise.notify``: that one dispatches on a
    thread pool, where the guard (bound to the sending thread) would not see the lookups.
    It runs on a thread of its own, because requests bounds each wait but not the whole
    request: a service that answers a byte at a time would hold the worker for ever. A
    message given up that way has its connections hung up, which ends its thread too.
    """
    plugin = service(url, connect_timeout=connect_timeout, timeout=timeout)
    answer: dict[str, Any] = {}
    connections = _Connections()

    def attempt() -> None:
        warnings = _Warnings()
        apprise_log = logging.getLogger("apprise")
        apprise_log.addHandler(warnings)
        try:
            with guarded(refusal, connections) as guard:
                try:
                    ok = bool(plugin.notify(body=body, title=title))
                except Exception as error:  # a plugin's bug fails its message, not the run
                    warnings.messages.append(f"Apprise failed: {type(error).__name__}")
                    ok = False
        finally:
            apprise_log.removeHandler(warnings)
        answer.update(ok=ok, status=guard.status, retry_after=guard.retry_after,
                      blocked=guard.blocked, warnings=warnings.messages)

    started = time.monotonic()
    sender = threading.Thread(target=attempt, name="wikinotify-chat", daemon=True)
    sender.start()
    sender.join(timeout)
    given_up = sender.is_alive()  # decided first: once hung up, it ends with an answer
    connections.end()
    latency_ms = int((time.monotonic() - started) * 1000)
    if given_up:
        return ChatAnswer(ok=False, status=None, retry_after=None, blocked=None,
                          latency_ms=latency_ms, error=f"no answer within {timeout:g} s")
    ok = answer["ok"]
    said = _scrubbed("; ".join(answer["warnings"]), url)
    return ChatAnswer(
        ok=ok,
        status=answer["status"],
        retry_after=answer["retry_after"],
        blocked=answer["blocked"],
        latency_ms=latency_ms,
        error=None if ok else (said or "the service refused the message"),
    )


def send_chat(endpoint: Endpoint, delivery: Delivery, message: Message) -> Outcome:
    """The delivery engine's sender for chat endpoints (the contract is in
    :mod:`.engine`): the entry's sentence and link, through Apprise."""
    if endpoint.target_encrypted is None:
        return Outcome(error_class=PERMANENT, error="the chat target is missing")
    try:
        url = secrets_box.unseal(endpoint.target_encrypted)
    except secrets_box.Unreadable:
        return Outcome(error_class=PERMANENT,
                       error="the chat target cannot be unsealed (was SECRET_KEY changed?)")
    try:
        answer = send(url, title=message.title, body=message.text,
                      refusal=ssrf.allowed().refusal,
                      connect_timeout=float(config("OUTBOUND_CONNECT_TIMEOUT")),
                      timeout=float(config("OUTBOUND_TIMEOUT")))
    except InvalidChatTarget as invalid:
        return Outcome(error_class=PERMANENT, error=str(invalid))
    if answer.blocked is not None:
        return blocked(answer.blocked)
    if answer.ok:
        return Outcome(status=answer.status, latency_ms=answer.latency_ms)
    error = answer.error or "the service refused the message"
    if answer.status is None:
        return unreachable(error, latency_ms=answer.latency_ms)
    if 200 <= answer.status < 300:
        # The service answered, and its answer said no (a chat it cannot post to).
        return Outcome(status=answer.status, latency_ms=answer.latency_ms,
                       error_class=PERMANENT, error=error)
    return from_status(answer.status, latency_ms=answer.latency_ms,
                       retry_after=answer.retry_after)
