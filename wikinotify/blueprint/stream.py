"""``GET /stream``: the caller's summary as Server-Sent Events (§9.3).

One ``event: summary`` on connect, then one within a second of every commit that changes
the summary (:func:`wikinotify.live.changed`), a comment every
:data:`KEEPALIVE_SECONDS` so proxies keep the connection, and a clean end after
``WIKINOTIFY_STREAM_MAX_AGE`` seconds, after which the browser reconnects by itself.

Each open stream holds a thread (or a greenlet) of the web server, but no database
connection while it waits: the session is given back after each summary. Serve it with
a server made for long requests (README, "Deploying").
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

from flask import current_app, stream_with_context
from flask.typing import ResponseReturnValue

from .. import live
from ..config import config
from ..state import state
from .core import bp, current_site_id, json_error, user_id
from .inbox import summary_body

#: A comment line this often keeps proxies (and the server) aware of the connection.
KEEPALIVE_SECONDS = 25
#: How long the browser waits before it reconnects (``retry:``), in milliseconds.
RETRY_MS = 3000
#: How long a new stream waits for this process's Redis subscription before it answers
#: 503 (and the badge polls instead).
CONNECT_WAIT_SECONDS = 2.0


def summary_event(me: str, site_id: str | None) -> str:
    """One ``summary`` event, read from the database, whose session is then given back.

    The summary is a state, not a log: a reconnecting browser's ``Last-Event-ID`` (this
    event's ``id``, the summary version) has nothing to replay, so every connection gets
    the current state at once, whatever id it sends."""
    version = live.summary_version(current_app, me) or ""
    body = summary_body(me, site_id)
    state().db.session.remove()  # no connection held while the stream waits
    return f"id: {version}\nevent: summary\ndata: {json.dumps(body)}\n\n"


def events(hub: live.Hub, listener: live.Listener, read: Callable[[], str], *,
           keepalive: float, max_age: float) -> Iterator[str]:
    """The stream's text: the current summary, then one per ring of ``listener``, a
    comment after ``keepalive`` quiet seconds, until ``max_age`` or the hub's Redis
    subscription drops (the browser then reconnects, or falls back to polling)."""
    ends = time.monotonic() + max_age
    yield f"retry: {RETRY_MS}\n\n" + read()
    while hub.connected.is_set():
        left = ends - time.monotonic()
        if left <= 0:
            return
        if listener.wait(min(keepalive, left)):
            if hub.connected.is_set():
                yield read()
        elif time.monotonic() < ends:
            yield ": keep-alive\n\n"


@bp.get("/stream")
def stream() -> ResponseReturnValue:
    me = user_id()
    if me is None:
        return json_error(401, "unauthorized", "Sign in to follow your notifications.")
    hub = live.hub(current_app)
    listener = hub.join(me)
    if not hub.connected.wait(CONNECT_WAIT_SECONDS):
        hub.leave(me, listener)
        return json_error(503, "unavailable", "Live updates are unavailable; poll "
                                              "the summary instead.")
    site_id = current_site_id()

    def body() -> Iterator[str]:
        try:
            yield from events(hub, listener, lambda: summary_event(me, site_id),
                              keepalive=KEEPALIVE_SECONDS, max_age=config("STREAM_MAX_AGE"))
        finally:
            hub.leave(me, listener)

    response = current_app.response_class(
        stream_with_context(body()), mimetype="text/event-stream"
    )
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response
