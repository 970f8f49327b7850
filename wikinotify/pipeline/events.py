"""The fan-out (§7): from an outbox event to one inbox entry per person told.

For every category an event reaches, highest priority first, candidates come in keyset
batches; the actor and accounts that never receive anything are dropped, access is checked
once per distinct group set, preferences decide the channels, a person already given an
entry by a higher-priority category is skipped (§7.4), and each batch's rows are upserted
with the coalescing rules of §8.3, by a :class:`~wikinotify.batch_writer.BatchWriter` (on
PostgreSQL while the next batch is decided), with the cursor that covers them. A run that
nears its time budget stores its cursor on the event and hands the rest to the next run
(§7.6).

An event whose last category has more candidates than ``WIKINOTIFY_FANOUT_RANGE_SIZE`` is
split: the run that finds it out walks that category's ids ahead (ids only, keyset) and cuts
them into ranges, each a row of ``wikinotify_fanout_ranges`` that a ``fanout_range`` job
claims, resumes from its own cursor and retries on its own, so several workers fan one
large audience out at once; the last range to finish marks the event processed. See
:func:`_split` for what is split and why.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import sqlalchemy as sa
from flask import Flask, current_app
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from . import dialects, live, mutes, preferences, queue
from .batch_writer import BatchWriter
from .categories import Category, Channels, FanoutContext, Registry
from .config import config
from .host import Host, UserFacts
from .instance_settings import instance_settings
from .mail.cadence import email_after_for
from .models import Event, FanoutRange, InstanceSettings, Notification, Preference, utcnow
from .outbound import routing

log = logging.getLogger(__name__)

#: Events claimed per run, oldest first (§7.1).
CLAIM_BATCH = 50
#: Candidates read per keyset batch (§7.3), each batch one transaction. Larger batches
#: pay the per-batch round trips and commit less often; memory grows with the batch, not
#: the audience (``python -m bench.fanout`` measures both).
CANDIDATE_BATCH = 5000
#: Rows per upsert (§7.5): a whole batch, copied (PostgreSQL) or inserted (SQLite) into a
#: staging table and merged by one statement.
WRITE_BATCH = CANDIDATE_BATCH
#: An email state a coalescing event leaves alone (§10.2): the mail that is due absorbs
#: the event, and a sent (or hopeless) one stays quiet until the entry is read.
MAIL_ALREADY_DECIDED = ("pending", "sending", "sent", "failed")
#: Failed fan-out attempts after which an event is a dead letter.
MAX_ATTEMPTS = 5
#: The back-off after the first failed attempt; it doubles with each one after.
FIRST_BACKOFF = timedelta(minutes=1)
#: The most of an error's description an event keeps.
ERROR_LENGTH = 1000
#: The job that fans out one range of a split event (``wikinotify.jobs.fanout_range``).
RANGE_JOB = "fanout_range"


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# -- claiming ------------------------------------------------------------------------------

#: What a worker may claim, an event or a range of one: not a dead letter, out of its
#: back-off, and either unclaimed or claimed longer ago than the stale threshold (its
#: worker died). Every time is the database's: a worker whose clock is wrong can neither
#: steal a fresh claim nor skip a back-off. ``{now}`` and ``{stale}`` are filled per dialect.
_OPEN = """failed_at IS NULL
    AND (retry_after IS NULL OR retry_after <= {now})
    AND (claimed_at IS NULL OR claimed_at < {stale})
"""
#: An event: also unprocessed, and not split (its ranges are claimed instead).
_CLAIMABLE = "processed_at IS NULL AND ranges IS NULL AND " + _OPEN
#: A range of a split event: also not done.
_RANGE_CLAIMABLE = "done_at IS NULL AND " + _OPEN

_CLAIM_POSTGRESQL = """
UPDATE wikinotify_events SET claimed_at = {now}, claimed_by = :me
WHERE id = ANY(ARRAY(
    SELECT id FROM wikinotify_events
    WHERE """ + _CLAIMABLE + """
    ORDER BY created_at, id
    LIMIT :batch
    FOR UPDATE SKIP LOCKED))
RETURNING id
"""
# ARRAY(…) is evaluated once. Written as `id IN (SELECT … LIMIT …)` PostgreSQL may plan a
# semi-join that re-runs the subquery per row, and the LIMIT stops limiting (DESIGN.md).

_CLAIM_SQLITE = """
UPDATE wikinotify_events SET claimed_at = {now}, claimed_by = :me
WHERE id IN (
    SELECT id FROM wikinotify_events
    WHERE """ + _CLAIMABLE + """
    ORDER BY created_at, id
    LIMIT :batch)
RETURNING id
"""
# SQLite runs one writer at a time, so this conditional UPDATE is the whole claim.


def _claimable_sql(session: Session, template: str) -> str:
    return template.format(
        now=dialects.now_sql(session), stale=dialects.now_plus_sql(session, "stale")
    )


def claim_events(
    session: Session, *, me: str, stale_after: timedelta, batch: int = CLAIM_BATCH
) -> list[int]:
    """Claim up to ``batch`` claimable events, taking over claims older than
    ``stale_after`` by the database's clock (their worker died), and commit the claim."""
    sql = _CLAIM_POSTGRESQL if dialects.is_postgresql(session) else _CLAIM_SQLITE
    statement = sa.text(_claimable_sql(session, sql))
    stale = -stale_after.total_seconds()
    ids = session.scalars(statement, {"me": me, "stale": stale, "batch": batch}).all()
    session.commit()
    return sorted(ids)


