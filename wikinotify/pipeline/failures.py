"""A failed attempt at the fan-out's work: counted on the event (or the range), backed off,
and after :data:`RETRY`'s attempts a dead letter, which Admin → Notifications lists and an
administrator retries."""

from __future__ import annotations

import logging
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .. import dialects, workqueue
from ..models import Event, FanoutRange

log = logging.getLogger(__name__)

#: Five failed attempts make an event (or a range) a dead letter; the wait after each
#: doubles from a minute; an error is kept to 1,000 characters.
RETRY = workqueue.RetryPolicy(
    attempts=5, waits=tuple(timedelta(minutes=m) for m in (1, 2, 4, 8)))


def describe(error: BaseException) -> str:
    """What Admin → Notifications shows of a failed attempt: the exception's class and
    message, never the statement or its parameter values (a snapshot may hold page
    text). A database error is described by the driver's error, whose message names
    the problem, not the values."""
    cause = getattr(error, "orig", None) or error
    lines = str(cause).strip().splitlines()
    message = lines[0] if lines else ""
    return f"{type(cause).__name__}: {message}"


def record_failure(
    session: Session,
    me: str,
    row_id: int,
    error: BaseException,
    model: type[Event] | type[FanoutRange] = Event,
) -> bool:
    """Roll back the failed event's (or range's) uncommitted work, count the attempt and
    record the error; release the claim with a back-off, or after :data:`RETRY`'s
    attempts, make it a dead letter that only an administrator's retry brings back. Returns whether
    it is one now."""
    what = "event" if model is Event else "range"
    log.warning("wikinotify: fan-out of %s %s failed: %s", what, row_id, describe(error))
    session.rollback()
    attempts = session.execute(
        sa.select(model.attempts).where(model.id == row_id)
    ).scalar_one() + 1
    wait = RETRY.retry_in(attempts)
    dead = wait is None
    later = None if wait is None else sa.text(
        dialects.now_plus_sql(session, "backoff")).bindparams(backoff=wait.total_seconds())
    result = session.execute(
        sa.update(model)
        .where(model.id == row_id, model.claimed_by == me)
        .values(attempts=attempts, error=RETRY.error(describe(error)), claimed_at=None,
                claimed_by=None, retry_after=later,
                failed_at=sa.text(dialects.now_sql(session)) if dead else None)
    )
    session.commit()
    # Not a dead letter of ours if the claim had been taken over meanwhile.
    return dead and dialects.rowcount(result) > 0


def range_failed(session: Session, me: str, range_id: int, error: BaseException) -> bool:
    """A failed attempt at a range counts on the range; the range's last makes its event
    a dead letter, which Admin → Notifications lists and an administrator retries (the
    ranges already done stay done). Returns whether it made the event one."""
    if not record_failure(session, me, range_id, error, FanoutRange):
        return False
    number, event_id = session.execute(
        sa.select(FanoutRange.number, FanoutRange.event_id).where(FanoutRange.id == range_id)
    ).one()
    # The first range given up names the event's error; the others would only repeat it.
    made = session.execute(
        sa.update(Event)
        .where(Event.id == event_id, Event.failed_at.is_(None))
        .values(attempts=RETRY.attempts, failed_at=sa.text(dialects.now_sql(session)),
                error=RETRY.error(f"range {number + 1}: {describe(error)}"))
    )
    session.commit()
    return dialects.rowcount(made) > 0
