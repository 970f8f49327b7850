"""An open stream's life (docs/journey.md#the-live-badge): one object a stream
(:class:`Stream`) and one lifecycle, whoever drives it: a server iterating
:func:`events`, where a thread (or a greenlet) waits for each stream, or its process's
hub (:func:`attend`), to which a stream is handed off under gunicorn's gevent worker
(:mod:`.stream_handoff`). Its reads are the view's (:mod:`.stream_routes`), given to
it."""

from __future__ import annotations

import functools
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import cast

from flask import Flask
from redis.exceptions import RedisError

from ..config import config
from ..inbox import live, stream_places
from . import stream_handoff

log = logging.getLogger(__name__)

#: A comment line this often keeps proxies (and the server) aware of the connection.
KEEPALIVE_SECONDS = 25
#: A check falls due at one moment (:func:`next_check`) of each span of these seconds, the
#: first at or after its :data:`KEEPALIVE_SECONDS`: the checks of a process's streams due within
#: the same second fall due at once and one read answers them all (:func:`attend`; a
#: thread's stream gathers with the others, ``stream_routes.CHECK_GATHER_SECONDS``). A
#: read costs about the same for ten accounts as for two hundred, and each holds up the
#: requests its process serves meanwhile: at 5,000 streams a process, checks filed each
#: tenth of a second made ten reads a second, and the inbox page's p99 beside 10,000 open
#: streams twice its p99 with none (docs/benchmarks.md, session 18). A check comes up to a
#: second later than :data:`KEEPALIVE_SECONDS`.
CHECK_GRID_SECONDS = 1.0

#: How long the browser waits before it reconnects (``retry:``), in milliseconds.
RETRY_MS = 3000

#: The last event of a stream whose place went to a newer stream of its account: its
#: badge polls instead of reconnecting (which would end another of the account's).
OUSTED_EVENT = "event: end\ndata: {}\n\n"

#: Whether an open stream goes on (asked every :data:`KEEPALIVE_SECONDS`).
Keep = Callable[[live.Listener], bool]

#: Reads the refused among streams due for their check, by listener.
Refused = Callable[[Sequence[live.Listener]], set[live.Listener]]


def next_check(now: float) -> float:
    """When a check made at ``now`` falls due next (:data:`CHECK_GRID_SECONDS`), at this
    process's own moment in the second: the processes of a machine share its monotonic
    clock, and their reads would otherwise all reach the database at once."""
    offset = (os.getpid() * _SPREAD) % 1.0 * CHECK_GRID_SECONDS
    due = math.ceil((now + KEEPALIVE_SECONDS - offset) / CHECK_GRID_SECONDS)
    return due * CHECK_GRID_SECONDS + offset


#: The golden ratio's fraction: process ids one apart get moments far apart.
_SPREAD = 0.6180339887


def allowed(listener: live.Listener, refused: set[live.Listener]) -> bool:
    """Whether a checked stream goes on; one that ``refused`` holds ends."""
    if listener in refused:
        listener.end()
        return False
    return True


def give_back(app: Flask, user_id: str, place: str) -> None:
    try:
        stream_places.give_back(app, user_id, place)
    except (RedisError, OSError) as error:  # it lapses after its lease
        log.warning("wikinotify: could not give a stream's place back (%s)", error)


