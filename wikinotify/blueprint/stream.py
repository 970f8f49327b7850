"""``GET /stream``: the caller's summary as Server-Sent Events (§9.3).

One ``event: summary`` on connect, then one within a second of every commit that changes
the summary (:func:`wikinotify.live.changed`), a comment every
:data:`KEEPALIVE_SECONDS` so proxies keep the connection, and a clean end after
``WIKINOTIFY_STREAM_MAX_AGE`` seconds, after which the browser reconnects by itself.

Each open stream holds a thread (or a greenlet) of the web server, but no database
connection while it waits: the session is given back after each read. The streams one
burst of changes wakes read their summaries together (:class:`wikinotify.live.Wake`).
Serve it with a server made for long requests (README, "Deploying").
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence

from flask import current_app, stream_with_context
from flask.typing import ResponseReturnValue

from .. import inbox, live
from ..config import config
from ..instance_settings import site_enabled
from ..state import state
from .core import bp, current_site_id, json_error, session, user_id
from .inbox import summary_body

#: A comment line this often keeps proxies (and the server) aware of the connection.
KEEPALIVE_SECONDS = 25
#: How long the browser waits before it reconnects (``retry:``), in milliseconds.
RETRY_MS = 3000
#: How long a new stream waits for this process's Redis subscription before it answers
#: 503 (and the badge polls instead).
CONNECT_WAIT_SECONDS = 2.0


def summary_events(listeners: Sequence[live.Listener]) -> dict[live.Listener, str]:
    """Each stream's ``summary`` event: the versions in one Redis read; each site's
    switch once and the summaries in one statement, in a database session that is then
    given back (no connection is held while the streams wait).

    The summary is a state, not a log: a reconnecting browser's ``Last-Event-ID`` (this
    event's ``id``, the summary version) has nothing to replay, so every connection gets
    the current state at once, whatever id it sends."""
    wanted = list(dict.fromkeys((listener.user_id, listener.site_id) for listener in listeners))
    users = list(dict.fromkeys(user_id for user_id, _ in wanted))
    versions = live.summary_versions(current_app, users) or {}  # before the bodies
    try:
        enabled = {site_id: site_enabled(session(), site_id)
                   for site_id in dict.fromkeys(site_id for _, site_id in wanted)}
        counts = inbox.summaries(session(), [key for key in wanted if enabled[key[1]]])
        bodies = {key: json.dumps(summary_body(*key, enabled=enabled[key[1]],
                                               counts=counts.get(key)))
                  for key in wanted}
    finally:
        state().db.session.remove()  # the scoped proxy's: ends this context's Session
    return {
        listener: (f"id: {versions.get(listener.user_id, '')}\nevent: summary\n"
                   f"data: {bodies[listener.user_id, listener.site_id]}\n\n")
        for listener in listeners
    }


def events(hub: live.Hub, listener: live.Listener, read_many: live.ReadMany, *,
           keepalive: float, max_age: float) -> Iterator[str]:
    """The stream's text: the current summary, then one per ring of ``listener``, a
    comment after ``keepalive`` quiet seconds, until ``max_age`` or the hub's Redis
    subscription drops (the browser then reconnects, or falls back to polling)."""
    ends = time.monotonic() + max_age
    yield f"retry: {RETRY_MS}\n\n" + read_many([listener])[listener]
    while hub.connected.is_set():
        left = ends - time.monotonic()
        if left <= 0:
            return
        if listener.wait(min(keepalive, left)):
            if hub.connected.is_set():
                yield listener.read(read_many)
        elif time.monotonic() < ends:
            yield ": keep-alive\n\n"


@bp.get("/stream")
def stream() -> ResponseReturnValue:
    me = user_id()
    if me is None:
        return json_error(401, "unauthorized", "Sign in to follow your notifications.")
    hub = live.hub(current_app)
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    listener = hub.join(me, current_site_id(), app)
    if not hub.connected.wait(CONNECT_WAIT_SECONDS):
        hub.leave(me, listener)
        return json_error(503, "unavailable", "Live updates are unavailable; poll "
                                              "the summary instead.")

    def body() -> Iterator[str]:
        try:
            yield from events(hub, listener, summary_events,
                              keepalive=KEEPALIVE_SECONDS, max_age=config("STREAM_MAX_AGE"))
        finally:
            hub.leave(me, listener)

    response = current_app.response_class(
        stream_with_context(body()), mimetype="text/event-stream"
    )
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response
