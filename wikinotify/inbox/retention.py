"""Retention (docs/rules.md#retention): entries past ``retention_days`` go, read or not, and
processed outbox events go after a day (long enough to debug a notification that did not arrive).

Each batch is one ``DELETE … WHERE id IN (SELECT id … ORDER BY <time> LIMIT n)`` in a
transaction of its own, walking the index on that time from the oldest row: no purge
reads the whole table, and none holds its locks for long.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .. import dialects
from ..categories import announcement
from ..models import MAIL_NOT_SENT, Event, Notification

#: Rows deleted per statement, each in its own transaction, so no purge holds long locks.
BATCH = 5_000
#: How long a processed event is kept.
EVENT_RETENTION = timedelta(days=1)


def one_batch(session: Session, model: type[Event] | type[Notification],
              ids: sa.Select[Any]) -> sa.ColumnElement[bool]:
    """``model``'s rows whose ids ``ids`` (a limited SELECT) finds: a batched DELETE's WHERE."""
    if dialects.is_postgresql(session):
        # `id = ANY(ARRAY(…))`: the batch's ids are found once, then each row by its key.
        # Written `id IN (SELECT …)`, PostgreSQL joins the subquery to a scan of the whole
        # table, and every batch would read all of it.
        return model.id == sa.any_(sa.func.array(ids.scalar_subquery()))
    return model.id.in_(ids)


def _delete_in_batches(
    session: Session,
    model: type[Event] | type[Notification],
    old: sa.ColumnElement[bool],
    by: sa.ColumnExpressionArgument[Any],
    batch: int,
) -> int:
    """Delete ``model``'s rows matching ``old``, oldest ``by`` first, ``batch`` at a time."""
    oldest = sa.select(model.id).where(old).order_by(by).limit(batch)
    statement = sa.delete(model).where(one_batch(session, model, oldest))
    deleted = 0
    while True:
        count = dialects.rowcount(session.execute(statement))
        session.commit()
        deleted += count
        if count < batch:
            return deleted


def purge(
    session: Session, *, now: datetime, retention_days: int, batch: int = BATCH
) -> dict[str, int]:
    """Delete what retention says is gone; returns how many of each."""
    # From the entry's last update, not its creation: a busy unread entry is still in use.
    updated = Notification.updated_at
    # An entry whose mail still waits is kept until it goes: a weekly digest holds its rows
    # up to 7 days, and retention may be as short as 2.
    entries = sa.and_(updated < now - timedelta(days=retention_days),
                      Notification.email_state.not_in(MAIL_NOT_SENT))
    processed = Event.processed_at
    # An announcement's event is its record (docs/rules.md#announcements): kept as long as
    # its entries, so it can be listed and withdrawn while anyone may still read it.
    kept_longer = sa.and_(Event.kind == announcement.KIND,
                          processed >= now - timedelta(days=retention_days))
    events = sa.and_(processed.is_not(None), processed < now - EVENT_RETENTION, ~kept_longer)
    return {
        "entries": _delete_in_batches(session, Notification, entries, updated, batch),
        "events": _delete_in_batches(session, Event, events, processed, batch),
    }
