"""``GET /stream``: the caller's summary as Server-Sent Events (docs/rules.md#live-updates).

One ``event: summary`` on connect, then one within a second of every commit that changes
the summary (:func:`wikinotify.inbox.live.changed`), a comment every
:data:`~.stream_life.KEEPALIVE_SECONDS` so proxies keep the connection, and a clean end after
``WIKINOTIFY_STREAM_MAX_AGE`` seconds, after which the browser reconnects by itself.

Under gunicorn's gevent worker over plain HTTP/1.x an open stream is handed off
(:mod:`.stream_handoff`): its process's hub writes its events, and no greenlet waits for
it. Elsewhere each open stream holds a thread (or a greenlet) of the web server. Either
way it holds no database connection while it waits: the session is given back after each
read; and it is one object (:class:`Stream`) with one lifecycle. The streams one burst
of changes wakes read their summaries together (:class:`wikinotify.inbox.live.Wake`, or
the hub's attendance, :func:`_attend`). Serve it with a server made for long requests
(README, "Serving it").

One account holds at most ``WIKINOTIFY_STREAM_PER_ACCOUNT`` streams in all processes
(the next ends its oldest, whose badge then polls) and one process at most
``WIKINOTIFY_STREAM_PER_PROCESS`` (the next is a 503, and its badge polls): the threads
left serve everyone else. A stream ends early when its session is signed out (at once),
or when its account is no longer active or its site is switched off (at its next wake, or
its next check, every :data:`~.stream_life.KEEPALIVE_SECONDS`). A ``HEAD`` opens nothing.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar, cast

from flask import Flask, Response, current_app, request
from flask.typing import ResponseReturnValue
from redis.exceptions import RedisError

from .. import inbox, login
from ..config import config
from ..inbox import live, stream_places
from ..instance_settings import site_enabled
from ..state import state
from . import stream_handoff
from .core import bp, current_site_id, json_error, session, summary_body
from .stream_life import Keep, Stream, allowed, attend, events, give_back

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIEnvironment

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

#: How long a new stream waits for this process's Redis subscription before it answers
#: 503 (and the badge polls instead).
CONNECT_WAIT_SECONDS = 2.0
#: A refused stream's ``Retry-After`` (503): the badge polls the summary meanwhile,
#: every 60 s, so asking again sooner would gain nothing.
RETRY_AFTER_SECONDS = 60

def summary_events(listeners: Sequence[live.Listener]) -> dict[live.Listener, str]:
    """Each stream's ``summary`` event: the versions in one Redis read, and the summaries
    kept at those versions in another (those of streams just opened, whose readers'
    summaries have not changed since they were last read: a reconnecting crowd reads
    Redis, not the database). The others: each site's switch once, the accounts in one
    call and the summaries in one statement, in a database session that is then given
    back (no connection is held while the streams wait), and kept at their versions. A
    stream whose account is no longer active gets nothing and ends; one whose site was
    switched off gets its last summary (``"enabled": false``) and ends.

    A kept summary is used without asking the wiki about the account again: the stream's
    opening asked, its check asks every :data:`~.stream_life.KEEPALIVE_SECONDS`, and every change
    (which forgets the version) reads afresh, the account included.

    The summary is a state, not a log: a reconnecting browser's ``Last-Event-ID`` (this
    event's ``id``, the summary version) has nothing to replay, so every connection gets
    the current state at once, whatever id it sends."""
    wanted = list(dict.fromkeys((listener.user_id, listener.site_id) for listener in listeners))
    users = list(dict.fromkeys(user_id for user_id, _ in wanted))
    versions = live.summary_versions(current_app, users) or {}  # before the bodies
    bodies = {key: body.decode() for key, body in live.remembered_summaries(
        current_app, {key: versions[key[0]] for key in wanted if key[0] in versions}).items()}
    # A kept summary says its site's switch too.
    enabled = {key[1]: bool(json.loads(body)["enabled"]) for key, body in bodies.items()}
    unread = [key for key in wanted if key not in bodies]
    inactive: set[str] = set()
    if unread:
        try:
            to_read = set(unread)
            enabled |= _switches([listener for listener in listeners
                                  if (listener.user_id, listener.site_id) in to_read])
            inactive = _inactive(list(dict.fromkeys(user_id for user_id, _ in unread)))
            counts = inbox.summaries(session(), [key for key in unread
                                                 if enabled[key[1]] and key[0] not in inactive])
            read = _bodies([key for key in unread if key[0] not in inactive], enabled, counts)
        finally:
            state().db.session.remove()  # the scoped proxy's: ends this context's Session
        live.remember_summaries(current_app, {key: (versions[key[0]], body.encode())
                                              for key, body in read.items()
                                              if key[0] in versions})
        bodies.update(read)
    events = {}
    for listener in listeners:
        if listener.user_id in inactive or not enabled[listener.site_id]:
            listener.end()
        key = (listener.user_id, listener.site_id)
        events[listener] = "" if listener.user_id in inactive else (
            f"id: {versions.get(listener.user_id, '')}\nevent: summary\n"
            f"data: {bodies[key]}\n\n")
    return events


def _bodies(keys: Sequence[tuple[str, str | None]], enabled: Mapping[str | None, bool],
            counts: Mapping[tuple[str, str | None], inbox.Summary]
            ) -> dict[tuple[str, str | None], str]:
    """Each ``(user id, site id)``'s summary JSON from its counts (read only where its
    site is on). A body is its counts and its site's switch alone, so each distinct one
    is made once: a fan-out batch's readers share their newest entry's time, and many of
    them their counts."""
    made: dict[tuple[bool, inbox.Summary | None], str] = {}
    bodies = {}
    for key in keys:
        said = (enabled[key[1]], counts[key] if enabled[key[1]] else None)
        if said not in made:
            made[said] = current_app.json.dumps(summary_body(*key, enabled=said[0],
                                                             counts=said[1]))
        bodies[key] = made[said]
    return bodies


def _switches(listeners: Sequence[live.Listener]) -> dict[str | None, bool]:
    """Each of their sites' switch, read once."""
    return {site_id: site_enabled(session(), site_id)
            for site_id in dict.fromkeys(listener.site_id for listener in listeners)}


