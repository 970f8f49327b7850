"""``emit``: the one write a request pays for an event (docs/rules.md#emit).

It writes one outbox row with one INSERT, in the caller's transaction, and nothing else:
a rolled-back edit leaves no event. After the transaction commits, a debounced kick
asks a worker to fan it out. Nothing here raises for a notification reason, and nothing
here can cost the caller its own write: the event is validated before the INSERT, and
the INSERT runs in a SAVEPOINT of its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import json
import logging
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from flask import Flask
from redis.client import Pipeline
from sqlalchemy.orm import Session

from . import commits, counters, dialects
from .host import ONE_SITE_ID, Host, keeps_one_site
from .inbox import live
from .models import Event, Origin, SiteSwitch, utcnow
from .queue import kick_dispatch
from .state import state

log = logging.getLogger(__name__)

#: The origin of the events emitted in the current context (docs/rules.md#origin).
_origin: contextvars.ContextVar[str] = contextvars.ContextVar(
    "wikinotify_origin", default=Origin.USER)

#: Set on a session that emitted, so its commit kicks the fan-out.
_KICK = "wikinotify.kick"


@contextlib.contextmanager
def _origin_scope(origin: str) -> Iterator[None]:
    token = _origin.set(origin)
    try:
        yield
    finally:
        _origin.reset(token)


def importing() -> contextlib.AbstractContextManager[None]:
    """Everything emitted inside is an import or a storage sync (``origin = "import"``)."""
    return _origin_scope(Origin.IMPORT)


def bulk() -> contextlib.AbstractContextManager[None]:
    """Everything emitted inside is a bulk operation (``origin = "bulk"``)."""
    return _origin_scope(Origin.BULK)


def current_origin() -> str:
    return _origin.get()


class Omitted(enum.Enum):
    """An argument ``emit`` was not given."""

    #: No ``site_id``: the event is on the wiki's one site (:data:`.host.ONE_SITE_ID`).
    SITE = "the wiki's one site"


def emit(
    kind: str,
    *,
    site_id: str | None | Omitted = Omitted.SITE,
    actor_id: str | None = None,
    page_id: str | None = None,
    comment_id: str | None = None,
    submission_id: str | None = None,
    snapshot: dict[str, Any] | None = None,
    variant: str | None = None,
    key: str | None = None,
    **extra: Any,
) -> int | None:
    """Record that ``kind`` happened; a worker decides who hears of it. Returns the
    event's id, or ``None`` when nothing was written.

    ``site_id`` is the site the event happened on: a one-site wiki (whose host keeps
    ``Host.sites``' default, as ``ModelHost`` does) leaves it out, and ``None`` is an
    event about no site (an instance-scoped category's). ``snapshot`` is what the entry
    will show (title, path, locale, tags, publish state); ``extra`` holds what a category
    reads besides (``parent_id`` of a reply, the comment ``text`` and, on an edit, its
    ``previous_text``), stored as given: pass ids there as strings. Call it where the
    action happens, inside its transaction and after a flush, so the ids exist; the
    INSERT runs at once. ``page:delete`` must be emitted *before* the page row is
    deleted: it captures the watchers in the same statement.

    ``key`` is the host's idempotency key for the action (the id of the revision a save
    made, of the comment a post made; at most 255 characters): an event of the same
    ``kind`` and ``key`` is written once, however often the action is retried, and
    emitting it again writes nothing and returns the first event's id.
    """
    try:
        event_id = _emit(
            kind,
            site_id=site_id if isinstance(site_id, Omitted) else _text(site_id),
            actor_id=_text(actor_id),
            page_id=_text(page_id),
            comment_id=_text(comment_id),
            submission_id=_text(submission_id),
            key=_text(key),
            data={"snapshot": snapshot or {}, "variant": variant, **extra},
        )
    except Exception:  # a notification problem must never fail the action (docs/rules.md#emit)
        log.exception("wikinotify: could not emit %s; the action itself went ahead", kind)
        event_id = None
    try:
        # Written or not (nobody listens to a comment's deletion, say), the wiki acted on
        # a page or a comment.
        wiki_changed_at_commit(state().db.session())
    except Exception:
        log.exception("wikinotify: %s will not forget the kept inbox pages", kind)
    return event_id


def wiki_changed_at_commit(session: Session) -> None:
    """At ``session``'s commit, the pages of inboxes kept before go
    (docs/rules.md#kept-pages): in the kick's round trip when the transaction emitted an
    event, alone otherwise (:func:`_kick`); one a commit, whatever it wrote."""
    commits.after_commit(session, _KICK)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


class InvalidEvent(ValueError):
    """An event that cannot be stored as given; the message names the field."""


def _checked(fields: dict[str, Any]) -> None:
    """Refuse, before any SQL, what the INSERT would fail on: a failed statement is what
    aborts a PostgreSQL transaction, so the cheapest safe statement is the one not sent."""
    columns = Event.__table__.c
    for name, value in fields.items():
        limit = getattr(columns[name].type, "length", None) if name in columns else None
        if isinstance(value, str) and limit is not None and len(value) > limit:
            raise InvalidEvent(f"{name} is {len(value)} characters long; at most {limit} fit")
    try:
        json.dumps(fields["data"], allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidEvent(f"the snapshot or extras are not JSON ({error})") from None
    if any("\x00" in text for text in _strings(fields["data"])):
        raise InvalidEvent("the snapshot or extras hold a NUL character, which jsonb cannot")


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _emit(kind: str, **fields: Any) -> int | None:
    st = state()
    if not st.registry.knows(kind):
        # A typo in the wiki's emit, or a category the wiki forgot to register.
        log.warning("wikinotify: unknown event kind %r dropped: no registered category "
                    "listens to it", kind)
        return None
    if fields["site_id"] is Omitted.SITE:
        if not keeps_one_site(st.host):
            log.warning("wikinotify: %s event dropped: it names no site_id, and %s has "
                        "sites of its own (Host.sites); pass site_id=", kind,
                        type(st.host).__name__)
            return None
        fields["site_id"] = ONE_SITE_ID
    try:
        _checked(fields)
    except InvalidEvent as problem:
        log.warning("wikinotify: %s event dropped: %s; the action itself went ahead", kind,
                    problem)
        return None
    origin = current_origin()
    if not st.registry.listening(kind, origin):
        return None  # e.g. a git pull's page:create: nobody listens, nothing is written
    session = st.db.session()  # the app context's Session, which the proxy hands out
    values: dict[str, Any] = dict(fields, kind=kind, origin=origin, created_at=utcnow())
    # One statement, executed now in the caller's transaction: the site switch is checked
    # inside the INSERT, so the request pays this one write and no extra read (docs/rules.md#emit).
    with dialects.savepoint(session):
        if kind == "page:delete" and fields["page_id"] is not None:
            # The watchers are read in this same statement, before the caller deletes the
            # page and its watch rows (docs/rules.md#deleting-a-page); a host without a watchers
            # query has them read just before, inside the same savepoint.
            values["recipients"] = _captured_watchers(session, st.host, fields["page_id"])
        event_id: int | None = session.scalar(_insert(session, values, fields["site_id"]))
        if event_id is None and fields["key"] is not None:
            # Nothing written: the site is switched off, or this key was emitted before.
            event_id = session.scalar(
                sa.select(Event.id).where(Event.kind == kind, Event.key == fields["key"])
            )
            return event_id
    if event_id is not None:
        # The fan-out starts once the wiki commits; the kick counts what it committed.
        commits.after_commit(session, _KICK, [str(event_id)])
    return event_id


def _insert(session: Session, values: dict[str, Any], site_id: str | None) -> sa.Insert:
    """``INSERT INTO wikinotify_events … SELECT <values> WHERE NOT EXISTS (the site's
    switch, off) ON CONFLICT (kind, key) WHERE key IS NOT NULL DO NOTHING RETURNING id``:
    nothing is written for a site whose notifications are off (docs/rules.md#the-site-switch), nor
    for a key already emitted."""
    columns = Event.__table__.c
    # The one SQL value is the watchers' array (a scalar subquery, a column expression).
    selected: list[sa.ColumnElement[Any]] = [
        value if isinstance(value, sa.ColumnElement) else sa.literal(value, columns[name].type)
        for name, value in values.items()
    ]
    # Always a WHERE: SQLite reads `INSERT … SELECT … ON CONFLICT` as a join's ON
    # without one.
    query = sa.select(*selected).where(sa.true())
    if site_id is not None:
        switched_off = sa.exists().where(
            SiteSwitch.site_id == site_id, SiteSwitch.enabled.is_(False)
        )
        query = query.where(~switched_off)
    insert = dialects.insert(session, Event.__table__).from_select(list(values), query)
    return insert.on_conflict_do_nothing(
        index_elements=["kind", "key"], index_where=sa.text("key IS NOT NULL")
    ).returning(Event.id)


#: Watchers read per query when a host has no ``watchers_query`` to embed.
WATCHER_BATCH = 1000


def _captured_watchers(session: Session, host: Host, page_id: str) -> Any:
    """The deleted page's watchers, as a JSON array: built by the INSERT itself from the
    host's ``watchers_query``, or else read now through ``page_watchers``."""
    query = host.watchers_query(page_id)
    if query is not None:
        return _json_array(session, query)
    watchers: list[str] = []
    while batch := host.page_watchers(page_id, after=watchers[-1] if watchers else None,
                                      limit=WATCHER_BATCH):
        watchers.extend(batch)
        if len(batch) < WATCHER_BATCH:
            break
    return watchers


def _json_array(session: Session, query: sa.Select[Any]) -> sa.ScalarSelect[Any]:
    """``query``'s one column as a JSON array, built by the database, never in Python."""
    subquery = query.subquery()
    column = sa.cast(list(subquery.columns)[0], sa.Text)
    aggregate: sa.ColumnElement[Any]
    if dialects.is_postgresql(session):
        aggregate = sa.func.coalesce(sa.func.jsonb_agg(column), sa.text("'[]'::jsonb"))
    else:
        aggregate = sa.func.json_group_array(column)
    return sa.select(aggregate).select_from(subquery).scalar_subquery()


def _kick(app: Flask, ids: set[str]) -> None:
    """After a commit that emitted: the fan-out kicked for the events it wrote (``ids``),
    and the wiki's version forgotten (:func:`wikinotify.inbox.live.wiki_changed`) in the
    same round trip; with none written, only that."""
    if not ids:
        live.wiki_changed(app)
        return
    # Emitted events are counted here, after the commit and in the kick's own round trip
    # to Redis: the request still pays one INSERT and no Redis call of its own, a rolled
    # back emit is never counted, and the count moves when events are written, not when
    # a worker gets to them (a stopped worker shows as emitted running ahead of fanned
    # out). A kick lost to a Redis outage loses its count, not its events. The fan-out
    # forgets the wiki's version again, should that be lost.
    count = counters.adding(app, {counters.EVENTS_EMITTED.field(): len(ids)})
    forget = live.forgetting_wiki(app)

    def also(pipe: Pipeline) -> None:
        count(pipe)
        forget(pipe)

    kick_dispatch(app, also=also)


commits.work(_KICK, _kick)
