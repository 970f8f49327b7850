"""Undo (docs/rules.md#undo): dismissing an entry and marking all read answer a token that
puts the entries back as they were.

The token carries what the undo needs, so nothing is kept on the server for it: no table,
no soft-deleted rows for every query to step around, nothing for retention to purge. It
is sealed (Fernet: encrypted and authenticated) under a key derived from the app's
``SECRET_KEY`` for undo alone (rotating the key ends the undo windows with the sessions,
as it should: the token belongs to a session's moment), names its user, and lives
:data:`UNDO_SECONDS`. Sealed, not just signed: a dismissed row holds what the client must
not read (the snapshot's title and excerpt withheld for a page she can no longer read,
the SMTP error meant for admins).

- A dismissal's token holds the row itself, every column: the undo inserts it again with
  its own id, read state, seen time and mail state. Inserting an id that is back already
  does nothing, so an undo is idempotent.
- A "mark all read" token holds the read time it stamped (the rows are those the user
  still has read at that very time) and the ids of the mails the reading cancelled, at
  most :data:`MAX_MAILS`: the undo makes the rows unread and those mails pending again.
  A row read since, or made unread, no longer matches: idempotent too.

One unread entry per (user, group key) (docs/rules.md#coalescing-is-idempotency): an entry
whose newer twin took the slot while it was read or gone comes back read; the twin carries
on, and later events join it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy.orm import Session

from .. import dialects
from ..announcements import withdrawn_events
from ..categories.announcement import KEY
from ..models import MAIL_NOT_SENT, EmailState, Notification, UTCDateTime, utcnow
from ..outbound.secrets_box import derive
from . import read_marks
from .entries import mark_all_read, no_unread_twin, take, unread_on_site, unread_with_key

#: HKDF's ``info`` for the undo tokens' key: of no use for anything else.
INFO = b"wikinotify undo tokens"
VERSION = 1
#: How long an undo token works. Long enough to notice a slip (the page shows its
#: Undo for a few seconds; a reader who tabs away and back still has it); short, because
#: the world moves on: the entry's page may change, its mail's time pass, retention
#: reach it. Five minutes also bounds what a token seen over a shoulder can do.
UNDO_SECONDS = 300
#: At most this many cancelled mails come back with a "mark all read": the token stays a
#: few kB. A reader with more pending mail than this (a weekly digest's worth) gets her
#: entries back unread, the mails past these stay cancelled.
MAX_MAILS = 200

#: The columns a dismissal's token carries: all of them.
_COLUMNS = tuple(c.key for c in Notification.__table__.columns)
_TIMES = frozenset(c.key for c in Notification.__table__.columns
                   if isinstance(c.type, UTCDateTime))


class BadToken(ValueError):
    """Not an undo token of this user's, or its time is over; deliberately says no more."""


@dataclass(frozen=True)
class Undone:
    #: How many entries came back.
    restored: int


def _box(secret: str | bytes) -> Fernet:
    return derive(secret, INFO)


def _token(secret: str | bytes, user_id: str, what: dict[str, Any]) -> str:
    plain = json.dumps({"v": VERSION, "u": user_id, **what}, separators=(",", ":"))
    return _box(secret).encrypt(plain.encode()).decode("ascii")


def _read(secret: str | bytes, user_id: str, token: str) -> dict[str, Any]:
    try:
        payload = json.loads(_box(secret).decrypt(token.encode(), ttl=UNDO_SECONDS))
    except (InvalidToken, ValueError, UnicodeError):
        raise BadToken() from None
    if not (isinstance(payload, dict) and payload.get("v") == VERSION
            and payload.get("u") == user_id):
        raise BadToken()
    return payload


def dismiss(session: Session, secret: str | bytes, user_id: str, entry_id: int) -> str | None:
    """Delete one of the user's entries and answer its undo token; ``None`` if they have
    no such entry."""
    # The read time she sees: a row her read mark covers comes back read.
    read_at = session.scalar(sa.select(read_marks.effective_read_at(Notification, user_id)).where(
        Notification.user_id == user_id, Notification.id == entry_id))
    row = take(session, user_id, entry_id)
    if row is None:
        return None
    content = {k: (row[k].isoformat() if k in _TIMES and row[k] is not None else row[k])
               for k in _COLUMNS}
    content["read_at"] = read_at.isoformat() if read_at is not None else None
    return _token(secret, user_id, {"d": content})


def mark_all_read_undoably(
    session: Session, secret: str | bytes, user_id: str, site_id: str | None,
    page_id: str | None = None,
) -> tuple[int, str]:
    """:func:`~wikinotify.inbox.entries.mark_all_read`, and its undo token."""
    # Her earlier mark first (it takes the mark before any entry row: the lock order of
    # wikinotify.inbox.read_marks, whose new-entries lock comes before both); mark_all_read
    # finds none left.
    if page_id is None:
        read_marks.placing_a_mark(session)
    read_marks.settle_mine(session, user_id)
    mails = session.scalars(
        sa.select(Notification.id)
        .where(*unread_on_site(user_id, site_id, page_id),
               Notification.email_state == EmailState.PENDING)
        .order_by(Notification.id)
        .limit(MAX_MAILS)
        # Not claimed by a mail run between this read and the write below.
        .with_for_update()
    ).all()
    at = utcnow()
    count = mark_all_read(session, user_id, site_id, page_id=page_id, at=at)
    return count, _token(secret, user_id, {"r": at.isoformat(), "m": list(mails)})