def events_waiting(session: Session, *, stale_after: timedelta) -> bool:
    """Whether any event is free to claim now."""
    return _waiting(session, "wikinotify_events", _CLAIMABLE, stale_after)


def _waiting(session: Session, table: str, claimable: str, stale_after: timedelta) -> bool:
    query = f"SELECT 1 FROM {table} WHERE {claimable} LIMIT 1"
    statement = sa.text(_claimable_sql(session, query))
    return session.scalar(statement, {"stale": -stale_after.total_seconds()}) is not None


#: One range, the first of the oldest split event. ``id = (SELECT …)`` is a scalar
#: subquery, which PostgreSQL evaluates once (an InitPlan): the claim trap of
#: ``id IN (SELECT … LIMIT …)`` cannot happen (DESIGN.md).
_CLAIM_RANGE = """
UPDATE wikinotify_fanout_ranges SET claimed_at = {now}, claimed_by = :me
WHERE id = (
    SELECT id FROM wikinotify_fanout_ranges
    WHERE """ + _RANGE_CLAIMABLE + """
    ORDER BY event_id, number
    LIMIT 1{lock})
RETURNING id
"""


def claim_range(session: Session, *, me: str, stale_after: timedelta) -> int | None:
    """Claim one claimable range of a split event (a lapsed lease is taken over, by the
    database's clock) and commit the claim; its id, or ``None`` if none is free."""
    lock = " FOR UPDATE SKIP LOCKED" if dialects.is_postgresql(session) else ""
    statement = sa.text(_claimable_sql(session, _CLAIM_RANGE.replace("{lock}", lock)))
    range_id = session.scalar(statement, {"me": me, "stale": -stale_after.total_seconds()})
    session.commit()
    return int(range_id) if range_id is not None else None


def ranges_waiting(session: Session, *, stale_after: timedelta) -> bool:
    """Whether any range of a split event is free to claim now."""
    return _waiting(session, "wikinotify_fanout_ranges", _RANGE_CLAIMABLE, stale_after)


# -- deciding who is told ------------------------------------------------------------------


@dataclass
class Recipient:
    facts: UserFacts
    channels: Channels
    #: The reader's endpoints (webhook, chat) that get a delivery of this entry.
    endpoints: tuple[int, ...] = ()


@dataclass
class EventRun:
    """What one event's fan-out keeps while it runs: bounded by the batch size, except
    ``taken``, which holds only recipients of higher-priority categories when a lower one
    follows (a handful for a comment, the captured watchers for a deletion)."""

    event: Event
    ctx: FanoutContext
    #: The app itself (not the proxy): the batch writer's thread works in it.
    app: Flask
    instance_settings: InstanceSettings
    mail_on: bool
    actor: UserFacts | None
    page: dict[str, Any]
    access: dict[tuple[frozenset[str], str], bool] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)
    #: The site's zone for readers who name none: None until asked, "" if it has none.
    site_timezone: str | None = None
    #: Who writes the batches (:mod:`wikinotify.batch_writer`); set while the run writes.
    writer: BatchWriter | None = None
    #: The event's site-wide deliveries wait in the run's own transaction, which commits
    #: them only after the first batch has committed (see :func:`_write`).
    site_wide_waiting: bool = False
    written: int = 0
    batches: int = 0

    @property
    def host(self) -> Host:
        return self.ctx.host

    @property
    def session(self) -> Session:
        return self.ctx.session


def _may_see(run: EventRun, category: Category, facts: UserFacts) -> bool:
    """Access at the time of the fan-out, once per distinct group set and permission
    (§7.2)."""
    for permission in category.access_checks:
        key = (facts.group_ids, permission)
        if key not in run.access:
            run.access[key] = run.host.check_access(facts.group_ids, permission, run.page)
        if not run.access[key]:
            return False
    return True


def _preferences(
    session: Session, category: Category, user_ids: Sequence[str]
) -> dict[tuple[str, str], bool]:
    """The stored (user, channel) → enabled rows of this batch, one query."""
    rows = session.execute(
        sa.select(Preference.user_id, Preference.channel, Preference.enabled).where(
            Preference.category == category.key,
            dialects.among(session, Preference.user_id, user_ids),
        )
    )
    return {(user_id, channel): enabled for user_id, channel, enabled in rows}


def decide(run: EventRun, category: Category, candidates: Sequence[str]) -> list[Recipient]:
    """Of ``candidates``, who is told through ``category``, and on which channels.

    Runs once per candidate of every fan-out, so the per-candidate work is kept to
    dictionary lookups: access once per group set, and the channels of a reader who
    stored nothing and has no endpoint (nearly everyone) straight from the defaults."""
    candidates = [c for c in dict.fromkeys(candidates) if c != run.event.actor_id]
    if not candidates:
        return []
    # Who muted this page or this actor hears nothing of it, from any category.
    muted = mutes.muters_among(run.session, candidates, run.event.page_id, run.event.actor_id)
    facts = run.host.users([c for c in candidates if c not in muted] if muted else candidates)
    eligible = [
        person for c in candidates
        if (person := facts.get(c)) is not None and c not in muted and person.can_receive
        and _may_see(run, category, person)
    ]
    ids = [person.id for person in eligible]
    stored = _preferences(run.session, category, ids)
    # Webhook and chat: on where the reader has an active endpoint taking the category
    # and has not turned the channel off; one query for the batch's endpoints.
    routes = routing.endpoints_of(run.session, ids, category.key)
    in_app_default, email_default = category.defaults.in_app, category.defaults.email
    outbound_default = preferences.outbound_default(category)
    # The few distinct channel sets, each made once.
    made: dict[tuple[bool, bool, bool, bool], Channels] = {}
    chosen: list[Recipient] = []
    for person in eligible:
        in_app, email = in_app_default, email_default
        if stored:
            in_app = stored.get((person.id, "inApp"), in_app)
            email = stored.get((person.id, "email"), email)
        email = email and run.mail_on and person.can_receive_email
        webhook = chat = False
        endpoints: tuple[int, ...] = ()
        if (mine := routes.get(person.id)) is not None:
            wanted = {kind: stored.get((person.id, kind), outbound_default) for kind in mine}
            endpoints = tuple(e for kind, found in mine.items() if wanted[kind] for e in found)
            webhook, chat = bool(wanted.get("webhook")), bool(wanted.get("chat"))
        if in_app or email or endpoints:
            key = (in_app, email, webhook, chat)
            channels = made.get(key) or made.setdefault(key, Channels(*key))
            chosen.append(Recipient(person, channels, endpoints))
    return chosen


