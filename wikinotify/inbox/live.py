"""Live updates (docs/rules.md#live-updates): a commit that changes someone's summary reaches their
open streams through Redis pub/sub, and forgets the summary version their badge's ETag is built from
(the next read makes a fresh one).

Writers call :func:`changed` (or :func:`changed_everyone`) after their commit, from any
process on any machine: one message on the channel of everyone, naming the users whose
summaries changed (a fan-out's whole batch in one). Each web process holds one
:class:`Hub`: one Redis connection subscribed to that channel and, by pattern, to every
user's own (where messages end streams: those of a session the wiki signed out,
:func:`end_session`), one thread reading it, and per user the open streams to wake. The
streams then read their summaries, so a message carries nothing but who, and a lost or
doubled one costs nothing but a read; the streams that one burst of messages woke read
theirs together (:class:`Wake`).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import math
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import metadata
from typing import Any, TypeVar, cast

from flask import Flask
from redis import Connection, ConnectionPool, Redis
from redis.client import Pipeline, PubSub
from redis.exceptions import ConnectionError, NoScriptError, RedisError
from sqlalchemy.orm import Session

from .. import commits
from ..queue import quick, quick_client, redis_key, redis_url
from . import stream_places

log = logging.getLogger(__name__)

#: A summary version lives this long after it was made, unless a change forgets it first;
#: a missing one is made again (a fresh random value, never one an old ETag could hold).
VERSION_TTL = 7 * 24 * 3600
#: A hub with no stream left closes its subscription after this many seconds.
HUB_IDLE_SECONDS = 30
#: How long the hub waits for the rest of a message whose first bytes have arrived.
POLL_SECONDS = 1.0
#: A stream's wait longer than this holds no timer of its own: the hub looks at its
#: streams this often and wakes those whose wait is due (up to this much late); its
#: reader waits this long for a message before it looks around (idle, stopped). Under
#: gevent a timed wait makes a ``Timeout`` and a timer, objects every waiting stream held
#: for each full collection to walk, and 8% of the push's CPU
#: (docs/benchmarks.md#the-live-badge). A shorter wait keeps its own timer. Short, because
#: what one look wakes runs at once (a check and a keep-alive each), and a request
#: arriving then waits for all of it: a look a second woke a second's worth of a
#: process's 5,000 streams together, some 200; a look every tenth of a second walks the
#: streams ten times as often and wakes a tenth as many at a time (their checks then
#: gather, :data:`~wikinotify.blueprint.stream_routes.CHECK_GATHER_SECONDS`). A look
#: touches only the waits falling due (:meth:`Hub._look`), not every stream: walking all
#: of a process's 5,000 took 4 ms a look under the benchmark's load, in one go, and was
#: inside most of the slowest inbox pages beside 10,000 streams (docs/benchmarks.md,
#: session 15).
LOOK_SECONDS = 0.1
#: After the subscription fails, the hub tries again this many seconds later.
RECONNECT_SECONDS = 1.0
#: At most this many messages make one :class:`Wake` (the hub then looks around again).
WAKE_MESSAGES = 1000
#: How long the summary's poll trusts a signed session's account id without the wiki
#: loading the account again (:func:`trusted_summary`): a deactivated account gets its own
#: unchanged summary (a 304, or the body it last had) for at most this long, nothing
#: newer (its open stream ends sooner: at its next wake, or check,
#: :data:`wikinotify.blueprint.stream_life.KEEPALIVE_SECONDS`).
ACCOUNT_RECHECK_SECONDS = 300


def channel_prefix(app: Flask) -> str:
    """``wikinotify:<queue>:live``: alone, the channel of everyone (whose messages name
    the users whose summaries changed, or no one: everyone's); ``:<user id>`` after it,
    one user's (whose messages end streams)."""
    return redis_key(app, "live")


def user_channel(app: Flask, user_id: str) -> str:
    return f"{channel_prefix(app)}:{user_id}"


def version_keys(app: Flask, user_id: str) -> tuple[str, str]:
    """The user's summary version and everyone's (the site switch and the purge forget it)."""
    return redis_key(app, "summary", user_id), redis_key(app, "summary")


def account_key(app: Flask, user_id: str) -> str:
    """Present while the wiki has loaded the account in the last
    :data:`ACCOUNT_RECHECK_SECONDS` (the summary's full path sets it)."""
    return redis_key(app, "summary-account", user_id)


def trust(pipe: Pipeline, app: Flask, user_id: str) -> None:
    """Trust the account the wiki has just loaded and found active, in ``pipe``, for
    :data:`ACCOUNT_RECHECK_SECONDS` (:func:`trusted_summary`, :func:`look_page`)."""
    pipe.set(account_key(app, user_id), b"1", ex=ACCOUNT_RECHECK_SECONDS)


def _token() -> str:
    return secrets.token_hex(8)


def changed(app: Flask, user_ids: Iterable[str]) -> None:
    """After a commit that changed these users' summaries: forget each one's version and
    publish their ids, in one round trip. Never raises: with Redis down the open streams
    have already ended (the badges poll), and a summary whose version cannot be read is
    answered from the database."""
    user_ids = sorted({str(user_id) for user_id in user_ids})
    if user_ids:
        _send(app, version_keys(app, "")[1] + ":", user_ids, name_them=True)


#: The work :func:`changed_at_commit` asks for.
_CHANGED_AT_COMMIT = "wikinotify.live.changed"


def changed_at_commit(session: Session, user_ids: Iterable[str]) -> None:
    """:func:`changed` for these users once ``session`` commits (nothing if it rolls back)."""
    commits.after_commit(session, _CHANGED_AT_COMMIT, [str(user_id) for user_id in user_ids])


commits.work(_CHANGED_AT_COMMIT, lambda app, user_ids: changed(app, user_ids))


#: A message on a user's channel that ends streams rather than waking them: ``END``
#: then the id of the session whose streams end. The streams opened without a session
#: id (:func:`wikinotify.login.stream_session_id`) end at every such message, since any
#: sign-out may be theirs; an empty id ends only those, never the account's others.
END = b"end:"
#: A message on a user's channel that ends one stream, whose place went to a newer one
#: of the same account (:func:`wikinotify.inbox.stream_places.take`): ``END_PLACE`` then the
#: place's id.
END_PLACE = b"end-place:"


def end_session(app: Flask, user_id: str, session_id: str | None) -> None:
    """The wiki signed a session of ``user_id`` out: the streams it opened end, in every
    web process, as soon as the message arrives, with those opened without a session id
    (``None`` ends only these). Never raises."""
    message = END + (session_id or "").encode()
    try:
        quick(app, lambda client: client.publish(user_channel(app, user_id), message))
    except (RedisError, OSError) as error:
        log.warning("wikinotify: could not end a signed-out session's streams (%s)", error)


def changed_everyone(app: Flask) -> None:
    """After a commit that may change anyone's summary (a site switch, the purge)."""
    _send(app, version_keys(app, "")[1], [""], name_them=False)


#: Forget the version key ARGV[1]..id of each id of the JSON list ARGV[3], then publish
#: on the channel of everyone, ARGV[2]: that list (ARGV[4] is ``1``), or nothing, which
#: means everyone. A version is forgotten rather than set anew: the next read makes a
#: fresh random one (:func:`summary_versions`), which no old ETag holds, so the badge sees
#: the change all the same. Only readers who poll keep a key, where setting one for every
#: person a fan-out reached kept a million keys for a week after a million-watcher event,
#: and cost Redis twice the time. One message for a whole batch, where one per user (on
#: each user's channel) cost Redis 4.8 against 2.2 ms of CPU for a fan-out batch of 5,000
#: with no one subscribed, and 5,000 deliveries to every web process, whose hub parsed
#: each (docs/capacity.md). One command of four arguments: as a pipeline of commands per
#: user, redis-py's packing and parsing cost the fan-out some 50 µs a user. The keys are
#: named in the script rather than in KEYS, which only a Redis Cluster would need, and RQ
#: does not run on one. A script runs whole: no read sees a reader told and her version
#: kept.
_TELL = """
local keys, ids = ARGV[1], cjson.decode(ARGV[3])
local names = {}
for i, id in ipairs(ids) do
  names[#names + 1] = keys .. id
  if #names == 1000 or i == #ids then
    redis.call('DEL', unpack(names))
    names = {}
  end
end
redis.call('PUBLISH', ARGV[2], ARGV[4] == '1' and ARGV[3] or '')
"""


def _send(app: Flask, keys: str, ids: list[str], *, name_them: bool) -> None:
    def publish(client: Redis) -> None:
        tell = client.register_script(_TELL)
        tell(args=[keys, channel_prefix(app), json.dumps(ids), "1" if name_them else "0"])

    try:
        quick(app, publish)
    except (RedisError, OSError) as error:
        log.warning("wikinotify: could not publish a change (%s); badges will poll", error)


def summary_version(app: Flask, user_id: str, *, account_loaded: bool = False) -> str | None:
    """The user's summary version joined with everyone's: one Redis ``MGET``; a missing
    one is created first. ``None`` when Redis cannot say (the caller reads the database).
    ``account_loaded``: the wiki has just loaded this account and found it active, so
    :func:`trusted_summary` may answer for it (in the same round trip).

    Read it *before* the summary it tags: a change committed in between then only makes
    the tag older than the body, never newer (the next poll gets a 200, not a stale 304).
    """
    versions = summary_versions(app, [user_id], loaded=user_id if account_loaded else None)
    return None if versions is None else versions[user_id]


def summary_versions(app: Flask, user_ids: Sequence[str], *,
                     loaded: str | None = None) -> dict[str, str] | None:
    """:func:`summary_version` of several users, in one round trip (two when some are
    missing); ``loaded``: the one account the wiki has just loaded."""
    everyone = version_keys(app, "")[1]
    keys = [version_keys(app, user_id)[0] for user_id in user_ids] + [everyone]

    def read(client: Redis) -> list[bytes]:
        values: list[bytes | None]
        if loaded is not None:
            pipe = client.pipeline(transaction=False)
            pipe.mget(keys)
            trust(pipe, app, loaded)
            values = pipe.execute()[0]
        else:
            values = cast("list[bytes | None]", client.mget(keys))  # bytes: not decoded
        if None not in values:
            return cast(list[bytes], values)
        # Every key, in one script: a change may forget any of them after the first
        # read, and would leave the MGET a hole.
        args: list[str | int] = [VERSION_TTL]
        for key in keys:
            args += (key, _token())
        created: list[bytes] = client.register_script(_VERSIONS)(args=args)
        return created

    try:
        values = [value.decode() for value in quick(app, read)]
    except (RedisError, OSError) as error:
        log.warning("wikinotify: no summary version from Redis (%s)", error)
        return None
    mine, theirs = values[:len(user_ids)], ":".join(values[len(user_ids):])
    return {user_id: f"{own}:{theirs}" for user_id, own in zip(user_ids, mine, strict=True)}


def wiki_version_key(app: Flask) -> str:
    """The version of what the wiki says about its pages and people (their titles, paths,
    comments, groups, permissions): forgotten by :func:`wiki_changed`."""
    return redis_key(app, "wiki-version")


def wiki_changed(app: Flask) -> None:
    """After a commit that may change what the wiki says about a page or a person (an
    emitted event, :meth:`wikinotify.WikiNotify.access_changed`): forget the wiki's
    version, so no page of anyone's inbox kept before it is given again. Never raises.
    Sent past the request path's breaker (:func:`~wikinotify.queue.quick`), which one
    slow call opens for this process alone while the others go on giving kept pages, but
    with its sub-second timeout: a hung Redis costs the wiki's request that much, not
    more."""
    try:
        forgetting_wiki(app)(quick_client(app))
    except (RedisError, OSError) as error:
        log.warning("wikinotify: could not forget the wiki's version (%s); pages kept "
                    "before may be given for %d s more", error, ACCOUNT_RECHECK_SECONDS)


def forgetting_wiki(app: Flask) -> Callable[[Redis | Pipeline], object]:
    """What forgets the wiki's version (:func:`wiki_changed`), for a caller whose own
    round trip to Redis carries it (the kick after an emit)."""
    return lambda client: client.delete(wiki_version_key(app))


#: Lua: each key ARGV[2], ARGV[4]… up to ``{last}`` set to the token after it unless it is
#: there (``SET … NX``, for ARGV[1] seconds), then its value added to ``got``; in a script
#: that runs whole: a MULTI of a ``SET`` a key cost redis-py's packing and parsing three
#: times the Python (500 keys, in process: 4.5 against 1.5 ms;
#: docs/benchmarks.md#the-live-badge). Keys named in ARGV as in :data:`_TELL`.
_MAKE_VERSIONS = """
local got = {{}}
for i = 2, {last}, 2 do
  redis.call('SET', ARGV[i], ARGV[i + 1], 'EX', ARGV[1], 'NX')
  got[#got + 1] = redis.call('GET', ARGV[i])
end
"""
#: The versions of all the keys in ARGV (:data:`_MAKE_VERSIONS`).
_VERSIONS = _MAKE_VERSIONS.format(last="#ARGV") + "return got\n"
#: A page's look (:func:`look_page`): its three versions (ARGV[2], ARGV[4], ARGV[6]) made
#: and read as :data:`_VERSIONS` does; then the account's trust (ARGV[8]) and the page
#: kept (ARGV[9]). A miss made the versions in a second round trip when the look was an
#: MGET.
_LOOK = _MAKE_VERSIONS.format(last="6") + """
got[4] = redis.call('GET', ARGV[8])
got[5] = redis.call('GET', ARGV[9])
return got
"""
_LOOK_SHA = hashlib.sha1(_LOOK.encode()).hexdigest()
#: Each key ARGV[2], ARGV[4]… set to the value after it, for ARGV[1] seconds.
_KEEP = """
for i = 2, #ARGV, 2 do
  redis.call('SET', ARGV[i], ARGV[i + 1], 'EX', ARGV[1])
end
"""


def summary_key(app: Flask, user_id: str, site_id: str | None) -> str:
    """The user's summary on ``site_id`` as last read, with the version it was read at."""
    return redis_key(app, "summary-body", user_id, site_id or "")


def _kept_at(value: object, version: str) -> bytes | None:
    """A kept body (a summary's, a page's) if it was kept at ``version``, else ``None``."""
    if not isinstance(value, bytes):
        return None
    kept, _, body = value.partition(b"|")
    return body if kept == version.encode() else None


def remembered_summary(app: Flask, user_id: str, site_id: str | None,
                       version: str) -> bytes | None:
    """The summary's JSON as the last read at summary ``version`` made it, or ``None``:
    a host page that draws the badge while nothing changed reads Redis, not the database.
    Every change forgets the version, so a body kept at an older one is never used."""
    return remembered_summaries(app, {(user_id, site_id): version}).get((user_id, site_id))


def remembered_summaries(app: Flask, wanted: Mapping[tuple[str, str | None], str]
                         ) -> dict[tuple[str, str | None], bytes]:
    """:func:`remembered_summary` of each ``(user id, site id)`` at its version, in one
    ``MGET``; those kept at another version, or not at all, are left out."""
    if not wanted:
        return {}
    keys = [summary_key(app, user_id, site_id) for user_id, site_id in wanted]
    try:
        values = quick(app, lambda client: client.mget(keys))
    except (RedisError, OSError) as error:
        log.warning("wikinotify: no remembered summary from Redis (%s)", error)
        return {}
    found = {}
    for (key, version), value in zip(wanted.items(), values, strict=True):
        body = _kept_at(value, version)
        if body is not None:
            found[key] = body
    return found


def remember_summary(app: Flask, user_id: str, site_id: str | None, version: str,
                     body: bytes) -> None:
    """Keep the summary's JSON ``body`` read at ``version`` (read before the body was, so
    a change in between leaves it kept under a version already forgotten, never used)."""
    remember_summaries(app, {(user_id, site_id): (version, body)})


def remember_summaries(app: Flask,
                       bodies: Mapping[tuple[str, str | None], tuple[str, bytes]]) -> None:
    """:func:`remember_summary` of each ``(user id, site id)``: its version and body, in
    one round trip."""
    if not bodies:
        return

    def keep(client: Redis) -> None:
        args: list[str | bytes | int] = [VERSION_TTL]
        for (user_id, site_id), (version, body) in bodies.items():
            args += (summary_key(app, user_id, site_id), version.encode() + b"|" + body)
        client.register_script(_KEEP)(args=args)

    try:
        quick(app, keep)
    except (RedisError, OSError) as error:
        log.warning("wikinotify: the summary not remembered in Redis (%s)", error)


def trusted_summary(app: Flask, user_id: str,
                    site_id: str | None) -> tuple[str, bytes | None] | None:
    """:func:`summary_version` for a poll answered without loading the account, with the
    summary's JSON kept at that version (``None`` if none is): one Redis ``MGET``, no
    write. ``None`` (so the caller loads the account and reads the database) when either
    version is missing, when the wiki has not loaded this account in the last
    :data:`ACCOUNT_RECHECK_SECONDS`, or when Redis cannot say."""
    keys = (*version_keys(app, user_id), account_key(app, user_id),
            summary_key(app, user_id, site_id))
    try:
        values = quick(app, lambda client: _poll_connections.command(client, "MGET", *keys))
    except (RedisError, OSError) as error:
        log.warning("wikinotify: no summary version from Redis (%s)", error)
        return None
    if None in values[:3]:
        return None
    version = f"{values[0].decode()}:{values[1].decode()}"
    return version, _kept_at(values[3], version)


def _release() -> str:
    try:
        return metadata.version("wikinotify")
    except metadata.PackageNotFoundError:  # run from a checkout that is not installed
        return "checkout"


#: Pages kept by one release are never given by another, whose code may present them
#: otherwise (a fix of what a page may show, deployed, takes effect at once).
_PAGES = f"inbox-page-{_release()}"


def page_key(app: Flask, user_id: str, site_id: str | None, slot: str) -> str:
    """A page of the user's inbox on ``site_id`` as last read, kept in ``slot`` (one of
    her few), with the version it was read at."""
    return redis_key(app, _PAGES, user_id, site_id or "", slot)


def look_page(app: Flask, user_id: str, site_id: str | None,
              slot: str) -> tuple[str | None, bytes | None]:
    """The version a page of the user's inbox is kept at (:mod:`.kept_pages`): her
    summary's version joined with everyone's and the wiki's (:func:`wiki_version_key`),
    each made where missing; and the page kept in ``slot`` at that version, if the
    account is trusted (the wiki loaded it in the last :data:`ACCOUNT_RECHECK_SECONDS`).
    One round trip (:data:`_LOOK`), a miss's too. ``(None, None)`` when Redis cannot
    say."""
    args = (str(VERSION_TTL), version_keys(app, user_id)[0], _token(),
            version_keys(app, "")[1], _token(), wiki_version_key(app), _token(),
            account_key(app, user_id), page_key(app, user_id, site_id, slot))

    def look(client: Redis) -> Any:
        try:
            return _poll_connections.command(client, "EVALSHA", _LOOK_SHA, "0", *args)
        except NoScriptError:  # a Redis restarted since: the script once in full
            return _poll_connections.command(client, "EVAL", _LOOK, "0", *args)

    try:
        values = quick(app, look)
    except (RedisError, OSError) as error:
        log.warning("wikinotify: no kept page from Redis (%s)", error)
        return None, None
    version = ":".join(value.decode() for value in values[:3])
    return version, None if values[3] is None else _kept_at(values[4], version)


def keep_page(app: Flask, user_id: str, site_id: str | None, slot: str, version: str,
              body: bytes) -> None:
    """Keep a page of the user's inbox read at ``version`` (read before the page and the
    account were), for :data:`ACCOUNT_RECHECK_SECONDS` at most, and trust the account the
    wiki has just loaded (:func:`trusted_summary`), in one round trip."""
    def keep(client: Redis) -> None:
        pipe = client.pipeline(transaction=False)
        pipe.set(page_key(app, user_id, site_id, slot), version.encode() + b"|" + body,
                 ex=ACCOUNT_RECHECK_SECONDS)
        trust(pipe, app, user_id)
        pipe.execute()

    try:
        quick(app, keep)
    except (RedisError, OSError) as error:
        log.warning("wikinotify: the inbox page not kept in Redis (%s)", error)


class _PollConnections:
    """Redis connections of this process for :func:`trusted_summary`, kept apart from
    redis-py's pool: the pool's checkout first polls each connection's socket for stray
    data, which for the summary's 304, one small command, costs more than the command
    (``bench/live.py``: about 200 µs of the 1.3 ms of CPU a 304 takes there). Instead a
    reused connection that fails is replaced once, as that poll would have replaced it
    (a Redis restart closes idle connections); a new one that fails raises, and
    :func:`~wikinotify.queue.quick` opens its breaker."""

    #: Idle connections kept beyond this many are closed.
    KEEP = 32

    def __init__(self) -> None:
        self._idle: dict[ConnectionPool, list[Connection]] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def command(self, client: Redis, *args: str) -> Any:
        pool = client.connection_pool
        conn = self._take(pool)
        if conn is not None:
            try:
                return self._run(pool, conn, args)
            except ConnectionError:
                pass  # closed while idle: once more, on a new connection
        return self._run(pool, pool.connection_class(**pool.connection_kwargs), args)

    def _run(self, pool: ConnectionPool, conn: Connection, args: tuple[str, ...]) -> Any:
        # redis-py leaves Connection's methods unannotated.
        try:
            conn.send_command(*args)  # type: ignore[no-untyped-call]
            reply = conn.read_response()
        except BaseException:
            conn.disconnect()  # type: ignore[no-untyped-call]
            raise
        self._give_back(pool, conn)
        return reply

    def _take(self, pool: ConnectionPool) -> Connection | None:
        with self._lock:
            if self._pid != os.getpid():
                # Forked: those sockets are the parent's. Forget them, unclosed.
                self._idle, self._pid = {}, os.getpid()
            idle = self._idle.get(pool)
            return idle.pop() if idle else None

    def _give_back(self, pool: ConnectionPool, conn: Connection) -> None:
        with self._lock:
            idle = self._idle.setdefault(pool, [])
            if len(idle) < self.KEEP and self._pid == os.getpid():
                idle.append(conn)
                return
        conn.disconnect()  # type: ignore[no-untyped-call]


_poll_connections = _PollConnections()


def forget_account(app: Flask, user_id: str) -> None:
    """The wiki refused this session's account (deactivated, deleted): no more 304s for
    it until it is loaded again."""
    try:
        quick(app, lambda client: client.delete(account_key(app, user_id)))
    except (RedisError, OSError) as error:
        log.warning("wikinotify: could not drop an account's trust (%s)", error)


L = TypeVar("L", bound="Listener")

#: Reads the ``summary`` events of several streams at once, by listener.
ReadMany = Callable[[Sequence["Listener"]], Mapping["Listener", str]]


class Listener:
    """One open stream's doorbell, and whose summary the stream sends: ``user_id``'s on
    ``site_id``. ``source`` (the app) says which streams one read may serve together;
    ``session_id`` which signed-in session opened it (:func:`end_session`); ``place``
    its place among its account's (:mod:`wikinotify.inbox.stream_places`)."""

    # One per open stream: no dict of attributes each.
    __slots__ = ("user_id", "site_id", "source", "session_id", "place", "_rung", "_wake",
                 "_changed", "_due", "_hub", "_ended", "_ousted", "__weakref__")

    def __init__(self, user_id: str, site_id: str | None = None, source: object = None,
                 session_id: str | None = None, place: str | None = None,
                 hub: Hub | None = None) -> None:
        self.user_id = user_id
        self.site_id = site_id
        self.source = source
        self.session_id = session_id
        self.place = place
        #: What its waiting thread waits on; ``None`` once handed to its hub
        #: (:meth:`Hub.hand_off`), which then attends to it instead.
        self._rung: threading.Event | None = threading.Event()
        self._wake: Wake | None = None
        #: Whether a ring (not the hub's look) woke it.
        self._changed = False
        #: The look of its hub its wait is due at (:meth:`Hub._look`), if it waits so.
        self._due: int | None = None
        #: The hub that wakes its long waits (none: each wait keeps a timer of its own).
        self._hub = hub
        self._ended = False
        self._ousted = False

    def ring(self, wake: Wake | None = None) -> None:
        self._wake = wake  # the latest wins: a summary is a state, not a log
        self._changed = True
        self._wake_up()

    def look(self, due: int) -> None:
        """Its hub's look ``due`` has come: wake it if its wait is still the one due then
        (not one that a ring ended before, which it left there), as a timeout would."""
        if self._due == due:
            self._due = None
            self._wake_up()

    def end(self) -> None:
        """The stream must end (its session signed out, its account or site refused):
        it stops at once if it waits, or after the event it is sending."""
        self._ended = True
        self._wake_up()

    def _wake_up(self) -> None:
        if self._rung is not None:
            self._rung.set()
        elif self._hub is not None:  # handed off: its hub attends to it
            self._hub._woken(self)

    def rung(self) -> bool:
        """Whether a ring (not a look) came since it was last asked: a handed-off
        stream's :meth:`wait`, asked by its hub's attendant."""
        changed, self._changed, self._wake = self._changed, False, None
        return changed

    def oust(self) -> None:
        """End it because a newer stream of its account took its place: its badge is
        told so, and polls rather than reconnecting at once."""
        self._ousted = True
        self.end()

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def ousted(self) -> bool:
        return self._ousted

    def wait(self, timeout: float) -> bool:
        """Whether it rang within ``timeout`` seconds. Cleared before the caller reads the
        summary, so a change committed during that read rings again. A wait longer than
        :data:`LOOK_SECONDS` has no timer when the listener joined a hub: the hub wakes it
        when due (up to two looks late)."""
        rung = cast(threading.Event, self._rung)  # not handed off: it has its own
        if timeout > LOOK_SECONDS and self._hub is not None:
            self._hub.wake_at(self, time.monotonic() + timeout)
            woke = rung.wait()
        else:
            woke = rung.wait(timeout)
        if woke:
            rung.clear()
        # Read after the clear: a ring that comes as the wait ends (a timeout, a look) is
        # seen now or wakes the next wait at once, never lost.
        changed, self._changed = self._changed, False
        return changed

    def read(self, read_many: ReadMany) -> str:
        """The stream's ``summary`` event after a ring: read with the others of its
        :class:`Wake`, or alone."""
        wake, self._wake = self._wake, None
        if wake is None:
            return read_many([self])[self]
        return wake.read(self, read_many)


class Wake:
    """The streams that one burst of messages woke in this process. The first of their
    threads to read reads for all of them at once (one Redis read, one database
    session), while the others wait for it: a fan-out to a hundred users with a stream
    here costs one read, not a hundred threads racing for the connection pool. The read
    begins after the messages arrived, so after the commits they announce."""

    def __init__(self, listeners: Sequence[Listener]) -> None:
        self.listeners = listeners
        self._lock = threading.Lock()
        self._events: dict[object, Mapping[Listener, str]] = {}

    def read(self, listener: Listener, read_many: ReadMany) -> str:
        with self._lock:
            if listener.source not in self._events:
                # If this read fails, it fails this stream; the others read alone.
                self._events[listener.source] = {}
                self._events[listener.source] = read_many(
                    [one for one in self.listeners if one.source is listener.source]
                )
        event = self._events[listener.source].get(listener)
        return event if event is not None else read_many([listener])[listener]


class Hub:
    """One web process's subscription to every user's channel of one wikinotify."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix
        #: Set while the subscription is up; a stream ends when it drops.
        self.connected = threading.Event()
        #: Per user, the open streams' listeners in the order they were opened.
        self._listeners: dict[str, dict[Listener, None]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._idle_since = time.monotonic()
        self._renew_at = time.monotonic()
        self._look_at = time.monotonic()
        #: Per look (``time.monotonic()`` over :data:`LOOK_SECONDS`, rounded up), the
        #: listeners whose wait falls due then (one that ended meanwhile stays until
        #: then: at most a keep-alive's wait); and the last look made.
        self._waits: dict[int, list[Listener]] = {}
        self._looked = math.floor(time.monotonic() / LOOK_SECONDS)
        #: The handed-off streams a ring, a look or an end woke, not yet attended to;
        #: per source, who attends to them (:meth:`hand_off`). A lock of their own: a
        #: stream ousted under ``_lock`` is woken there.
        self._woke: dict[Listener, None] = {}
        self._woke_lock = threading.Lock()
        self._woke_any = threading.Event()
        self._attendants: dict[object, Callable[[Sequence[Listener]], None]] = {}
        self._attendant: threading.Thread | None = None

    def join(self, user_id: str, site_id: str | None = None, source: object = None, *,
             session_id: str | None = None, place: str | None = None,
             limit: int | None = None, per_account: int | None = None,
             kind: type[L] = Listener) -> L | None:  # type: ignore[assignment]
        """A new stream's listener (of ``kind``: a stream's own object may be one, so a
        stream is one object); ``None`` when this hub already holds ``limit``. When
        the account already has ``per_account`` streams going on here, its oldest end,
        whatever Redis holds of their places (one whose renewal stalled still holds a
        thread here)."""
        listener = kind(user_id, site_id, source, session_id, place, self)
        with self._lock:
            if limit is not None and self._count() >= limit:
                return None
            mine = self._listeners.setdefault(user_id, {})
            going_on = [one for one in mine if not one.ended]
            if per_account is not None:
                for one in going_on[:max(0, len(going_on) - per_account + 1)]:
                    one.oust()
            mine[listener] = None
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="wikinotify-live", daemon=True
                )
                self._thread.start()
        return listener

    def hand_off(self, listener: Listener,
                 attend: Callable[[Sequence[Listener]], None]) -> None:
        """From now on no thread waits for ``listener``: the hub hands its rings, its
        due looks and its end to ``attend``, with those of the other handed-off streams
        of its source that woke meanwhile, on a thread of the hub's, one call at a time
        (so a stream's events are written in the order they were read). A ring or an
        end that came before is attended to at once."""
        with self._woke_lock:
            self._attendants[listener.source] = attend
            if self._attendant is None:
                self._attendant = threading.Thread(target=self._attend,
                                                   name="wikinotify-live-streams",
                                                   daemon=True)
                self._attendant.start()
                # No thread of the server's holds them: as the process stops (gunicorn
                # restarting its workers) they end, and their places are given back.
                atexit.register(self.end_all)
        listener._rung = None
        if listener._changed or listener._ended:
            self._woken(listener)

    def _woken(self, listener: Listener) -> None:
        with self._woke_lock:
            self._woke[listener] = None
        self._woke_any.set()

    def _attend(self) -> None:
        while True:
            self._woke_any.wait()
            self._attend_woken()

    def _attend_woken(self) -> None:
        with self._woke_lock:
            self._woke_any.clear()
            woke, self._woke = list(self._woke), {}
        groups: dict[object, list[Listener]] = {}
        for listener in woke:
            groups.setdefault(listener.source, []).append(listener)
        for source, group in groups.items():
            try:
                self._attendants[source](group)
            except Exception:  # one failed attendance never stops the others'
                log.exception("wikinotify: live streams not attended to")

    def leave(self, user_id: str, listener: Listener) -> None:
        with self._lock:
            mine = self._listeners.get(user_id, {})
            mine.pop(listener, None)
            if not mine:
                self._listeners.pop(user_id, None)
            if not self._listeners:
                self._idle_since = time.monotonic()

    def streams(self) -> int:
        with self._lock:
            return self._count()

    def end_all(self) -> None:
        """End every stream of this process (a server shutting down): each stops at
        once, or after the event it is sending, and its browser reconnects elsewhere."""
        with self._lock:
            listeners = [listener for group in self._listeners.values() for listener in group]
        for listener in listeners:
            listener.end()
        self._attend_woken()  # the handed-off ones, now: the process may be exiting

    def _count(self) -> int:
        return sum(len(group) for group in self._listeners.values())

    def _end(self, user_id: str, data: bytes) -> None:
        """End the user's streams an :data:`END` or :data:`END_PLACE` message names."""
        with self._lock:
            mine = list(self._listeners.get(user_id, ()))
        if data.startswith(END_PLACE):
            place = data[len(END_PLACE):].decode()
            for listener in mine:
                if listener.place == place:
                    listener.oust()
            return
        session_id = data[len(END):].decode()
        for listener in mine:
            if listener.session_id is None or listener.session_id == session_id:
                listener.end()

    def _renew(self) -> None:
        """Every :data:`~wikinotify.inbox.stream_places.RENEW_SECONDS`, renew the places of the
        streams going on here, from this thread (a stream's own may block in a write):
        one round trip per app, in the order the streams were opened, so the oldest
        keeps the lowest score."""
        if time.monotonic() < self._renew_at:
            return
        self._renew_at = time.monotonic() + stream_places.RENEW_SECONDS
        held: dict[object, list[tuple[str, str]]] = {}
        with self._lock:
            for user_id, mine in self._listeners.items():
                for one in mine:
                    if one.place is not None and not one.ended:
                        held.setdefault(one.source, []).append((user_id, one.place))
        for source, places in held.items():
            if isinstance(source, Flask):
                try:
                    stream_places.renew(source, places)
                except (RedisError, OSError) as error:  # they lapse after their lease
                    log.warning("wikinotify: could not renew streams' places (%s)", error)

    def wake_at(self, listener: Listener, when: float) -> None:
        """Have the first look at or after ``when`` (``time.monotonic()``) wake
        ``listener``, unless it waits again before. A wait that a ring ends early is left
        where it is (the listener's next wait, due at the same keep-alive, most often
        falls due at the same look), and the look skips it."""
        with self._lock:
            due = max(math.ceil(when / LOOK_SECONDS), self._looked + 1)
            if listener._due != due:
                listener._due = due
                self._waits.setdefault(due, []).append(listener)

    def _look(self) -> None:
        """Every :data:`LOOK_SECONDS`, wake the streams whose wait is due: one clock for
        all of them (this thread's reads wait at most as long for a message). It takes
        only the waits of the looks since the last, a few dozen at 5,000 streams, never
        every stream: the streams wait while it runs, and so does any request."""
        now = time.monotonic()
        if now < self._look_at:
            return
        self._look_at = now + LOOK_SECONDS
        look = math.floor(now / LOOK_SECONDS)
        with self._lock:
            looks: Sequence[int] = range(self._looked + 1, look + 1)
            if len(looks) > len(self._waits):  # after a long pause: the few there are
                looks = [due for due in self._waits if due <= look]
            woken = [(due, listener) for due in looks for listener in self._waits.pop(due, ())]
            self._looked = look
        for due, listener in woken:
            listener.look(due)

    def _ring(self, user_ids: Iterable[str] | None, wake: bool = True) -> None:
        """Ring the streams of ``user_ids`` (``None``: every stream), as one :class:`Wake`
        unless they are only being told to end."""
        with self._lock:
            if user_ids is None:
                chosen = [lst for group in self._listeners.values() for lst in group]
            else:
                chosen = [lst for user_id in user_ids for lst in self._listeners.get(user_id, ())]
        # A Wake for the streams whose threads read it; the hub reads for those handed off.
        waiting = [lst for lst in chosen if lst._rung is not None]
        together = Wake(waiting) if wake and waiting else None
        for listener in chosen:
            listener.ring(together)

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
            self._ring(None, wake=False)  # every stream ends; its badge polls meanwhile
            time.sleep(RECONNECT_SECONDS)
            if self._stopping():
                return

    def _serve(self) -> bool:
        """Read the subscription until this hub has been idle a while (``True``)."""
        client = Redis.from_url(self.url, socket_connect_timeout=2, socket_timeout=10,
                                health_check_interval=5)
        # An older redis-py leaves pubsub() unannotated; redis-py 8 types it.
        pubsub = client.pubsub()  # type: ignore[no-untyped-call,unused-ignore]
        try:
            pubsub.psubscribe(f"{self.prefix}:*")
            pubsub.subscribe(self.prefix)  # confirmed second: then both are live
            while not self._stopping():
                self._deliver(pubsub)
                self._renew()
                self._look()
            return True
        finally:
            pubsub.close()
            client.close()

    def _deliver(self, pubsub: PubSub) -> None:
        """Wait for a message, take every one that has arrived with it (a fan-out
        publishes a batch in one round trip), and wake their streams as one."""
        user_ids: set[str] = set()
        everyone = False
        message = pubsub.get_message(timeout=LOOK_SECONDS)
        taken = 0
        while message is not None:
            if message["type"] == "subscribe":
                # Both subscriptions are live. No stream was open without them (a stream
                # waits for this before its first read, and ends when they drop), so no
                # change can have been missed.
                self.connected.set()
            elif message["type"] == "pmessage":
                user_id = message["channel"].decode()[len(self.prefix) + 1:]
                if message["data"].startswith((END, END_PLACE)):
                    self._end(user_id, message["data"])
                else:  # an earlier release's writer (a message per user), mid-upgrade
                    user_ids.add(user_id)
            elif message["type"] == "message":
                named = _named(message["data"])
                if named is None:
                    everyone = True
                else:
                    user_ids.update(named)
            taken += 1
            if taken == WAKE_MESSAGES:
                break
            message = _arrived(pubsub)
        if everyone:
            self._ring(None)
        elif user_ids:
            self._ring(user_ids)


def _named(data: bytes) -> list[str] | None:
    """The users a message on the channel of everyone names (:func:`changed`); ``None``
    for everyone: an empty message (:func:`changed_everyone`), or one that is not a list
    of ids (a hand-made PUBLISH, another release's format), which wakes every stream to
    read its summary again rather than end this thread."""
    if not data:
        return None
    try:
        named = json.loads(data)
    except ValueError:
        return None
    if isinstance(named, list) and all(isinstance(user_id, str) for user_id in named):
        return named
    return None


def _arrived(pubsub: PubSub) -> dict[str, Any] | None:
    """The next message if some of it has arrived, else ``None``, without waiting for one.
    Not ``get_message(timeout=0)``: redis-py (8.1 here; redis/redis-py#3982) reads the
    rest of a message with the same zero timeout, and a message cut between two of the
    socket's reads (a burst of thousands, as a fan-out batch publishes) then raises a
    timeout, which ended every stream of the process. Once its first bytes are here,
    its rest gets :data:`POLL_SECONDS`."""
    conn = pubsub.connection
    if conn is None or not conn.can_read(timeout=0):
        return None
    return cast("dict[str, Any] | None", pubsub.get_message(timeout=POLL_SECONDS))


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
