"""Claiming the fan-out's work: the events of the outbox, and the ranges of a split event.

The interface the rest of :mod:`wikinotify.pipeline` uses: :func:`claim_events` and
:func:`claim_range` take work under a lease measured by the database's clock,
:func:`events_waiting` and :func:`ranges_waiting` say whether any is free,
:func:`unclaim`, :func:`release_events` and :func:`release_range` hand a claim back. A
failed attempt is recorded by :mod:`wikinotify.pipeline.failures`.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .. import dialects
from ..models import Event, FanoutRange

#: Events claimed per run, oldest first (§7.1).
CLAIM_BATCH = 50


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


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


def unclaim(row: Event | FanoutRange) -> None:
    """Free ``row`` for the next run (committed with the caller's transaction)."""
    row.claimed_at = None
    row.claimed_by = None


def release_range(session: Session, me: str, range_id: int) -> None:
    """Hand the range back if ``me`` still holds it, burning no attempt, and commit."""
    session.execute(
        sa.update(FanoutRange)
        .where(FanoutRange.id == range_id, FanoutRange.claimed_by == me)
        .values(claimed_at=None, claimed_by=None)
    )
    session.commit()


def release_events(session: Session, me: str, deferred_id: int | None) -> None:
    """The run ends early: hand back this run's other claimed events too, so the next run
    takes them at once instead of waiting for the claims to go stale."""
    query = sa.update(Event).where(Event.claimed_by == me, Event.processed_at.is_(None))
    if deferred_id is not None:
        query = query.where(Event.id != deferred_id)
    session.execute(query.values(claimed_at=None, claimed_by=None))
    session.commit()