def _targets(chosen: Sequence[Recipient]) -> dict[str, tuple[int, ...]]:
    """Reader → her endpoints that get this entry (webhook, chat)."""
    return {r.facts.id: r.endpoints for r in chosen if r.endpoints}


# -- writing -------------------------------------------------------------------------------


def entry_data(run: EventRun, category: Category) -> dict[str, Any]:
    """What the entry shows, whatever happens to the page later (§8.2)."""
    event = run.event
    data = dict(category.snapshot(event))
    data["actor_name"] = run.actor.display_name if run.actor else None
    if event.submission_id is not None:
        data["submission_id"] = event.submission_id
    return data


#: The key of an entry's data that counts its events by variant ({"edited": 3, "moved": 2}).
COUNTS = "variant_counts"

#: The columns that differ from one recipient to the next; the rest are the event's.
PER_RECIPIENT = ("user_id", "in_app", "email_state", "email_after")
#: One recipient's row: the values of :data:`PER_RECIPIENT`, in that order. A tuple, as
#: the COPY writes it: a batch builds thousands.
Person = tuple[str, bool, str, datetime | None]


def _rows(
    run: EventRun, category: Category, recipients: Iterable[Recipient]
) -> tuple[dict[str, Any], list[Person]]:
    """The entry this event makes, as ``(what every recipient's row shares, what each
    recipient's row adds)``."""
    event, now = run.event, utcnow()
    variant = category.variant(event)
    shared = {
        "site_id": event.site_id if category.scope == "site" else None,
        "category": category.key,
        "variant": variant,
        "variants": f",{variant},",
        "group_key": category.group_key(event),
        "page_id": event.page_id,
        "comment_id": event.comment_id,
        "actor_id": event.actor_id,
        # Each variant's count travels in the data, so the sentence can say "edited 3
        # times and moved twice"; the coalescing upsert adds to it (§8.3).
        "data": {**entry_data(run, category), COUNTS: {variant: 1}},
        "count": 1,
        "last_event_id": event.id,
        "email_attempts": 0,
        "created_at": now,
        "updated_at": now,
    }
    recipients = list(recipients)
    mailed = [r.facts.id for r in recipients if r.channels.email]
    # A digest may hold this category back: the batch's schedules, one query (§10.5).
    chosen = preferences.schedules(run.session, mailed) if category.digest else {}
    site_timezone = _site_timezone(run) if chosen else None
    # A reader with no stored schedule is immediate: the same time for all of them.
    soon = email_after_for(None, now, run.instance_settings, category)
    people = [
        (
            r.facts.id,
            r.channels.in_app,
            "pending" if r.channels.email else "none",
            None if not r.channels.email
            else soon if (schedule := chosen.get(r.facts.id)) is None
            else email_after_for(r.facts, now, run.instance_settings, category,
                                 schedule, site_timezone),
        )
        for r in recipients
    ]
    return shared, people


def _site_timezone(run: EventRun) -> str | None:
    """The event's site's zone, asked of the host once per event run."""
    if run.site_timezone is None:
        site = run.host.site(run.event.site_id) if run.event.site_id is not None else None
        # "" stands for "asked; the site names no zone", so the host is asked once.
        run.site_timezone = (site.timezone if site is not None else None) or ""
    return run.site_timezone or None


def _counted_data(
    new: sa.ColumnCollection[str, sa.ColumnElement[Any]], postgres: bool
) -> sa.ColumnElement[Any]:
    """The new event's data with the entry's per-variant counts, this variant's one up:
    computed in the upsert itself, so coalescing stays one statement per batch."""
    # literal: a constant of the one cached statement
    key: sa.ColumnClause[str] = sa.literal_column(f"'{COUNTS}'")
    # Each database builds these from its own functions, so they are typed as what both are.
    kept: sa.ColumnElement[Any]
    counts: sa.ColumnElement[Any]
    if postgres:
        kept = Notification.data.op("->")(key)
        num = sa.func.coalesce(sa.cast(kept.op("->>")(new.variant), sa.Integer), 0) + 1
        counts = sa.func.coalesce(kept, sa.text("'{}'::jsonb")).op("||")(
            sa.func.jsonb_build_object(new.variant, num)
        )
        return new.data.op("||", return_type=postgresql.JSONB)(
            sa.func.jsonb_build_object(key, counts)
        )
    path = sa.literal_column("'$.\"'", sa.String) + new.variant + sa.literal_column("'\"'")
    kept = sa.func.json_extract(Notification.data, sa.literal_column(f"'$.{COUNTS}'"))
    num = sa.func.coalesce(
        sa.func.json_extract(kept, path), sa.literal_column("0")
    ) + sa.literal_column("1")
    counts = sa.func.json_set(
        sa.func.json(sa.func.coalesce(kept, sa.literal_column("'{}'"))), path, num
    )
    return sa.func.json_set(new.data, sa.literal_column(f"'$.{COUNTS}'"), counts)


