"""Retention (docs/rules.md#retention): entries past ``retention_days`` go, read or not, and
processed outbox events go after a day (long enough to debug a notification that did not arrive).

Each batch is one ``DELETE … WHERE id IN (SELECT id … ORDER BY … LIMIT n)`` in a
transaction of its own, walking an index from the oldest row (the events' on their
processing time, the entries' primary key, see :func:`written_before`): no purge reads
the whole table, and none holds its locks for long.
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
    model: type[Event],
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


def written_before(session: Session, when: datetime) -> int:
    """An entry id below which every entry was written before ``when`` (one past the
    largest id if all were; 0 on an empty table), found by bisecting the primary key.

    Entries are numbered in the order they are written, so the primary key is the
    table's index on creation time, and the walks that need one (retention, withdrawing
    an announcement) use it: an index on time of their own was a fourth entry written
    for every row the fan-out writes and, worse, for every row "mark all read" marks (a
    read entry is a new row version, in every index), and it was most of the cost of
    marking a large inbox (docs/benchmarks.md#the-inbox-at-scale). Clocks of two
    workers a few seconds apart, or an entry an undo put back under a new id (SQLite),
    make the order approximate, and the walks are only bounded by it: such an entry is
    reached by a later one."""
    low, high = session.execute(sa.select(sa.func.min(Notification.id),
                                          sa.func.max(Notification.id))).one()
    if low is None:
        return 0
    first_at = sa.select(Notification.created_at).order_by(Notification.id).limit(1)
    # The smallest id from which the first entry was written at or after ``when``.
    below, above = int(low), int(high) + 1
    while below < above:
        middle = (below + above) // 2
        at = session.scalar(first_at.where(Notification.id >= middle))
        if at is None or at >= when:  # None: the last ones were deleted meanwhile
            above = middle
        else:
            below = middle + 1
    return below


def _purge_entries(session: Session, cutoff: datetime, batch: int) -> int:
    """Delete the entries past ``cutoff``, walking the primary key from the oldest up to
    those written since (:func:`written_before`): each batch goes on from the last one's
    largest id, so an entry kept (busy, or its mail waiting) is read once a purge."""
    old = sa.and_(
        Notification.id < written_before(session, cutoff),
        # From the entry's last update, not its creation: a busy unread entry is still in
        # use.
        Notification.updated_at < cutoff,
        # An entry whose mail still waits is kept until it goes: a weekly digest holds its
        # rows up to 7 days, and retention may be as short as 2.
        Notification.email_state.not_in(MAIL_NOT_SENT),
    )
    deleted, after = 0, 0
    while True:
        oldest = (sa.select(Notification.id).where(old, Notification.id > after)
                  .order_by(Notification.id).limit(batch))
        gone = session.scalars(sa.delete(Notification)
                               .where(one_batch(session, Notification, oldest))
                               .returning(Notification.id)).all()
        session.commit()
        deleted += len(gone)
        if len(gone) < batch:
            return deleted
        after = max(gone)


def purge(
    session: Session, *, now: datetime, retention_days: int, batch: int = BATCH
) -> dict[str, int]:
    """Delete what retention says is gone; returns how many of each."""
    processed = Event.processed_at
    # An announcement's event is its record (docs/rules.md#announcements): kept as long as
    # its entries, so it can be listed and withdrawn while anyone may still read it.
    kept_longer = sa.and_(Event.kind == announcement.KIND,
                          processed >= now - timedelta(days=retention_days))
    events = sa.and_(processed.is_not(None), processed < now - EVENT_RETENTION, ~kept_longer)
    return {
        "entries": _purge_entries(session, now - timedelta(days=retention_days), batch),
        "events": _delete_in_batches(session, Event, events, processed, batch),
    }