def _inactive(user_ids: Sequence[str]) -> set[str]:
    """The accounts among ``user_ids`` the wiki no longer has as active (one call, which
    reads no other fact of theirs)."""
    active = state().host.active_users(user_ids)
    return {user_id for user_id in user_ids if user_id not in active}


def still_allowed(listener: live.Listener) -> bool:
    """Whether the stream's account is still active and its site still on (ended if
    not), read with the checks of this process's other streams due at about the same time
    (:class:`_Checks`), in a database session that is then given back."""
    return _checks.allowed(listener)


def _refused(listeners: Sequence[live.Listener]) -> set[live.Listener]:
    """Those of ``listeners`` whose account is no longer active or whose site is off: the
    accounts in one call, each site's switch once."""
    try:
        inactive = _inactive(list(dict.fromkeys(one.user_id for one in listeners)))
        switches = _switches(listeners)
    finally:
        state().db.session.remove()
    return {one for one in listeners if one.user_id in inactive or not switches[one.site_id]}


#: A stream's check waits this long for the checks of other streams of its process that
#: fall due meanwhile, and they are read together: with thousands of streams open, each
#: checked every :data:`~.stream_life.KEEPALIVE_SECONDS`, one read each would be hundreds
#: of reads a second doing nothing. Short all the same: the streams of one read go on
#: together (a keep-alive each), and a request arriving then waits for all of them. At
#: 5,000 streams a process a quarter of a second gathered some 50 a read, a twentieth
#: some 10 (20 reads a second a process); the inbox page's p99 beside 10,000 streams was
#: 1.77 and 1.99 times its p99 with none in two runs before, 1.41, 1.51 and 1.89 in three
#: after: within the figure's spread
#: (docs/benchmarks.md#the-inbox-page-beside-the-streams-session-14-the-lead).
CHECK_GATHER_SECONDS = 0.05


class _Check:
    def __init__(self) -> None:
        self.listeners: list[live.Listener] = []
        self.refused: set[live.Listener] | None = None
        self.done = threading.Event()