def _coalesce(
    new: sa.ColumnCollection[str, sa.ColumnElement[Any]], postgres: bool
) -> dict[str, Any]:
    """``SET`` of an entry an event lands on while it is unread (§8.3, §10.2)."""
    # Literal states, not bound ones: constants of the one cached statement.
    decided: list[sa.ColumnClause[str]] = [
        sa.literal_column(f"'{state}'") for state in MAIL_ALREADY_DECIDED
    ]
    keep_mail = Notification.email_state.in_(decided)
    seen = Notification.variants.like("%," + new.variant + ",%")
    grown = Notification.variants + new.variant + ","
    return {
        "count": Notification.count + 1,
        "variant": new.variant,
        "variants": sa.case((seen, Notification.variants), else_=grown),
        "data": _counted_data(new, postgres),
        "actor_id": new.actor_id,
        "comment_id": new.comment_id,
        "last_event_id": new.last_event_id,
        "in_app": new.in_app,
        "updated_at": new.updated_at,
        "email_state": sa.case((keep_mail, Notification.email_state), else_=new.email_state),
        "email_after": sa.case((keep_mail, Notification.email_after), else_=new.email_after),
    }


def _on_conflict(
    statement: postgresql.Insert | sqlite.Insert,
) -> postgresql.Insert | sqlite.Insert:
    return statement.on_conflict_do_update(
        index_elements=[Notification.user_id, Notification.group_key],
        index_where=Notification.read_at.is_(None),
        set_=_coalesce(statement.excluded, isinstance(statement, postgresql.Insert)),
        # The same event again (a retried fan-out) is not news (§8.3).
        where=Notification.last_event_id != statement.excluded.last_event_id,
    )


#: A batch's per-recipient columns go into this temporary table, which the upsert's one
#: ``INSERT … SELECT`` reads with the event's values bound once. On PostgreSQL it is
#: made and dropped by each upsert, so that several may share a transaction; a failed one
#: leaves it to the rollback, and ``ON COMMIT DROP`` to a commit after a caught error.
#: SQLite's is kept by the connection and emptied by each upsert.
_STAGE = sa.table(
    "wikinotify_fanout_stage",
    *(sa.column(name, Notification.__table__.c[name].type) for name in PER_RECIPIENT),
)
_CREATE_STAGE = sa.text(
    "CREATE TEMPORARY TABLE wikinotify_fanout_stage (user_id text, in_app boolean, "
    "email_state text, email_after timestamptz) ON COMMIT DROP"
)
_COPY_STAGE = (
    "COPY wikinotify_fanout_stage (user_id, in_app, email_state, email_after) "
    "FROM STDIN (FORMAT BINARY)"
)
_STAGE_TYPES = ("text", "bool", "text", "timestamptz")
_DROP_STAGE = sa.text("DROP TABLE wikinotify_fanout_stage")
_CREATE_STAGE_SQLITE = sa.text(
    "CREATE TEMPORARY TABLE IF NOT EXISTS wikinotify_fanout_stage (user_id TEXT, "
    "in_app BOOLEAN, email_state TEXT, email_after DATETIME)"
)
_EMPTY_STAGE = sa.text("DELETE FROM wikinotify_fanout_stage")


def _upsert_postgresql(
    session: Session, shared: dict[str, Any], people: list[Person]
) -> None:
    """The batch in two statements whatever its size: one binary COPY of what varies
    (four columns) into the staging table, and one ``INSERT … SELECT`` from it. psycopg
    writes COPY rows in C, where a Python list bound as an array is dumped element by
    element in Python: for the four per-recipient arrays of ``unnest`` that was most of
    the fan-out's time (issue 13)."""
    import psycopg  # wikinotify's PostgreSQL driver (the ``postgresql`` extra)

    session.execute(_CREATE_STAGE)
    # The psycopg connection under the session's, in the same transaction.
    connection: Any = session.connection().connection.driver_connection
    try:
        with connection.cursor() as cursor, cursor.copy(_COPY_STAGE) as copy:
            copy.set_types(_STAGE_TYPES)
            for person in people:
                copy.write_row(person)
    except psycopg.Error as error:
        # The COPY goes past SQLAlchemy, so its errors arrive raw: raised as SQLAlchemy
        # raises the others, so that a lost connection reads as one (the run hands its
        # claims back, burning no attempt) and the pool drops that connection.
        lost = bool(connection.broken)
        if lost:
            session.connection().invalidate()
        raise sa.exc.DBAPIError.instance(
            _COPY_STAGE, None, error, psycopg.Error, connection_invalidated=lost
        ) from error
    session.execute(_merge_stage(shared, postgresql.insert))
    session.execute(_DROP_STAGE)


def _upsert_sqlite(
    session: Session, shared: dict[str, Any], people: list[Person]
) -> None:
    """The same merge, the staging table filled by an executemany of four columns: the
    event's values (the snapshot's JSON among them) are processed once, not per row."""
    session.execute(_CREATE_STAGE_SQLITE)
    session.execute(_EMPTY_STAGE)
    session.execute(sa.insert(_STAGE), [dict(zip(PER_RECIPIENT, p, strict=True)) for p in people])
    session.execute(_merge_stage(shared, sqlite.insert))
    session.execute(_EMPTY_STAGE)


