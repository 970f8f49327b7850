"""Chat through Apprise: a reader's notifications as messages in Telegram, Slack, Matrix,
Discord, ntfy, Mattermost or any service Apprise knows (issue 12, DESIGN.md "Channels").

The target is an Apprise URL, which often carries a token, so it is stored sealed
(:mod:`wikinotify.outbound.secrets_box`) and shown only as Apprise's own privacy-masked form.

Apprise makes its own HTTP requests, so the SSRF guard cannot hand it a checked address the
way the webhook sender does. Instead, while a message is sent, every name the sending thread
resolves goes through the guard (:func:`guarded`): whatever host the service's plugin talks
to (a self-hosted ntfy, a Matrix homeserver, a redirect it is told to follow), the address it
connects to is the address that was checked, with no second lookup. The same guard records
the last HTTP answer, so a 429's ``Retry-After`` and a 410 are classed as they are for
webhooks.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from . import ssrf

#: Seconds to connect, and to wait for an answer: at most 15 s a request, as for webhooks.
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 10.0

#: Says why an address may not be reached, or None when it may (the SSRF guard's rule).
Refusal = Callable[[str, "ipaddress.IPv4Address | ipaddress.IPv6Address"], "str | None"]


class InvalidChatTarget(ValueError):
    """Not an Apprise URL this installation can send to; the message says why."""


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


class _Guard(threading.local):
    refusal: Refusal | None = None
    blocked: str | None = None
    status: int | None = None
    retry_after: str | None = None


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
    """Route the process's name lookups and requests' answers through the guard. Both
    wrappers do nothing unless the calling thread is inside :func:`guarded`."""
    import requests

    with _installed:
        if socket.getaddrinfo is _guarded_getaddrinfo:
            return
        socket.getaddrinfo = _guarded_getaddrinfo
        real_send = requests.Session.send

        def send(self: requests.Session, request: Any, **kwargs: Any) -> Any:
            response = real_send(self, request, **kwargs)
            if _guard.refusal is not None:
                _guard.status = response.status_code
                _guard.retry_after = response.headers.get("Retry-After")
            return response

        requests.Session.send = send  # type: ignore[method-assign]


@contextmanager
def guarded(refusal: Refusal) -> Iterator[_Guard]:
    """Check every address this thread resolves with ``refusal`` until the block ends."""
    _install()
    _guard.refusal, _guard.blocked, _guard.status, _guard.retry_after = refusal, None, None, None
    try:
        yield _guard
    finally:
        _guard.refusal = None


def _asset() -> Any:
    import apprise

    # No redirects, as for webhooks; nothing kept on disk between messages.
    return apprise.AppriseAsset(http_redirects=False, storage_mode="memory")


def service(url: str) -> Any:
    """The Apprise plugin for ``url``, or :class:`InvalidChatTarget`."""
    try:
        import apprise
    except ImportError as missing:  # an optional extra: chat is the one channel needing it
        raise InvalidChatTarget(
            "chat needs Apprise on the server: pip install 'wikinotify[chat]'"
        ) from missing
    if not isinstance(url, str) or not url.strip() or len(url) > 2000:
        raise InvalidChatTarget("give an Apprise URL, such as ntfy://ntfy.sh/my-topic")
    plugin = apprise.Apprise.instantiate(url.strip(), asset=_asset())
    if plugin is None:
        raise InvalidChatTarget("this is not a URL Apprise can send to")
    plugin.socket_connect_timeout = CONNECT_TIMEOUT
    plugin.socket_read_timeout = READ_TIMEOUT
    return plugin


def hint(url: str) -> str:
    """What its owner is shown of a target: the service and its host from Apprise's
    privacy-masked URL, nothing after it (an ntfy topic, which Apprise shows, is as good
    as a password)."""
    masked = str(service(url).url(privacy=True)).split("?", 1)[0]
    scheme, _, rest = masked.partition("://")
    first, _, more = rest.partition("/")
    return f"{scheme}://{first}{'/…' if more.strip('/') else ''}"[:255]


def host_of(url: str) -> str | None:
    """The host a self-hosted service's URL names (ntfy, Matrix, JSON...), so it can be
    checked when saved; ``None`` for a hosted service whose URL names only tokens."""
    host = getattr(service(url), "host", None)
    if not isinstance(host, str) or not host:
        return None
    # A hosted service's URL puts a token where a host would be (tgram://123456:ABC/...).
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host if "." in host or host == "localhost" else None
    return host


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
        ssrf.check(f"http://{host}/", allowed=allowed)
    return shown


def send(url: str, *, title: str, body: str, refusal: Refusal) -> ChatAnswer:
    """Send one message to ``url``, every address checked by ``refusal``.

    The plugin is called directly, not through ``Apprise.notify``: that one dispatches on a
    thread pool, where the guard (bound to this thread) would not see the lookups.
    """
    plugin = service(url)
    warnings = _Warnings()
    apprise_log = logging.getLogger("apprise")
    apprise_log.addHandler(warnings)
    started = time.monotonic()
    try:
        with guarded(refusal) as guard:
            ok = bool(plugin.notify(body=body, title=title))
    finally:
        apprise_log.removeHandler(warnings)
    return ChatAnswer(
        ok=ok,
        status=guard.status,
        retry_after=guard.retry_after,
        blocked=guard.blocked,
        latency_ms=int((time.monotonic() - started) * 1000),
        error=None if ok else ("; ".join(warnings.messages)[:1000] or "the service refused it"),
    )