def undo(session: Session, secret: str | bytes, user_id: str, token: str) -> Undone:
    """Put back what ``token`` took away (:class:`BadToken` if it is not the user's or
    its time is over). Idempotent: a second undo finds everything back already."""
    payload = _read(secret, user_id, token)
    if isinstance(payload.get("d"), dict):
        return Undone(_restore_row(session, user_id, payload["d"]))
    if isinstance(payload.get("r"), str) and isinstance(payload.get("m"), list):
        return Undone(_unread_again(session, user_id, datetime.fromisoformat(payload["r"]),
                                    [i for i in payload["m"] if isinstance(i, int)]))
    raise BadToken()


def _restore_row(session: Session, user_id: str, content: dict[str, Any]) -> int:
    values = {k: (datetime.fromisoformat(v) if k in _TIMES and v is not None else v)
              for k, v in content.items() if k in _COLUMNS}
    values["user_id"] = user_id  # the token's user, which is the caller: never another's
    back = session.scalar(sa.select(Notification.id).where(
        Notification.user_id == user_id, Notification.group_key == values["group_key"],
        Notification.last_event_id == values["last_event_id"],
        Notification.created_at == values["created_at"]))
    if back is not None:
        return 0  # back already (its id may differ: see below)
    if content.get("category") == KEY and withdrawn_events(session,
                                                            [int(content["last_event_id"])]):
        return 0  # its announcement was withdrawn since: it stays gone
    if session.get(Notification, values["id"]) is not None:
        # SQLite hands a deleted row's id to the next one when it was the largest:
        # the entry comes back under a new id.
        del values["id"]
    if values["email_state"] == EmailState.SENDING:
        # Its mail run's lease is stale and its claim gone with the row: skipped, not
        # pending, since that run may have sent it (a resend is worse than a lost mail).
        values["email_state"] = EmailState.SKIPPED
    if values["read_at"] is None:
        read_marks.settle_mine(session, user_id)  # or her mark would cover it
    if values["read_at"] is None and _twin_unread(session, user_id, str(values["group_key"])):
        # Its slot is taken: it comes back read, as reading it would have left it.
        values["read_at"] = utcnow()
        if values["email_state"] in MAIL_NOT_SENT:
            values["email_state"] = EmailState.SKIPPED
    inserted = session.scalar(
        dialects.insert(session, Notification).values(**values).on_conflict_do_nothing()
        .returning(Notification.id)
    )
    return 0 if inserted is None else 1


def _twin_unread(session: Session, user_id: str, group_key: str) -> bool:
    return session.scalar(sa.select(Notification.id).where(
        *unread_with_key(Notification, user_id, group_key))) is not None


def _unread_again(session: Session, user_id: str, at: datetime, mails: list[int]) -> int:
    mail_back = sa.and_(Notification.id.in_(mails),
                        Notification.email_state == EmailState.SKIPPED)
    released = _release_mark(session, user_id, at, mail_back)
    marked = (Notification.user_id == user_id, Notification.read_at == at)
    # A withdrawn announcement's entry stays read, its mail cancelled.
    gone = withdrawn_events(session, session.scalars(sa.select(Notification.last_event_id)
                                                     .where(*marked,
                                                            Notification.category == KEY)))
    return released + dialects.rowcount(session.execute(
        sa.update(Notification)
        .where(*marked, no_unread_twin(user_id),
               sa.or_(Notification.category != KEY, Notification.last_event_id.not_in(gone)))
        .values(read_at=None, email_state=sa.case(
            (mail_back, EmailState.PENDING), else_=Notification.email_state))
    ))


def _release_mark(session: Session, user_id: str, at: datetime,
                  mail_back: sa.ColumnElement[bool]) -> int:
    """Delete the token's read mark if the job has not finished with it (the entries it
    still holds read are unread again: how many), its cancelled mails pending again.
    Another mark of hers (a later "mark all read") is written onto its rows instead, so
    that the rows stamped ``at`` can be unread again (docs/rules.md#read-marks)."""
    mark = read_marks.lock_mine(session, user_id)
    if mark is None:
        return 0
    if mark.read_at != at:
        read_marks.settle_mine(session, user_id)
        return 0
    covered = read_marks.covered_by(mark)
    # A withdrawn announcement it covers stays read: stamped as the job would have, the
    # update after this leaves it so.
    gone = withdrawn_events(session, session.scalars(sa.select(Notification.last_event_id)
                                                     .where(*covered,
                                                            Notification.category == KEY)))
    if gone:
        session.execute(sa.update(Notification).where(
            *covered, Notification.category == KEY, Notification.last_event_id.in_(gone),
        ).values(**read_marks.read_values(at)))
    released = session.scalar(sa.select(sa.func.count()).select_from(Notification)
                              .where(*covered)) or 0
    session.execute(sa.update(Notification).where(*covered, mail_back)
                    .values(email_state=EmailState.PENDING))
    session.delete(mark)
    session.flush()
    return released
