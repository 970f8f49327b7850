"""Retention (§12.3): entries past ``retention_days`` go, read or not, and processed
outbox events go after a day (long enough to debug a notification that did not arrive)."""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .models import Event, Notification

#: Rows deleted per statement, each in its own transaction, so no purge holds long locks.
BATCH = 10_000
#: How long a processed event is kept.
EVENT_RETENTION = timedelta(days=1)


def _delete_in_batches(session: Session, model, old: sa.ColumnElement, batch: int) -> int:
    deleted = 0
    while True:
        ids = list(session.scalars(sa.select(model.id).where(old).limit(batch)))
        if not ids:
            return deleted
        session.execute(sa.delete(model).where(model.id.in_(ids)))
        session.commit()
        deleted += len(ids)
        if len(ids) < batch:
            return deleted


def purge(
    session: Session, *, now: datetime, retention_days: int, batch: int = BATCH
) -> dict[str, int]:
    """Delete what retention says is gone; returns how many of each."""
    # From the entry's last update, not its creation: a busy unread entry is still in use.
    entries = Notification.updated_at < now - timedelta(days=retention_days)
    events = sa.and_(Event.processed_at.is_not(None), Event.processed_at < now - EVENT_RETENTION)
    return {
        "entries": _delete_in_batches(session, Notification, entries, batch),
        "events": _delete_in_batches(session, Event, events, batch),
    }