def _merge_stage(
    shared: dict[str, Any], insert: Any
) -> postgresql.Insert | sqlite.Insert:
    """``INSERT … SELECT`` of the staging table's rows with the event's values bound
    once, coalescing as :func:`_on_conflict` says."""
    table = Notification.__table__
    values = [sa.literal(value, table.c[name].type) for name, value in shared.items()]
    # WHERE true: without a WHERE, SQLite would read the ON of ON CONFLICT as a join's.
    select = sa.select(*values, *(_STAGE.c[name] for name in PER_RECIPIENT)).where(sa.true())
    return _on_conflict(insert(table).from_select([*shared, *PER_RECIPIENT], select))


#: Set at the start of each fan-out write transaction on PostgreSQL (see :func:`upsert`).
_ASYNC_COMMIT = sa.text("SET LOCAL synchronous_commit = off")


def upsert(session: Session, shared: dict[str, Any], people: list[Person]) -> None:
    """Write the entries a batch at a time; a recipient who already has an unread entry under
    the same group key has it coalesced into, and a replayed event changes nothing (§8.3).

    A replay is recognised by ``last_event_id``: an event replayed after a later event
    coalesced into the same entry would count once more. That needs a worker to die
    mid-event and a newer event to land on the same entry first; it is the price of not
    keeping every event id on every entry.
    """
    if dialects.is_postgresql(session):
        # This transaction's commit returns before its WAL reaches the disk; LOCAL, so
        # only this transaction (one batch: its rows and the cursor that covers them).
        # Safe because a crash of the database can only lose the newest commits, in WAL
        # order, each with its rows and its cursor together: the event is then simply
        # less far along, and the replay of the lost batch is a no-op or a first write
        # (idempotent by event id, §8.3). Nothing outside trusts an unflushed batch:
        # any later synchronous commit (the event marked processed, a mail claimed for
        # sending, an entry read) flushes the WAL up to itself, this batch included.
        session.execute(_ASYNC_COMMIT)
    write = _upsert_postgresql if dialects.is_postgresql(session) else _upsert_sqlite
    for start in range(0, len(people), WRITE_BATCH):
        write(session, shared, people[start : start + WRITE_BATCH])


# -- one event -----------------------------------------------------------------------------


def _start(ctx: FanoutContext, event: Event, mail_on: bool) -> EventRun:
    host = ctx.host
    actor = host.users([event.actor_id]).get(event.actor_id) if event.actor_id else None
    page = {
        **(event.data.get("snapshot") or {}),
        "id": event.page_id,
        "site_id": event.site_id,
    }
    return EventRun(
        event=event,
        ctx=ctx,
        # Flask types its proxy as the app itself, so the proxy's method is unknown to mypy.
        app=current_app._get_current_object(),  # type: ignore[attr-defined]
        instance_settings=instance_settings(ctx.session),
        mail_on=mail_on,
        actor=actor,
        page=page,
    )


def _finish(session: Session, event: Event) -> None:
    event.processed_at = utcnow()
    event.cursor = None
    session.commit()


def _defer(session: Session, event: Event, category: Category, after: str | None) -> None:
    """Save where this fan-out got to and free the event for the next run (§7.6)."""
    event.cursor = {"category": category.key, "after": after}
    event.claimed_at = None
    event.claimed_by = None
    session.commit()


def fan_out(
    ctx: FanoutContext,
    event: Event,
    categories: Sequence[Category],
    *,
    mail_on: bool,
    deadline: float,
) -> bool:
    """Fan ``event`` out through ``categories`` (highest priority first). Returns ``False``
    when the deadline came first and the rest was left for the next run."""
    session = ctx.session
    if _is_false_deletion(ctx.host, event):
        log.info("wikinotify: page %s still exists; dropping its delete event", event.page_id)
        _finish(session, event)
        return True
    run = _start(ctx, event, mail_on)
    # Site-wide webhooks hear of the event once, committed once the first batch is (a
    # resumed run asks again, and adds none: one delivery per endpoint and event).
    run.site_wide_waiting = bool(routing.add_site_wide(
        session, ctx.host, event, categories,
        lambda category: Notification(**_rows(run, category, [])[0])))
    cursor = event.cursor or {}
    keys = [c.key for c in categories]
    resume_at = keys.index(cursor["category"]) if cursor.get("category") in keys else 0
    with BatchWriter(run.app, session) as run.writer:
        for index, category in enumerate(categories):
            # Categories before the cursor's wrote their rows in an earlier run; they are
            # walked again without writing, only to know who they already told.
            writing = index >= resume_at
            last = index == len(categories) - 1
            after = cursor.get("after") if index == resume_at else None
            while True:
                # Out of time: keep the place and hand over, but only after this run has
                # moved the event on by a batch, so every run makes progress.
                if writing and run.batches and time.monotonic() >= deadline:
                    _settle(run)
                    _defer(session, event, category, after)
                    return False
                candidates = _candidates(ctx, category, event, after)
                if not candidates:
                    break
                if last and after is None:
                    if run.written:
                        _settle(run)  # the split stores the cursor: the writes first
                    if _split(run, category, candidates):
                        return True
                chosen = [r for r in decide(run, category, candidates)
                          if r.facts.id not in run.taken]
                if not last:
                    run.taken.update(r.facts.id for r in chosen)
                after = candidates[-1]
                if writing:
                    if chosen:
                        # The cursor moves in the same transaction as the rows it covers:
                        # a run that dies or fails after this commit resumes past them, so
                        # no written batch is ever replayed (a replay coalesced into an
                        # entry that a later event has since touched would count twice,
                        # §8.3).
                        moved = {"category": category.key, "after": after}
                        _write(run, category, chosen,
                               sa.update(Event).where(Event.id == event.id).values(cursor=moved),
                               alone=len(candidates) < CANDIDATE_BATCH)
                    run.batches += 1
                if len(candidates) < CANDIDATE_BATCH:
                    break
        _settle(run)
    _finish(session, event)
    return True


