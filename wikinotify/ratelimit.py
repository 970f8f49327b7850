"""How fast an account may call the writes that make workers or third parties work:
Flask-Limiter, counting in wikinotify's own Redis.

A route takes part with one decorator line under its ``@bp.<method>``: ``@writes`` (the
write limit) or ``@sends`` (that and the stricter send limit, for what makes a receiver or
a chat service be sent something). Each app gets a Limiter of its own that counts only
those routes, per signed-in account, and only their writes: it is never the wiki's global
limiter, and the wiki's routes (or its own Flask-Limiter) are left alone. Over a limit,
the blueprint answers 429 with ``Retry-After`` (see ``blueprint/core.py``).

A Redis that is down does not take the writes down with it: Flask-Limiter counts in the
process's memory until Redis answers again, and a failure it cannot fall back from
limits nothing (``swallow_errors``).
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Flask, current_app, request
from flask_limiter import Limit, Limiter, RateLimitExceeded
from limits import parse
from limits.storage import RedisStorage, Storage
from redis.exceptions import RedisError

from . import queue
from .config import config
from .login import caller_id
from .state import state

View = TypeVar("View", bound=Callable[..., Any])

#: The settings, each a Flask-Limiter rate (``"30/minute"``, ``"10/minute;100/day"``).
WRITE = "WIKINOTIFY_WRITE_RATE_LIMIT"
SEND = "WIKINOTIFY_SEND_RATE_LIMIT"
SETTINGS = (WRITE, SEND)

#: The views that take part (write routes: a read is never counted), and the settings
#: that limit each.
_limited: dict[Callable[..., Any], tuple[str, ...]] = {}


def _marking(*settings: str) -> Callable[[View], View]:
    def mark(view: View) -> View:
        _limited[view] = settings
        return view

    return mark


#: ``@writes``: counted against the write limit.
writes = _marking(WRITE)
#: ``@sends``: counted against the write limit and the send limit.
sends = _marking(WRITE, SEND)


def limited_by(view: Callable[..., Any] | None) -> tuple[str, ...]:
    """The settings that limit ``view`` (none for a view that does not take part)."""
    return _limited.get(view, ()) if view is not None else ()


def _here() -> tuple[str, ...]:
    return limited_by(current_app.view_functions.get(request.endpoint or ""))


def _exempt(setting: str) -> bool:
    """A guest is never counted (the view answers 401 without doing anything)."""
    return setting not in _here() or caller_id() is None


def init_app(app: Flask) -> Limiter:
    """The app's Limiter (its settings checked by their rule in :mod:`wikinotify.config`),
    counting in wikinotify's Redis under its queue's keys."""
    # Each setting's count is one per account, shared by every route it limits.
    rules = [
        Limit(functools.partial(config, name.removeprefix("WIKINOTIFY_")),
              key_function=_account, scope=name, shared=True,
              exempt_when=functools.partial(_exempt, name))
        for name in SETTINGS
    ]
    limiter = Limiter(
        _account,
        default_limits=list(rules),
        storage_uri=f"{AppRedisStorage.STORAGE_SCHEME[0]}://",
        strategy="fixed-window",
        key_prefix=_prefix(app),
        request_identifier=lambda: request.endpoint or "",
        swallow_errors=True,
        in_memory_fallback_enabled=True,
        headers_enabled=False,  # Retry-After is written on the 429 alone
    )
    # The wiki's own requests never reach the limits (nor their Redis round trip).
    limiter.request_filter(lambda: not _here())
    limiter.init_app(app)
    return limiter


def _account() -> str:
    return caller_id() or ""


def within(rate: str, *keys: tuple[str, ...]) -> bool:
    """Count one call against ``rate`` under each of ``keys``; whether every count is
    still within it. For a limit that counts only some calls, which the route limits
    cannot tell apart before the view has run (the one-click unsubscribe counts only the
    tokens it refuses). Counted as the route limits are, in the same Redis (or in memory
    while Flask-Limiter finds it down); a call that meets a Redis error, or the breaker of
    :func:`wikinotify.queue.quick`, is within.
    """
    # Flask types its proxy as the app itself: the proxy's method is unknown to mypy.
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    strategy, item = state(app).limiter.limiter, parse(rate)

    def count(_: Any) -> bool:  # on the quick client's connections (the storage's own)
        return all([strategy.hit(item, _prefix(app), *key) for key in keys])

    try:
        return queue.quick(app, count)  # behind the request path's breaker
    except (RedisError, OSError):
        return True


def refused_too_often(kind: str, token: str) -> bool:
    """Count a token just refused by a public, token-signed route (``kind``: the one-click
    unsubscribe, the feed) against the client's address and against the token itself;
    whether either count is past ``WIKINOTIFY_UNSUBSCRIBE_RATE`` a minute (then the route
    answers 429).

    Only refusals count: a valid token always works, so junk from one address (or from
    everyone behind a proxy the wiki did not set ``ProxyFix`` up for) never locks out a
    real one. Redis unreachable never turns a refusal into a 429 on its own.
    """
    digest = hashlib.sha256(token.encode(errors="replace")).hexdigest()[:32]
    rate = f"{config('UNSUBSCRIBE_RATE')}/minute"
    return not within(rate, (kind, "client", str(request.remote_addr)),
                      (kind, "token", digest))


def _prefix(app: Flask) -> str:
    return queue.redis_key(app, "limits")


def retry_after(limiter: Limiter, exceeded: RateLimitExceeded) -> int:
    """Seconds until the limit just exceeded lets a call through again (its whole period
    if the storage cannot say)."""
    try:
        current = limiter.current_limit
        if current is None:
            return _period(exceeded)
        # As Flask-Limiter writes it: its reset time is a whole second past the window's.
        return max(1, int(current.reset_at - time.time()))
    except (RedisError, OSError):
        return _period(exceeded)


def _period(exceeded: RateLimitExceeded) -> int:
    return int(exceeded.limit.limit.get_expiry())


class AppRedisStorage(Storage):
    """limits' Redis storage on the connections of wikinotify's request path (sub-second
    timeouts), made on first use: so that building the app never starts the embedded
    Redis, which starts only when a limited write first needs it.

    Flask-Limiter makes its storage from a URI: this class is registered for
    ``wikinotify://``. Each app has a Limiter, and so a storage, of its own, first used
    in a request of that app: ``current_app`` then says which Redis is meant.
    """

    STORAGE_SCHEME = ["wikinotify"]
    base_exceptions = (RedisError, OSError)

    def __init__(self, uri: str | None = None, **options: float | str | bool) -> None:
        super().__init__(uri)
        self._redis: RedisStorage | None = None
        self._lock = threading.Lock()

    def _target(self) -> RedisStorage:
        with self._lock:
            if self._redis is None:
                # Flask types its proxy as the app itself: the proxy's method is unknown.
                app = current_app._get_current_object()  # type: ignore[attr-defined]
                client = queue.quick_client(app)
                url = queue.redis_url(app)
                if url.startswith("unix://"):  # the embedded Redis; limits' name for it
                    url = "redis+" + url
                self._redis = RedisStorage(url, connection_pool=client.connection_pool)
            return self._redis

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        return self._target().incr(key, expiry, amount)

    def get(self, key: str) -> int:
        return self._target().get(key)

    def get_expiry(self, key: str) -> float:
        return self._target().get_expiry(key)

    def check(self) -> bool:
        return self._target().check()

    def reset(self) -> int | None:
        return self._target().reset()

    def clear(self, key: str) -> None:
        self._target().clear(key)
