"""Live updates (§9.3): a commit that changes someone's summary reaches their open streams
through Redis pub/sub, and bumps the summary version their badge's ETag is built from.

Writers call :func:`changed` (or :func:`changed_everyone`) after their commit, from any
process on any machine. Each web process holds one :class:`Hub`: one Redis connection
subscribed to every user's channel by pattern, one thread reading it, and per user the
open streams to wake. A stream then reads the summary itself, so a message carries no
data and a lost or doubled one costs nothing but a read.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Iterable

from flask import Flask
from redis import Redis
from redis.exceptions import RedisError

from .queue import quick, redis_key, redis_url

log = logging.getLogger(__name__)

#: A summary version lives this long after its last bump; a missing one is made again (a
#: fresh random value, never one an old ETag could hold).
VERSION_TTL = 7 * 24 * 3600
#: A hub with no stream left closes its subscription after this many seconds.
HUB_IDLE_SECONDS = 30
#: How long the hub's reader waits for a message before it looks around (idle, stopped).
POLL_SECONDS = 1.0
#: After the subscription fails, the hub tries again this many seconds later.
RECONNECT_SECONDS = 1.0


def channel_prefix(app: Flask) -> str:
    """``wikinotify:<queue>:live``: alone, the channel of everyone; ``:<user id>`` after
    it, one user's."""
    return redis_key(app, "live")


def user_channel(app: Flask, user_id: str) -> str:
    return f"{channel_prefix(app)}:{user_id}"


def version_keys(app: Flask, user_id: str) -> tuple[str, str]:
    """The user's summary version and everyone's (the site switch and the purge bump it)."""
    return redis_key(app, "summary", user_id), redis_key(app, "summary")


def _token() -> str:
    return secrets.token_hex(8)


def changed(app: Flask, user_ids: Iterable[str]) -> None:
    """After a commit that changed these users' summaries: bump each one's version and
    publish on each one's channel, in one round trip. Never raises: with Redis down the
    open streams have already ended (the badges poll), and a summary whose version
    cannot be read is answered from the database."""
    user_ids = sorted({str(user_id) for user_id in user_ids})
    if user_ids:
        _send(app, [(version_keys(app, u)[0], user_channel(app, u)) for u in user_ids])


def changed_everyone(app: Flask) -> None:
    """After a commit that may change anyone's summary (a site switch, the purge)."""
    _send(app, [(version_keys(app, "")[1], channel_prefix(app))])


def _send(app: Flask, bumps: list[tuple[str, str]]) -> None:
    def publish(client: Redis) -> None:
        pipe = client.pipeline(transaction=False)
        for key, channel in bumps:
            pipe.set(key, _token(), ex=VERSION_TTL)
            pipe.publish(channel, b"")
        pipe.execute()

    try:
        quick(app, publish)
    except (RedisError, OSError) as error:
        log.warning("wikinotify: could not publish a change (%s); badges will poll", error)


def summary_version(app: Flask, user_id: str) -> str | None:
    """The user's summary version joined with everyone's: one Redis ``MGET``; a missing
    one is created first. ``None`` when Redis cannot say (the caller reads the database).

    Read it *before* the summary it tags: a change committed in between then only makes
    the tag older than the body, never newer (the next poll gets a 200, not a stale 304).
    """
    keys = version_keys(app, user_id)

    def read(client: Redis) -> list[bytes]:
        values = client.mget(keys)
        if None not in values:
            return values
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.set(key, _token(), ex=VERSION_TTL, nx=True)
        pipe.mget(keys)
        return pipe.execute()[-1]

    try:
        return ":".join(value.decode() for value in quick(app, read))
    except (RedisError, OSError) as error:
        log.warning("wikinotify: no summary version from Redis (%s)", error)
        return None


class Listener:
    """One open stream's doorbell."""

    def __init__(self) -> None:
        self._rung = threading.Event()

    def ring(self) -> None:
        self._rung.set()

    def wait(self, timeout: float) -> bool:
        """Whether it rang within ``timeout`` seconds. Cleared before the caller reads the
        summary, so a change committed during that read rings again."""
        rung = self._rung.wait(timeout)
        self._rung.clear()
        return rung


class Hub:
    """One web process's subscription to every user's channel of one wikinotify."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix
        #: Set while the subscription is up; a stream ends when it drops.
        self.connected = threading.Event()
        self._listeners: dict[str, set[Listener]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._idle_since = time.monotonic()

    def join(self, user_id: str) -> Listener:
        listener = Listener()
        with self._lock:
            self._listeners.setdefault(user_id, set()).add(listener)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="wikinotify-live", daemon=True
                )
                self._thread.start()
        return listener

    def leave(self, user_id: str, listener: Listener) -> None:
        with self._lock:
            mine = self._listeners.get(user_id, set())
            mine.discard(listener)
            if not mine:
                self._listeners.pop(user_id, None)
            if not self._listeners:
                self._idle_since = time.monotonic()

    def streams(self) -> int:
        with self._lock:
            return sum(len(group) for group in self._listeners.values())

    def _ring(self, user_id: str | None) -> None:
        with self._lock:
            if user_id is None:
                chosen = [lst for group in self._listeners.values() for lst in group]
            else:
                chosen = list(self._listeners.get(user_id, ()))
        for listener in chosen:
            listener.ring()

    def _stopping(self) -> bool:
        """No stream for a while: this thread stops. Decided under the lock, so a stream
        joining at that moment starts a thread of its own, which this one no longer
        touches anything of."""
        with self._lock:
            if self._listeners or time.monotonic() - self._idle_since < HUB_IDLE_SECONDS:
                return False
            self._thread = None
            self.connected.clear()
            return True

    def _run(self) -> None:
        while True:
            try:
                if self._serve():
                    return
            except (RedisError, OSError) as error:
                log.warning("wikinotify: live updates lost Redis (%s); retrying", error)
            self.connected.clear()
            self._ring(None)  # every stream ends, and its badge polls until Redis is back
            time.sleep(RECONNECT_SECONDS)
            if self._stopping():
                return

    def _serve(self) -> bool:
        """Read the subscription until this hub has been idle a while (``True``)."""
        client = Redis.from_url(self.url, socket_connect_timeout=2, socket_timeout=10,
                                health_check_interval=5)
        pubsub = client.pubsub()
        try:
            pubsub.psubscribe(f"{self.prefix}:*")
            pubsub.subscribe(self.prefix)  # confirmed second: then both are live
            while not self._stopping():
                message = pubsub.get_message(timeout=POLL_SECONDS)
                if message is not None:
                    self._deliver(message)
            return True
        finally:
            pubsub.close()
            client.close()

    def _deliver(self, message: dict) -> None:
        channel = message["channel"].decode()
        if message["type"] == "subscribe":
            # Both subscriptions are live. No stream was open without them (a stream
            # waits for this before its first read, and ends when they drop), so no
            # change can have been missed.
            self.connected.set()
        elif message["type"] == "pmessage":
            self._ring(channel[len(self.prefix) + 1:])
        elif message["type"] == "message":
            self._ring(None)


_hubs: dict[tuple[str, str], Hub] = {}
_hubs_lock = threading.Lock()


def hub(app: Flask) -> Hub:
    """This process's hub for ``app``'s Redis and queue (made on first use, so a
    forking server makes it in each worker, after the fork)."""
    key = (redis_url(app), channel_prefix(app))
    with _hubs_lock:
        if key not in _hubs:
            _hubs[key] = Hub(*key)
        return _hubs[key]