def _settle(run: EventRun) -> None:
    """Wait until the batches handed to the writer are committed, then end the run's own
    transaction: what it read of the event (or the range) is read again, the cursor the
    writer has moved since included (setting an attribute to the value the session last
    read would write nothing), and in a snapshot taken after the writer's commits."""
    assert run.writer is not None, "a run writes inside its BatchWriter"
    run.writer.flush()
    run.site_wide_waiting = False  # the commit below takes them, after every batch
    run.session.commit()


def _write(
    run: EventRun,
    category: Category,
    chosen: list[Recipient],
    cursor: sa.Update,
    *,
    alone: bool,
) -> None:
    """Have ``chosen``'s entries written and committed with ``cursor``, the statement
    that moves the run's place past them, then their open pages told; ``alone`` when no
    batch of the category follows (see :meth:`BatchWriter.write`).

    Everything the write needs is read here, in the run's thread and session: the writer
    gets plain values (:mod:`wikinotify.batch_writer`)."""
    assert run.writer is not None, "a run writes inside its BatchWriter"
    event = run.event
    shared, people = _rows(run, category, chosen)
    run.writer.write(partial(
        _write_batch,
        run.app,
        shared,
        people,
        (event.id, category.key, category.group_key(event), _targets(chosen)),
        cursor,
        [r.facts.id for r in chosen if r.channels.in_app],
    ), alone=alone)
    if run.site_wide_waiting:
        # Nothing leaves the wiki for an event whose first batch failed: its site-wide
        # deliveries commit after that batch (once per event, so one wait).
        run.writer.flush()
        run.site_wide_waiting = False
    # The run's own reads end here, as its transaction would with the batch's commit.
    run.session.commit()
    run.written += len(chosen)


def _write_batch(
    app: Flask,
    shared: dict[str, Any],
    people: list[Person],
    deliveries: tuple[int, str, str, dict[str, tuple[int, ...]]],
    cursor: sa.Update,
    told: list[str],
    session: Session,
) -> None:
    """One batch's transaction: the entries, their deliveries and the cursor; then the
    open pages of those told in the inbox."""
    upsert(session, shared, people)
    routing.add_deliveries(session, *deliveries)
    session.execute(cursor)
    session.commit()
    live.changed(app, told)


def _candidates(
    ctx: FanoutContext, category: Category, event: Event, after: str | None
) -> list[str]:
    """A batch of ``category``'s candidates. A host method it needs that the wiki has not
    implemented fails the event naming the category, as Admin → Notifications shows."""
    try:
        return category.recipients(ctx, event, after, CANDIDATE_BATCH)
    except NotImplementedError as error:
        raise NotImplementedError(f"notification category {category.key!r}: {error}") from error


def _is_false_deletion(host: Host, event: Event) -> bool:
    """A delete event whose page is still there: the delete failed after the emit (§6.3)."""
    return event.kind == "page:delete" and event.page_id is not None and host.page_exists(
        event.page_id
    )


# -- split fan-outs (one event, many workers) ---------------------------------------------


def _split(run: EventRun, category: Category, first: list[str]) -> bool:
    """Split the fan-out of ``category``, the event's last, into ranges of
    ``WIKINOTIFY_FANOUT_RANGE_SIZE`` candidates and hand them to ``fanout_range`` jobs, when
    it has more than one range's worth; else return ``False`` having changed nothing.

    Asked at the category's first batch, and only when that batch is full or already
    larger than a range: an event with fewer candidates pays nothing, and runs as before.

    Only the last category is split. The ones before it (a comment's mentions and reply,
    ahead of the page's watchers) were written by this run, and who they told is stored
    with the event, so every range skips those people: one entry per person per event,
    the highest priority's (§7.4), however the ranges fall. A range is a stretch of that
    one category's keyset, bounded by ids the category itself returned, so no order of ids
    needs to hold across categories (the wiki owes none: the demo's watchers come in
    integer order, the opted-in preferences in text order), and no host lookup changes.
    An event whose earlier categories told more than a range's worth is not split.
    """
    size = config("FANOUT_RANGE_SIZE")
    if not size or len(first) < min(size + 1, CANDIDATE_BATCH) or len(run.taken) > size:
        return False
    uppers = _range_bounds(run, category, first, size)
    if not uppers:
        return False
    event, session = run.event, run.session
    lowers = [None, *uppers]
    session.add_all(
        FanoutRange(event_id=event.id, number=number, lower=lower, upper=upper)
        for number, (lower, upper) in enumerate(zip(lowers, [*uppers, None], strict=True))
    )
    event.ranges = len(lowers)
    event.cursor = {"category": category.key, "taken": sorted(run.taken)}
    event.claimed_at = None
    event.claimed_by = None
    session.commit()
    log.info("wikinotify: event %s split into %s ranges of %s", event.id, len(lowers), size)
    queue.kick(current_app, RANGE_JOB, worker=True)
    return True


def _range_bounds(run: EventRun, category: Category, first: list[str], size: int) -> list[str]:
    """The last id of each range of ``size`` candidates but the last range, walking the
    category's ids ahead from its first batch ``first``: ids only (no facts, access or
    writes), a keyset query per :data:`CANDIDATE_BATCH`, holding only the bounds."""
    uppers: list[str] = []
    count, batch = 0, first
    while batch:
        for candidate in batch:
            count += 1
            if count == size:
                uppers.append(candidate)
                count = 0
        if len(batch) < CANDIDATE_BATCH:
            break
        batch = _candidates(run.ctx, category, run.event, batch[-1])
    if uppers and count == 0:
        uppers.pop()  # nobody after the last bound: no empty last range
    return uppers


