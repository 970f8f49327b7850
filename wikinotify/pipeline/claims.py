"""Claiming the fan-out's work: the events of the outbox, and the ranges of a split event.

The interface the rest of :mod:`wikinotify.pipeline` uses: :func:`claim_events` and
:func:`claim_range` take work under a lease measured by the database's clock (through
:mod:`wikinotify.workqueue`),
:func:`events_waiting` and :func:`ranges_waiting` say whether any is free,
:func:`unclaim`, :func:`release_events` and :func:`release_range` hand a claim back,
:func:`mark_processed` ends an event's. A failed attempt is recorded by
:mod:`wikinotify.pipeline.failures`.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .. import workqueue
from ..models import Event, FanoutRange, utcnow

#: Events claimed per run, oldest first (docs/rules.md#claiming-events).
CLAIM_BATCH = 50


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


#: What a worker may claim, an event or a range of one: not a dead letter, out of its
#: back-off, and either unclaimed or claimed longer ago than the stale threshold (its
#: worker died; ``:stale`` is minus that threshold, in seconds). Every time is the
#: database's (:mod:`wikinotify.workqueue`): a worker whose clock is wrong can neither
#: steal a fresh claim nor skip a back-off.
_OPEN = """failed_at IS NULL
    AND (retry_after IS NULL OR retry_after <= {now})
    AND (claimed_at IS NULL OR claimed_at < {now+:stale})"""

#: Up to ``:batch`` events, oldest first: unprocessed, and not split (its ranges are
#: claimed instead).
EVENTS = workqueue.Claim(
    table="wikinotify_events",
    free="processed_at IS NULL AND ranges IS NULL AND " + _OPEN,
    order_by="created_at, id",
    limit=":batch",
    take="claimed_at = {now}, claimed_by = :me",
)

#: One range of a split event, not done: the first of the oldest split event.
RANGES = workqueue.Claim(
    table="wikinotify_fanout_ranges",
    free="done_at IS NULL AND " + _OPEN,
    order_by="event_id, number",
    limit="1",
    take="claimed_at = {now}, claimed_by = :me",
)


def claim_events(
    session: Session, *, me: str, stale_after: timedelta, batch: int = CLAIM_BATCH
) -> list[int]:
    """Claim up to ``batch`` claimable events, taking over claims older than
    ``stale_after`` by the database's clock (their worker died), and commit the claim."""
    params = {"me": me, "stale": -stale_after.total_seconds(), "batch": batch}
    ids = session.scalars(EVENTS.statement(session), params).all()
    session.commit()
    return sorted(ids)


def events_waiting(session: Session, *, stale_after: timedelta) -> bool:
    """Whether any event is free to claim now."""
    return EVENTS.waiting(session, stale=-stale_after.total_seconds())


def claim_range(session: Session, *, me: str, stale_after: timedelta) -> int | None:
    """Claim one claimable range of a split event (a lapsed lease is taken over, by the
    database's clock) and commit the claim; its id, or ``None`` if none is free."""
    params = {"me": me, "stale": -stale_after.total_seconds()}
    range_id = session.scalar(RANGES.statement(session), params)
    session.commit()
    return int(range_id) if range_id is not None else None


def ranges_waiting(session: Session, *, stale_after: timedelta) -> bool:
    """Whether any range of a split event is free to claim now."""
    return RANGES.waiting(session, stale=-stale_after.total_seconds())


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


def mark_processed(event_id: int) -> sa.Update:
    """The statement that marks the event processed, its cursor cleared (an event not
    already marked). A statement rather than the ORM's flush of the loaded event, so that
    the worker compiles it before it forks (:mod:`wikinotify.pipeline.warm`): the flush
    was compiled again in every work horse, some 3 ms at the end of each fan-out."""
    return (
        sa.update(Event)
        .where(Event.id == event_id, Event.processed_at.is_(None))
        .values(processed_at=utcnow(), cursor=None)
    )


def release_events(session: Session, me: str, deferred_id: int | None) -> None:
    """The run ends early: hand back this run's other claimed events too, so the next run
    takes them at once instead of waiting for the claims to go stale."""
    query = sa.update(Event).where(Event.claimed_by == me, Event.processed_at.is_(None))
    if deferred_id is not None:
        query = query.where(Event.id != deferred_id)
    session.execute(query.values(claimed_at=None, claimed_by=None))
    session.commit()
