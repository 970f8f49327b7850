"""Announcements (docs/rules.md#announcements): publishing one is emitting one event, and
that event row is the announcement's record, listed and withdrawn from here.

Publishing writes one row (``emit``'s INSERT into ``wikinotify_events``) in the request's
transaction, keyed by a random key so the outbox's ``(kind, key)`` index lists them;
retention keeps an announcement's event as long as its entries
(:func:`wikinotify.inbox.retention.purge`). Withdrawing stamps the event (the fan-out asks
before each batch, so a running one stops) and deletes its unread entries, their pending
mail with them; read entries stay where their readers left them.

A batch chosen before the stamp may still commit after the DELETE: its entries are for a
withdrawn announcement all the same, and :func:`withdrawn_entries` is the one rule every
place that shows or sends an entry asks (the inbox, the feed, the mail run, push, webhooks
and chat at send time, undo), so nobody sees or is sent them.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .categories.announcement import (
    KEY,
    KIND,
    SNAPSHOT_GROUPS,
    WITHDRAWN,
    audience_groups,
)
from .emit import emit
from .inbox import read_marks
from .inbox.retention import one_batch, written_before
from .models import Event, Notification, NotificationRow, utcnow

#: The longest title, body and list of groups an announcement may have: the title is a
#: mail's subject and an inbox line, the body a few paragraphs.
TITLE_LENGTH = 200
BODY_LENGTH = 5000
GROUPS = 50
#: The newest announcements the list shows.
LISTED = 100
#: How much earlier than its event an entry may say it was written: the event's time is
#: the publishing server's clock, the entry's the worker's. Only there so the DELETE reads
#: the entries written since (by their ids); the entries are matched by their event.
CLOCKS_APART = timedelta(days=1)


@dataclass(frozen=True)
class Announcement:
    """One announcement as the admin page and the API list it (dumped by
    :class:`wikinotify.schemas.announcements.AnnouncementSchema`)."""

    id: int
    title: str
    body: str
    important: bool
    site_id: str | None
    groups: list[str] | None
    author_id: str | None
    created_at: datetime
    withdrawn_at: str | None
    state: str

    @property
    def audience(self) -> dict[str, Any]:
        return {"everyone": True} if self.groups is None else {"groups": self.groups}


def publish(*, author_id: str, site_id: str | None, title: str, body: str,
            groups: Sequence[str] | None, important: bool) -> int | None:
    """Emit the announcement: one INSERT in the caller's transaction. ``None`` when
    nothing was written (the site's notifications are switched off)."""
    audience = {"everyone": True} if groups is None else {"groups": list(groups)}
    snapshot: dict[str, Any] = {"title": title, "body": body, "important": important}
    if groups is not None:
        # Copied to each entry, so showing or mailing it asks again whether its reader is
        # still in one of them (docs/rules.md#announcements).
        snapshot[SNAPSHOT_GROUPS] = list(groups)
    return emit(KIND, site_id=site_id, actor_id=author_id, key=secrets.token_urlsafe(18),
                snapshot=snapshot, audience=audience)


def _state(event: Event) -> str:
    if (event.data or {}).get(WITHDRAWN):
        return "withdrawn"
    if event.failed_at is not None:
        return "failed"
    if event.processed_at is not None:
        return "sent"
    return "sending" if event.claimed_at is not None or event.ranges else "waiting"


def _shown(event: Event) -> Announcement:
    data = event.data or {}
    snapshot = data.get("snapshot") or {}
    groups = audience_groups(data)
    return Announcement(
        id=event.id, title=str(snapshot.get("title") or ""), body=str(snapshot.get("body") or ""),
        important=bool(snapshot.get("important")), site_id=event.site_id,
        groups=None if groups is None else [str(g) for g in data["audience"]["groups"]],
        author_id=event.actor_id, created_at=event.created_at,
        withdrawn_at=data.get(WITHDRAWN), state=_state(event))


def _announcements() -> list[sa.ColumnElement[bool]]:
    # key IS NOT NULL: the outbox's (kind, key) index, which every announcement has.
    return [Event.kind == KIND, Event.key.is_not(None)]


def listed(session: Session, *, limit: int = LISTED) -> list[Announcement]:
    """The newest announcements, withdrawn ones included."""
    query = sa.select(Event).where(*_announcements()).order_by(Event.id.desc()).limit(limit)
    return [_shown(event) for event in session.scalars(query)]


def find(session: Session, announcement_id: int) -> Announcement | None:
    event = session.scalar(sa.select(Event).where(*_announcements(), Event.id == announcement_id))
    return None if event is None else _shown(event)


#: Unread entries one withdrawal deletes per statement, each batch its own transaction and
#: its readers told after its commit (docs/rules.md#announcements): one statement and one
#: Redis call for a whole audience outlived the request's quick Redis timeout.
WITHDRAW_BATCH = 500


def withdraw(session: Session, announcement_id: int,
             told: Callable[[list[str]], None] = lambda readers: None) -> int | None:
    """Stamp the announcement withdrawn and delete its unread entries (their pending mail
    goes with them), ``WITHDRAW_BATCH`` at a time, committing each batch and then calling
    ``told`` with the readers whose inbox it changed; ``None`` if there is no such
    announcement, else how many entries went. An entry a running fan-out writes after this
    is neither shown nor sent (:func:`withdrawn_entries`). The stamp is committed with the
    first batch."""
    event = session.scalar(sa.select(Event).where(*_announcements(),
                                                  Event.id == announcement_id))
    if event is None:
        return None
    if not (event.data or {}).get(WITHDRAWN):
        event.data = {**event.data, WITHDRAWN: utcnow().isoformat()}
    # Its entries are the ones its event wrote (announcements never coalesce); the bound
    # on their ids lets the primary key read only what was written since, not the whole
    # table.
    unread = sa.select(Notification.id).where(
        Notification.id >= written_before(session, event.created_at - CLOCKS_APART),
        Notification.category == KEY, Notification.last_event_id == event.id,
        read_marks.unread(Notification)).limit(WITHDRAW_BATCH)
    statement = (sa.delete(Notification).where(one_batch(session, Notification, unread))
                 .returning(Notification.user_id))
    removed = 0
    while True:
        readers = list(session.scalars(statement))
        session.commit()
        removed += len(readers)
        if readers:
            told(readers)
        if len(readers) < WITHDRAW_BATCH:
            return removed


def withdrawn_events(session: Session, event_ids: Iterable[int]) -> set[int]:
    """Which of ``event_ids`` are withdrawn announcements: one look-up by primary key."""
    wanted = sorted(set(event_ids))
    if not wanted:
        return set()
    rows = session.execute(sa.select(Event.id, Event.data).where(
        Event.id.in_(wanted), Event.kind == KIND))
    return {event_id for event_id, data in rows if (data or {}).get(WITHDRAWN)}


def withdrawn_entries(session: Session, entries: Iterable[NotificationRow]) -> set[int]:
    """The ids of those ``entries`` whose announcement is withdrawn: not shown, not
    counted, not mailed, pushed or posted, not brought back by an undo
    (docs/rules.md#announcements). One query, and none when no entry is an
    announcement's."""
    theirs = [e for e in entries if e.category == KEY]
    gone = withdrawn_events(session, (e.last_event_id for e in theirs))
    return {e.id for e in theirs if e.last_event_id in gone}