class _Checks:
    """The streams' checks of this process, gathered: the first stream whose check falls
    due waits :data:`CHECK_GATHER_SECONDS`, then reads for every stream of the same app
    that joined it meanwhile, while they wait for it. A read that fails fails the first
    stream; the others then read alone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gathering: dict[object, _Check] = {}

    def allowed(self, listener: live.Listener) -> bool:
        with self._lock:
            check = self._gathering.get(listener.source)
            first = check is None
            if check is None:
                check = self._gathering[listener.source] = _Check()
            check.listeners.append(listener)
        if first:
            try:
                time.sleep(CHECK_GATHER_SECONDS)
            finally:
                with self._lock:
                    del self._gathering[listener.source]
            try:
                check.refused = _refused(check.listeners)
            finally:
                check.done.set()
        else:
            check.done.wait()
        return allowed(listener, check.refused if check.refused is not None
                        else _refused([listener]))


_checks = _Checks()


def _aside(call: Callable[[], T]) -> T:
    """``call()``, run on a greenlet of its own (in a copy of this one's context: the
    request's, the app's) when the process serves with gevent, and waited for; called
    here otherwise.

    Why: CPython gives each greenlet a stack of its own for its Python frames (16 KB
    chunks), and a page of it that a deep call once touched stays resident for as long as
    the greenlet lives. Under gevent every connection is a new greenlet, and a stream's
    lives as long as the stream: its opening and its reads (the wiki loading the account,
    SQLAlchemy, psycopg: 6 to 8 KB of frames) left every waiting stream two pages more
    than it waits with (``bench/stream_memory.py``). A greenlet that ends gives its stack
    back. A thread's stack is reused by its next request: nothing to gain there."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is None or not monkey.is_module_patched("threading"):
        return call()
    import gevent  # type: ignore[import-untyped]  # only when the server loaded it
    from gevent.event import AsyncResult  # type: ignore[import-untyped]

    done = AsyncResult()

    def run() -> None:
        # The error goes back to the caller, not to gevent's hub, which would print it.
        try:
            done.set(call())
        except BaseException as error:  # noqa: BLE001 - raised again in the caller
            done.set_exception(error)

    # A raw greenlet: no gevent.Greenlet bookkeeping (its links, where it was spawned).
    gevent.spawn_raw(contextvars.copy_context().run, run)
    return cast(T, done.get())


def _in_app(app: Flask, call: Callable[[T], R]) -> Callable[[T], R]:
    """``call`` in an app context of its own: a stream's reads after its view returned.
    The stream holds no request context while it waits (its session, its account, its
    request's objects: kilobytes a stream), only what it needs: its listener. The reads
    run :func:`_aside`. One per app and ``call``, shared by the app's streams."""
    kept = app.extensions.setdefault("wikinotify.stream-reads", {})  # they go with the app
    if call not in kept:
        def run(argument: T) -> R:
            def read() -> R:
                with app.app_context():
                    return call(argument)

            return _aside(read)

        kept[call] = run
    return cast("Callable[[T], R]", kept[call])


class _Body:
    """A stream's body as the server sees it: iterating it is iterating :func:`events`
    itself (no iterator of werkzeug's in between, whose frame every waiting stream
    would keep), and closing it closes that and gives the stream's place back, even
    when the server closes it before its first read (a generator that never started
    runs no ``finally``). Under gunicorn's gevent worker the stream is handed off
    instead (:meth:`hand_off`), and no one iterates it."""

    __slots__ = ("_events", "_stream")

    def __init__(self, stream: Stream) -> None:
        self._stream = stream
        self._events = events(stream, *_reads(stream.app))

    def __iter__(self) -> Iterator[bytes]:
        return self._events

    def close(self) -> None:
        try:
            self._events.close()  # type: ignore[attr-defined]
        finally:
            self._stream.close()

    def hand_off(self, fd: int, head: bytes,
                 access: stream_handoff.AccessLine | None) -> object:
        """Write the head and the opening on ``fd`` and give the stream to its hub, which
        writes its ``access`` line at its end; gunicorn's ``ALREADY_HANDLED``."""
        stream, self._events = self._stream, iter(())  # never started: nothing to run
        stream.fd = fd
        read_many, _ = _reads(stream.app)
        try:
            text = head + stream.opening(read_many)
        except BaseException:  # nothing written: the server answers the error, and logs it
            stream.close()
            raise
        # Its line in the access log counts the body's bytes, as gunicorn's does.
        stream.access, stream.sent = access, -len(head)
        if stream.send(text):
            stream.hub.hand_off(stream, _attendance(stream.app))
            stream.schedule()
        return stream_handoff.already_handled()


def _reads(app: Flask) -> tuple[live.ReadMany, Keep]:
    """A stream's reads, each in an app context of its own (:func:`_in_app`)."""
    return _in_app(app, summary_events), _in_app(app, still_allowed)


