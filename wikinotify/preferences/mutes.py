"""Mutes: a page, or a person, a user no longer wants to hear about.

A muted page tells the muter nothing, from any category; a muted person's actions (edits,
comments, mentions, replies) tell the muter nothing. The fan-out drops the muters of each
candidate batch in one query (:func:`muters_among`), or once for a fan-out of many batches
(:func:`muters`); muting cancels the mail still waiting for what was muted. Every statement
names the user whose rows it reads, but :func:`muters`: the worker's read of everyone who
muted one page or one person, which no one is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .. import dialects
from ..inbox import read_marks
from ..models import MAIL_NOT_SENT, EmailState, Mute, MuteKind, Notification, utcnow

#: The entry column that names what a mute of each kind silences.
TARGET_COLUMN: dict[str, sa.orm.InstrumentedAttribute[str | None]] = {
    MuteKind.PAGE: Notification.page_id,
    MuteKind.USER: Notification.actor_id,
}


def list_mutes(session: Session, user_id: str) -> list[Mute]:
    """The user's mutes, newest first."""
    query = sa.select(Mute).where(Mute.user_id == user_id)
    return list(session.scalars(query.order_by(Mute.created_at.desc(), Mute.target_id)))


def mute(session: Session, user_id: str, kind: MuteKind, target_id: str) -> None:
    """Mute ``target_id`` for ``user_id`` (muting twice is muting once), and cancel the
    mail her unread entries about it were waiting to send."""
    insert = dialects.insert(session, Mute).values(
        user_id=user_id, kind=kind, target_id=target_id, created_at=utcnow()
    )
    session.execute(insert.on_conflict_do_nothing())
    session.execute(
        sa.update(Notification)
        .where(
            Notification.user_id == user_id,
            read_marks.unread(Notification, user_id),
            Notification.email_state.in_(MAIL_NOT_SENT),
            *_about(kind, target_id),
        )
        .values(email_state=EmailState.SKIPPED)
    )


def _about(kind: str, target: Any) -> list[sa.ColumnElement[bool]]:
    """An entry is about a muted ``target`` of ``kind`` (a value, or a column)."""
    about_it = [TARGET_COLUMN[kind] == target]
    if kind == MuteKind.USER:
        # An entry names only its last actor; one that gathered several events may carry
        # someone else's news too, which muting this person must not silence.
        about_it.append(Notification.count == 1)
    return about_it


def muted_entries(session: Session, user_id: str, entry_ids: Sequence[int]) -> set[int]:
    """Which of the user's entries ``entry_ids`` are about a page or a person she has
    muted now: the mail run's re-check at send time (a mute made while the mail was
    cancelled, and an undo that made it pending again, must not send it)."""
    if not entry_ids:
        return set()
    muted = [sa.exists().where(Mute.user_id == user_id, Mute.kind == kind,
                               *_about(kind, Mute.target_id))
             for kind in TARGET_COLUMN]
    query = sa.select(Notification.id).where(
        Notification.user_id == user_id, Notification.id.in_(entry_ids), sa.or_(*muted))
    return set(session.scalars(query))


def unmute(session: Session, user_id: str, kind: str, target_id: str) -> bool:
    """Whether the user had that mute (someone else's answers as one that does not exist)."""
    deleted = session.execute(
        sa.delete(Mute).where(
            Mute.user_id == user_id, Mute.kind == kind, Mute.target_id == target_id
        )
    )
    return bool(dialects.rowcount(deleted))


def is_muted(session: Session, user_id: str, kind: str, target_id: str) -> bool:
    query = sa.select(Mute.user_id).where(
        Mute.user_id == user_id, Mute.kind == kind, Mute.target_id == target_id
    )
    return session.scalar(query) is not None


def _muting(page_id: str | None, actor_id: str | None) -> list[tuple[str, str]]:
    """The mutes, as (kind, target), that silence an event about ``page_id`` by ``actor_id``."""
    return [(kind, target) for kind, target in ((MuteKind.PAGE, page_id), (MuteKind.USER, actor_id))
            if target is not None]


def muters_among(
    session: Session, user_ids: Sequence[str], page_id: str | None, actor_id: str | None
) -> set[str]:
    """Who among ``user_ids`` muted this page or this actor: one query per batch."""
    targets = [sa.and_(Mute.kind == kind, Mute.target_id == target)
               for kind, target in _muting(page_id, actor_id)]
    if not user_ids or not targets:
        return set()
    mine = dialects.among(session, Mute.user_id, user_ids)
    query = sa.select(Mute.user_id).where(mine, sa.or_(*targets))
    return set(session.scalars(query.distinct()))


def muters(
    session: Session, page_id: str | None, actor_id: str | None, limit: int
) -> set[str] | None:
    """Everyone who muted this page or this actor, as :func:`muters_among` would find them
    batch by batch, read once for a fan-out of many batches; ``None`` when more than
    ``limit`` mutes name them. One read per target, each stopped at the limit in the
    index by target."""
    found: set[str] = set()
    read = 0
    for kind, target in _muting(page_id, actor_id):
        query = sa.select(Mute.user_id).where(Mute.kind == kind, Mute.target_id == target)
        rows = session.scalars(query.limit(limit + 1 - read)).all()
        read += len(rows)
        if read > limit:
            return None
        found.update(rows)
    return found