@dataclass
class RangeReport:
    range_id: int
    event_id: int | None = None
    written: int = 0
    #: The range was done, and it was its event's last, which it marked processed.
    done: bool = False
    processed: bool = False
    deferred: bool = False
    failed: bool = False
    interrupted: bool = False
    started_at: datetime = field(default_factory=utcnow)


def fan_out_range(
    ctx: FanoutContext,
    registry: Registry,
    range_id: int,
    *,
    mail_on: bool,
    budget: float,
    me: str,
) -> RangeReport:
    """Fan out the range ``range_id``, claimed by ``me`` (:func:`claim_range`), within
    ``budget`` seconds; a failure is counted on the range as on an event (back-off, then a
    dead letter, which makes its event one)."""
    session = ctx.session
    report = RangeReport(range_id=range_id)
    try:
        piece = session.get_one(FanoutRange, range_id)
        report.event_id = piece.event_id
        event = session.get_one(Event, piece.event_id)
        _fan_out_range(ctx, registry, event, piece, report, mail_on=mail_on,
                       deadline=time.monotonic() + budget)
    except sa.exc.DBAPIError as error:
        if not error.connection_invalidated:
            _range_failed(session, me, range_id, error)
            report.failed = True
            return report
        # Not the range's fault (see dispatch): hand it back, burning no attempt.
        log.warning("wikinotify: lost the database during range %s: %s", range_id, error)
        session.rollback()
        session.execute(
            sa.update(FanoutRange)
            .where(FanoutRange.id == range_id, FanoutRange.claimed_by == me)
            .values(claimed_at=None, claimed_by=None)
        )
        session.commit()
        report.interrupted = True
    except Exception as error:  # the other ranges go on; this one backs off
        _range_failed(session, me, range_id, error)
        report.failed = True
    return report


def _fan_out_range(
    ctx: FanoutContext,
    registry: Registry,
    event: Event,
    piece: FanoutRange,
    report: RangeReport,
    *,
    mail_on: bool,
    deadline: float,
) -> None:
    session = ctx.session
    split = event.cursor or {}
    # A category switched off since the split (WIKINOTIFY_CATEGORIES) tells nobody more.
    category = registry.get(split.get("category", ""))
    run = _start(ctx, event, mail_on)
    run.taken = set(split.get("taken") or ())
    # The later ranges' bounds: a range whose own upper bound has left the category since
    # the split (an unwatch) stops at the next one, instead of walking on to the end.
    bounds = sa.select(FanoutRange.upper).where(
        FanoutRange.event_id == piece.event_id, FanoutRange.number > piece.number
    )
    later = {upper for upper in session.scalars(bounds) if upper is not None}
    after = piece.cursor or piece.lower
    with BatchWriter(run.app, session) as run.writer:
        while category is not None:
            if run.batches and time.monotonic() >= deadline:
                _settle(run)
                piece.cursor = after
                piece.claimed_at = None
                piece.claimed_by = None
                session.commit()
                report.written = run.written
                report.deferred = True
                return
            candidates = _candidates(ctx, category, event, after)
            batch, ends = _within(candidates, piece.upper, later)
            if not batch:
                break
            chosen = [r for r in decide(run, category, batch) if r.facts.id not in run.taken]
            after = batch[-1]
            if chosen:
                # Committed with the rows it covers, as an event's cursor is.
                moved = sa.update(FanoutRange).where(FanoutRange.id == piece.id)
                _write(run, category, chosen, moved.values(cursor=after),
                       alone=ends or len(candidates) < CANDIDATE_BATCH)
            run.batches += 1
            if ends or len(candidates) < CANDIDATE_BATCH:
                break
        _settle(run)
    report.written = run.written
    report.done = True
    report.processed = _finish_range(session, piece)


def _within(candidates: list[str], upper: str | None, later: set[str]) -> tuple[list[str], bool]:
    """The part of a batch inside the range, and whether the range ends in it: at its
    upper bound (included), or, if that has left the category, at a later range's bound
    (excluded; what lies between is the next range's too, and an entry written twice for
    one event is written once, §8.3)."""
    if upper is None:
        return candidates, False
    for index, candidate in enumerate(candidates):
        if candidate == upper:
            return candidates[: index + 1], True
        if candidate in later:
            return candidates[:index], True
    return candidates, False


def _finish_range(session: Session, piece: FanoutRange) -> bool:
    """Mark ``piece`` done; if it was its event's last, mark the event processed and
    delete its ranges, in the same transaction. Returns whether it was the last.

    The event's row is locked first (PostgreSQL), so the finishers of its last two ranges
    queue there, and the second sees the first's range done: exactly one of them finds
    none left. SQLite has one writer at a time, which the UPDATE of the range makes this
    transaction before it counts."""
    event_id = piece.event_id
    session.execute(sa.select(Event.id).where(Event.id == event_id).with_for_update())
    piece.done_at = utcnow()
    piece.claimed_at = None
    piece.claimed_by = None
    session.flush()
    left = session.scalar(
        sa.select(sa.func.count()).select_from(FanoutRange).where(
            FanoutRange.event_id == event_id, FanoutRange.done_at.is_(None)
        )
    )
    if not left:
        session.execute(
            sa.update(Event)
            .where(Event.id == event_id, Event.processed_at.is_(None))
            .values(processed_at=utcnow(), cursor=None)
        )
        session.execute(sa.delete(FanoutRange).where(FanoutRange.event_id == event_id))
    session.commit()
    return not left