class Stream(live.Listener):
    """An open stream: its listener on its process's hub (the account, the site, the
    session, the place among the account's, the app as its source), when its next check
    falls due and when it ends, and, handed off, its connection. One object a stream,
    and one lifecycle (:meth:`answer`) whoever drives it: the server iterating
    :func:`events`, or its hub's attendant (:func:`attend`) for a stream handed off."""

    # One per open stream, for as long as it is open: no dict of attributes. Every
    # object a waiting stream holds is walked by each collection of the oldest
    # generation, a pause of the whole process (docs/benchmarks.md#the-live-badge).
    __slots__ = ("due", "ends", "fd", "access", "sent", "_closed")

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]  # as the hub joins it
        self.due = self.ends = 0.0
        #: The connection, once handed off (:mod:`.stream_handoff`); its line in the
        #: server's access log, written at its end, and the bytes sent on it.
        self.fd: int | None = None
        self.access: stream_handoff.AccessLine | None = None
        self.sent = 0
        self._closed = False

    @property
    def app(self) -> Flask:
        return cast(Flask, self.source)

    def opening(self, read_many: live.ReadMany) -> bytes:
        """The stream's first text: ``retry:`` and the current summary."""
        now = time.monotonic()
        self.due, self.ends = next_check(now), now + config("STREAM_MAX_AGE", self.app)
        return (f"retry: {RETRY_MS}\n\n" + read_many([self])[self]).encode()

    def going_on(self) -> bool:
        """Not ended (signed out, ousted, refused), its hub's subscription up, and younger
        than ``WIKINOTIFY_STREAM_MAX_AGE`` (then a clean end: the browser reconnects)."""
        return (not self.ended and self.hub.connected.is_set()
                and time.monotonic() < self.ends)

    @property
    def hub(self) -> live.Hub:
        return cast(live.Hub, self._hub)

    def until(self) -> float:
        """Seconds until its check or its end."""
        return min(self.due, self.ends) - time.monotonic()

    def schedule(self) -> None:
        """A handed-off stream's next wake without a ring: its check or its end."""
        self.hub.wake_at(self, min(self.due, self.ends))

    def reads(self, rung: bool) -> bool:
        """Whether this wake reads its summary: a ring, of a stream that goes on."""
        return rung and self.going_on()

    def checks(self) -> bool:
        """Whether its check (every :data:`KEEPALIVE_SECONDS`) is due."""
        return not self.ended and time.monotonic() >= self.due

    def answer(self, event: str | None, allowed: Callable[[], bool]) -> bytes:
        """What a wake sends: the ring's ``event`` (read when :meth:`reads`; empty for an
        account no longer active), then, when the check is due and ``allowed`` says it
        goes on, a keep-alive comment if nothing else went. After it, the stream goes on
        while :meth:`going_on`; then :meth:`last`."""
        text = event or ""
        if self.checks() and allowed():
            self.due = next_check(time.monotonic())
            if event is None:
                text += ": keep-alive\n\n"
        return text.encode()

    def last(self) -> bytes:
        """An ousted stream's badge polls rather than reconnecting (:data:`OUSTED_EVENT`)."""
        return OUSTED_EVENT.encode() if self.ousted else b""

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, text: bytes) -> bool:
        """Write to a handed-off stream's connection; ``False`` (and it ends) when the
        connection will not take it."""
        if self._closed:  # its descriptor's number may be another connection's by now
            return False
        if not text:
            return True
        if stream_handoff.write(cast(int, self.fd), text):
            self.sent += len(text)
            return True
        self.close()
        return False

    def close(self) -> None:
        """Close a handed-off connection, leave the hub and give the place back, once,
        whichever of the body's end and the response's close comes first (a response
        whose body never runs only closes). Both come on the thread that serves the
        stream (a handed-off one's: its hub's attendant); were they to race, the place
        would be given back twice, which changes nothing (leaving the hub and giving a
        place back are idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self.fd is not None:
            stream_handoff.close(self.fd)
            if self.access is not None:
                stream_handoff.log_access(self.access, self.sent)
        self.hub.leave(self.user_id, self)
        give_back(self.app, self.user_id, cast(str, self.place))


def events(stream: Stream, read_many: live.ReadMany, keep: Keep) -> Iterator[bytes]:
    """The stream's text as a server iterates it: its opening, then its answer to each
    wake (:meth:`Stream.answer`: a ring, its check or keep-alive every
    :data:`KEEPALIVE_SECONDS`) while it goes on, then its last; and its place given back.

    One generator, no other between it and the server: a waiting stream is a greenlet
    (or a thread) suspended in :meth:`~wikinotify.inbox.live.Listener.wait`, and under
    gevent the stack it used is copied aside while it waits, so each level of generators
    it waits under costs every open stream its frames (bench/live.py's memory per
    stream)."""
    try:
        yield stream.opening(read_many)
        while stream.going_on():
            rung = stream.wait(stream.until())
            event = stream.read(read_many) if stream.reads(rung) else None
            text = stream.answer(event, lambda: keep(stream))
            if text:
                yield text
        if last := stream.last():
            yield last
    finally:
        stream.close()


def attend(read_many: live.ReadMany, refused_of: Refused,
           woken: Sequence[live.Listener]) -> None:
    """The hub's attendance to its handed-off streams that a ring, a look or an end woke
    (:meth:`~wikinotify.inbox.live.Hub.hand_off`): the rung ones' summaries read
    together, the due ones' checks read together, then each one's answer written, as
    :func:`events` would yield it, and the stream scheduled for its next check, or ended.
    A read that fails ends them all: their badges reconnect."""
    streams = [one for one in cast("Sequence[Stream]", woken) if not one.closed]
    rung = [one for one in streams if one.reads(one.rung())]
    try:
        read = read_many(rung) if rung else {}
        due = [one for one in streams if one.checks()]
        refused = refused_of(due) if due else set()
    except Exception:
        log.exception("wikinotify: live streams ended, their reads failed")
        for one in streams:
            one.close()
        return
    chosen = set(rung)
    for one in streams:
        text = one.answer(read[one] if one in chosen else None,
                          functools.partial(allowed, one, refused))
        if not one.send(text):
            continue
        if one.going_on():
            one.schedule()
        else:
            one.send(one.last())
            one.close()