def _attendance(app: Flask) -> Callable[[Sequence[live.Listener]], None]:
    return functools.partial(attend, _in_app(app, summary_events), _in_app(app, _refused))


def _unavailable() -> ResponseReturnValue:
    response, _ = json_error(503, "unavailable", "Live updates are unavailable; poll the "
                                                 "summary instead.")
    response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response, 503


def _open(app: Flask, me: str, site_id: str | None) -> Stream | ResponseReturnValue:
    """Take a place among the account's streams (ending its oldest past the bound, in
    every process), then join this process's hub; or the answer that refuses it."""
    place = stream_places.new_place()
    per_account = config("STREAM_PER_ACCOUNT")
    try:
        stream_places.take(app, me, place, limit=per_account,
                           channel=live.user_channel(app, me), message=live.END_PLACE)
    except (RedisError, OSError) as error:
        log.warning("wikinotify: no stream places from Redis (%s)", error)
        return _unavailable()
    hub = live.hub(app)
    listener = hub.join(me, site_id, app, session_id=login.stream_session_id(), place=place,
                        limit=config("STREAM_PER_PROCESS"), per_account=per_account,
                        kind=Stream)
    if listener is not None and hub.connected.wait(CONNECT_WAIT_SECONDS):
        return listener
    if listener is not None:
        hub.leave(me, listener)
    give_back(app, me, place)
    return _unavailable()


@bp.get("/stream")
def stream() -> ResponseReturnValue:
    # The account loaded, the reads and the place taken: deep calls, made aside.
    return _aside(_stream)


def _stream() -> ResponseReturnValue:
    me = login.caller_id()
    if me is None:
        return json_error(401, "unauthorized", "Sign in to follow your notifications.")
    site_id = current_site_id()
    try:
        switched_off, inactive = not site_enabled(session(), site_id), bool(_inactive([me]))
    finally:
        # As every read of a stream's: the session goes back before the stream starts, so
        # no connection waits with it (nor, if the process stops first, is left open).
        state().db.session.remove()
    if switched_off:
        # No badge where notifications are off (docs/rules.md#the-site-switch): as the inbox, a
        # route that is not.
        return json_error(404, "not_found", "Not found.")
    if inactive:
        return json_error(401, "unauthorized", "Sign in to follow your notifications.")
    if request.method == "HEAD":
        # Flask answers HEAD on a GET route, and a HEAD's body never runs: only its
        # headers, with nothing opened that only the body would give back.
        return _event_stream(())
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    opened = _open(app, me, site_id)
    if not isinstance(opened, Stream):
        return opened
    # Run by the server after this request's context is gone (the reads push an app
    # context of their own, _in_app), or handed off. The body's end may never run (a
    # closed response whose body was not read): its close gives the place back then.
    return _event_stream(_Body(opened))


@bp.before_app_request
def _session_id() -> None:
    # Every request but a stream's: two tabs opening their first streams at once would
    # each give one (login.stream_session_id).
    if request.endpoint != f"{bp.name}.{stream.__name__}":
        login.give_session_id()


def _event_stream(body: Iterable[bytes]) -> Response:
    # Passed through: the server iterates and closes the body itself (:class:`_Body`),
    # bytes already, with no iterator of werkzeug's around it (a HEAD still gets none).
    response = _handing_off(current_app.response_class)(
        body, mimetype="text/event-stream", direct_passthrough=True)
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


_handing_off_kinds: dict[type[Response], type[Response]] = {}


def _handing_off(kind: type[Response]) -> type[Response]:
    """The app's response class, whose stream hands itself off when the server allows
    (:mod:`.stream_handoff`): as the server is called, after every hook of the app and
    the wiki has made the headers what they will be."""
    if kind not in _handing_off_kinds:
        class EventStream(kind):  # type: ignore[valid-type,misc]
            def __call__(self, environ: WSGIEnvironment,
                         start_response: StartResponse) -> Iterable[bytes]:
                body = self.response
                fd = stream_handoff.connection(environ) if isinstance(
                    body, _Body) and self.status_code == 200 and config(
                    "STREAM_HANDOFF") else None
                if fd is None:
                    return cast("Iterable[bytes]", super().__call__(environ, start_response))
                head = stream_handoff.head(self.status, self.get_wsgi_headers(environ).items())
                return cast("Iterable[bytes]", body.hand_off(
                    fd, head, stream_handoff.access_line(environ, self.status)))

        _handing_off_kinds[kind] = EventStream
    return _handing_off_kinds[kind]