def _range_failed(session: Session, me: str, range_id: int, error: BaseException) -> None:
    """A failed attempt at a range counts on the range; the range's last makes its event
    a dead letter, which Admin → Notifications lists and an administrator retries (the
    ranges already done stay done)."""
    if not _failed(session, me, range_id, error, FanoutRange):
        return
    number, event_id = session.execute(
        sa.select(FanoutRange.number, FanoutRange.event_id).where(FanoutRange.id == range_id)
    ).one()
    # The first range given up names the event's error; the others would only repeat it.
    session.execute(
        sa.update(Event)
        .where(Event.id == event_id, Event.failed_at.is_(None))
        .values(attempts=MAX_ATTEMPTS, failed_at=sa.text(dialects.now_sql(session)),
                error=f"range {number + 1}: {describe(error)}"[:ERROR_LENGTH])
    )
    session.commit()


@dataclass
class DispatchReport:
    claimed: int = 0
    finished: int = 0
    #: Events split into ranges, which ``fanout_range`` jobs fan out.
    split: int = 0
    deferred: int = 0
    #: Events whose attempt failed (backed off, or dead letters).
    failed: int = 0
    #: Whether the run ended early because the database connection was lost.
    interrupted: bool = False
    started_at: datetime = field(default_factory=utcnow)


def dispatch(
    ctx: FanoutContext,
    registry: Registry,
    *,
    mail_on: bool,
    budget: float,
    stale_after: timedelta,
    me: str | None = None,
) -> DispatchReport:
    """One run: claim a batch of events and fan each out within ``budget`` seconds."""
    session = ctx.session
    me = me or worker_id()
    deadline = time.monotonic() + budget
    report = DispatchReport()
    for event_id in claim_events(session, me=me, stale_after=stale_after):
        report.claimed += 1
        try:
            # Claimed just now by this run, so it is there (else: a failed attempt).
            event = session.get_one(Event, event_id)
            categories = registry.listening(event.kind, event.origin)
            finished = fan_out(ctx, event, categories, mail_on=mail_on, deadline=deadline)
        except sa.exc.DBAPIError as error:
            if not error.connection_invalidated:
                _failed(session, me, event_id, error)
                report.failed += 1
                continue
            # The database connection went away (a restart, a failover): not this
            # event's fault. Hand every claim back, burning no attempt, and end the run;
            # the next one resumes from the saved cursor.
            log.warning("wikinotify: lost the database during event %s: %s", event_id, error)
            session.rollback()
            _release_rest(session, me, None)
            report.interrupted = True
            break
        except Exception as error:  # one bad event never stops the batch
            _failed(session, me, event_id, error)
            report.failed += 1
            continue
        if finished and event.ranges:
            report.split += 1
        elif finished:
            report.finished += 1
        else:
            report.deferred += 1
            _release_rest(session, me, event_id)
            break
    return report


def describe(error: BaseException) -> str:
    """What Admin → Notifications shows of a failed attempt: the exception's class and
    message, never the statement or its parameter values (a snapshot may hold page
    text). A database error is described by the driver's error, whose message names
    the problem, not the values."""
    cause = getattr(error, "orig", None) or error
    lines = str(cause).strip().splitlines()
    message = lines[0] if lines else ""
    return f"{type(cause).__name__}: {message}"[:ERROR_LENGTH]


def backoff(attempts: int) -> timedelta:
    """How long an event waits after its ``attempts``-th failure: 1, 2, 4, 8 minutes."""
    factor: int = 2 ** (attempts - 1)  # attempts >= 1: an int (typeshed says Any)
    return FIRST_BACKOFF * factor


def _failed(
    session: Session,
    me: str,
    row_id: int,
    error: BaseException,
    model: type[Event] | type[FanoutRange] = Event,
) -> bool:
    """Roll back the failed event's (or range's) uncommitted work, count the attempt and
    record the error; release the claim with a back-off, or after :data:`MAX_ATTEMPTS`,
    make it a dead letter that only an administrator's retry brings back. Returns whether
    it is one now."""
    what = "event" if model is Event else "range"
    log.warning("wikinotify: fan-out of %s %s failed: %s", what, row_id, describe(error))
    session.rollback()
    attempts = session.execute(
        sa.select(model.attempts).where(model.id == row_id)
    ).scalar_one() + 1
    dead = attempts >= MAX_ATTEMPTS
    now = sa.text(dialects.now_sql(session))
    later = sa.text(dialects.now_plus_sql(session, "backoff")).bindparams(
        backoff=backoff(attempts).total_seconds()
    )
    result = session.execute(
        sa.update(model)
        .where(model.id == row_id, model.claimed_by == me)
        .values(attempts=attempts, error=describe(error), claimed_at=None, claimed_by=None,
                retry_after=None if dead else later, failed_at=now if dead else None)
    )
    session.commit()
    # Not a dead letter of ours if the claim had been taken over meanwhile.
    return dead and dialects.rowcount(result) > 0


def _release_rest(session: Session, me: str, deferred_id: int | None) -> None:
    """The run ends early: hand back this run's other claimed events too, so the next run
    takes them at once instead of waiting for the claims to go stale."""
    query = sa.update(Event).where(Event.claimed_by == me, Event.processed_at.is_(None))
    if deferred_id is not None:
        query = query.where(Event.id != deferred_id)
    session.execute(query.values(claimed_at=None, claimed_by=None))
    session.commit()
