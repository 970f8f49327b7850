"""Read marks (docs/rules.md#read-marks): "mark all read" as one row, and the one rule of
what is unread.

"Mark all read" of 100,000 entries scattered through a large table cannot update them
within a request (the heap's floor alone is about 2 s on the project's machine,
docs/benchmarks.md#mark-all-read-where-the-scattered-updates-time-goes-session-13). So the
request writes a :class:`~wikinotify.models.ReadMark` ``(user, site, through_id,
read_at)``: every entry of hers up to ``through_id``, on that site or on none, reads as
read at ``read_at``. The ``settle_read_marks`` job writes that onto the rows
(:func:`settle_batch`, a bounded batch a transaction) and deletes the mark when none is
left.

- :func:`unread` is the rule everything that decides "unread" reads; :func:`effective_read_at`
  the read time a list shows.
- The coalescing slot stays physical (one ``read_at IS NULL`` row per user and group key,
  docs/rules.md#coalescing-is-idempotency): a covered row still holds it, so a fan-out batch
  settles its readers' covered rows for its group key first (:func:`settle_for_fanout`).
- Where a row would become unread while a mark of hers exists (marking one unread, an
  undo that is not the mark's own, a dismissed entry put back, a second "mark all read"),
  her mark is settled first, in that transaction (:func:`settle_mine`): rare, and then the
  row's own ``read_at`` is the whole truth again.

Locks (PostgreSQL): each of the job's batches holds its mark ``FOR SHARE``; the fan-out's
settling holds its readers' marks ``FOR SHARE``; whatever deletes a mark (an undo, a synchronous
settle) takes it ``FOR UPDATE`` first. Each takes the mark before any entry row, so they
never wait on one another in a cycle, and an undo cannot fall between a batch's read and its
write. Before any of that, "mark all read" and each fan-out batch take the two sides of one
more lock, :func:`placing_a_mark` and :func:`writing_entries` (below).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from flask import Flask
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from .. import commits, dialects, queue
from ..models import MAIL_NOT_SENT, EmailState, Notification, ReadMark, utcnow
from ..pipeline.failures import describe
from .retention import one_batch

log = logging.getLogger(__name__)

#: Rows one statement of the job settles: one account never makes a worker do unbounded
#: work in one statement (nor hold one transaction long).
SETTLE_BATCH = 5000

#: A user id: a value, or a column (the rule inside a statement about many readers).
Id = str | sa.ColumnElement[str]


def read_values(at: datetime | sa.ColumnElement[Any] | None = None) -> dict[str, Any]:
    """Reading an entry frees its coalescing slot and cancels the mail it was waiting for
    (docs/rules.md#lessons-learned), a mail run's claim included: a mail built
    already may still go, but a claim given back stays cancelled. ``at``: the read time
    (an undoable "mark all read" names its rows by it; a mark's, settling them)."""
    return {
        "read_at": utcnow() if at is None else at,
        "email_state": sa.case(
            (Notification.email_state.in_(MAIL_NOT_SENT), EmailState.SKIPPED),
            else_=Notification.email_state,
        ),
    }


def covers(model: Any, mark: Any = ReadMark) -> sa.ColumnElement[bool]:
    """``mark`` covers the entry ``model``: hers, at most its ``through_id``, and on its
    site or on no site (what "mark all read" on that site marks)."""
    return sa.and_(mark.user_id == model.user_id, model.id <= mark.through_id,
                   sa.or_(model.site_id.is_(None), model.site_id == mark.site_id))


def _marked(model: Any) -> sa.Exists:
    return sa.exists().where(covers(model)).correlate_except(ReadMark)


def _hers(user_id: Id, column: Any) -> sa.ScalarSelect[Any]:
    """A column of her mark. Correlated to whatever names her (:func:`~wikinotify.inbox.
    entries.summaries`' table of ids sits two subqueries out), never joined to it."""
    return (sa.select(column).where(ReadMark.user_id == user_id)
            .correlate_except(ReadMark).scalar_subquery())


def _covered_by_hers(model: Any, user_id: Id) -> sa.ColumnElement[bool]:
    """Her mark covers the entry (never NULL: no mark covers nothing)."""
    return sa.and_(
        model.id <= sa.func.coalesce(_hers(user_id, ReadMark.through_id), 0),
        sa.or_(model.site_id.is_(None),
               model.site_id.is_not_distinct_from(_hers(user_id, ReadMark.site_id))))


def unread(model: Any = Notification, user_id: Id | None = None) -> sa.ColumnElement[bool]:
    """The one rule of "unread": no read time of its own, and no read mark of its reader's
    covers it.

    Given ``user_id`` (the statement is about her rows alone), her mark is read once, by
    its key, before the rows (PostgreSQL: an InitPlan), and each row is only compared with
    it: cheaper per row than a join to the marks (the badge's count reads the id and site
    from the index). Without, the mark is found by each entry's own user (a statement about
    many readers' entries)."""
    if user_id is None:
        return sa.and_(model.read_at.is_(None), ~_marked(model))
    return sa.and_(model.read_at.is_(None), ~_covered_by_hers(model, user_id))


def effective_read_at(model: Any = Notification, user_id: Id | None = None
                      ) -> sa.ColumnElement[Any]:
    """The entry's read time as its reader sees it: its own, else her covering mark's
    (``user_id``: as :func:`unread` says)."""
    if user_id is None:
        by_mark: sa.ColumnElement[Any] = (
            sa.select(ReadMark.read_at).where(covers(model))
            .correlate_except(ReadMark).scalar_subquery())
    else:
        by_mark = sa.case((_covered_by_hers(model, user_id),
                           _hers(user_id, ReadMark.read_at)))
    return sa.func.coalesce(model.read_at, by_mark, type_=model.read_at.type).label("read_at")


#: The advisory lock between handing out entry ids and reading a mark's ``through_id``.
_NEW_ENTRIES = "wikinotify.new_entries"


def writing_entries(session: Session) -> None:
    """A fan-out batch's first lock (on PostgreSQL its shared side: batches go on
    together), held to its commit. Ids are handed out by a batch's INSERT, not by its
    commit, so while one worker's batch is in flight another's may commit larger ids: a
    mark that read the largest id then would cover entries committed after the click,
    never seen, and a batch that did not see a mark being placed would count its event
    into an entry the mark covers. So neither happens while the other is under way
    (docs/rules.md#read-marks). SQLite has one writer, whose lock this takes now: the
    batch's reads of the marks come after a mark's commit, not before."""
    dialects.write_lock(session, ReadMark.__table__, _NEW_ENTRIES, shared=True)


def placing_a_mark(session: Session) -> None:
    """"Mark all read"'s first lock, before anything else of its transaction (the lock order
    above): it waits for the batches in flight and holds new ones until its commit, so
    every id up to the largest is committed when :func:`place` reads it, and every batch
    after it sees the mark. A second call in the transaction takes nothing more."""
    dialects.write_lock(session, ReadMark.__table__, _NEW_ENTRIES)


def place(session: Session, user_id: str, site_id: str | None, at: datetime) -> None:
    """Write her mark: everything she has up to the largest entry id now. Call
    :func:`placing_a_mark` and :func:`settle_mine` first (at most one mark a reader)."""
    # The primary key's last entry: with no batch in flight (placing_a_mark), every id
    # up to it is committed, and every one handed out later is larger.
    through = session.scalar(sa.select(sa.func.max(Notification.id))) or 0
    # Two clicks at once (two tabs): the one whose mark is there first stands, and the
    # other's is a no-op whose undo finds no mark of its time (an upsert, not a 500).
    session.execute(dialects.insert(session, ReadMark).values(
        user_id=user_id, site_id=site_id, through_id=through, read_at=at,
    ).on_conflict_do_nothing())
    commits.after_commit(session, _KICK)


#: The work a commit that wrote a mark does: ask for the job that settles it (the minute
#: cron runs it too, should this kick be lost); a rollback forgets it.
_KICK = "wikinotify.settle_read_marks"


def _kick(app: Flask, _ids: set[str]) -> None:
    queue.kick(app, queue.Job.SETTLE_READ_MARKS)


commits.work(_KICK, _kick)


def _lock(session: Session, user_id: str, *, exclusive: bool) -> ReadMark | None:
    return session.scalars(
        sa.select(ReadMark).where(ReadMark.user_id == user_id)
        .with_for_update(read=not exclusive)
        .execution_options(populate_existing=True)
    ).first()


def _settle_rows(session: Session, mark: ReadMark, limit: int | None) -> int:
    """Set the mark's read time on up to ``limit`` rows it covers (all if ``None``)."""
    covered = covered_by(mark)
    if limit is None:
        where: Sequence[sa.ColumnElement[bool]] = covered
    else:
        where = [one_batch(session, Notification,
                           sa.select(Notification.id).where(*covered).limit(limit))]
    return dialects.rowcount(session.execute(
        sa.update(Notification).where(Notification.user_id == mark.user_id, *where)
        .values(**read_values(mark.read_at))
        .execution_options(synchronize_session=False)))


def settle_batch(session: Session, user_id: str, limit: int = SETTLE_BATCH) -> bool:
    """One batch of the job for her mark; ``True`` while rows are left. Commits nothing:
    the job commits each batch."""
    mark = _lock(session, user_id, exclusive=False)
    if mark is None:
        return False
    if _settle_rows(session, mark, limit) == limit:
        return True
    session.execute(sa.delete(ReadMark).where(ReadMark.user_id == user_id,
                                              ReadMark.read_at == mark.read_at))
    return False


def settle_mine(session: Session, user_id: str) -> bool:
    """Settle her mark now, in the caller's transaction, and delete it; ``False`` if she
    has none (then nothing is locked or written)."""
    mark = lock_mine(session, user_id)
    if mark is None:
        return False
    _settle_rows(session, mark, None)
    session.delete(mark)
    session.flush()
    return True


def lock_mine(session: Session, user_id: str) -> ReadMark | None:
    """Her mark, taken ``FOR UPDATE`` (it waits for a batch of the job holding it), or
    ``None``: what deletes it takes it so."""
    return _lock(session, user_id, exclusive=True)


def covered_by(mark: ReadMark) -> list[sa.ColumnElement[bool]]:
    """The rows of hers ``mark`` holds read that the job has not stamped yet."""
    return [Notification.user_id == mark.user_id, Notification.read_at.is_(None),
            covers(Notification, mark)]


def settle_all(session: Session, seconds: float) -> dict[str, int]:
    """The job's work: every reader's mark, one batch of :data:`SETTLE_BATCH` rows per
    reader in turn (one reader's 100,000 rows hold up no one), each batch committed on
    its own, until none is left or ``seconds`` have passed. A batch that fails is rolled
    back, logged and counted, and its reader left for the next run (the minute's cron):
    her mark still says what is read, and one reader's failure holds up no one else.
    Answers how many marks were settled, in how many batches, how many readers' batches
    ``failed``, and how many are ``left`` for a run right after this one."""
    readers = list(session.scalars(sa.select(ReadMark.user_id).order_by(ReadMark.read_at)))
    session.commit()
    report = {"marks": 0, "batches": 0, "failed": 0, "left": 0}
    until = time.monotonic() + seconds
    while readers and time.monotonic() < until:
        left = []
        for user_id in readers:
            try:
                more = settle_batch(session, user_id)
                session.commit()
            except SQLAlchemyError as error:
                session.rollback()
                log.warning("wikinotify: could not settle the read mark of user %s: %s",
                            user_id, describe(error))
                report["failed"] += 1
                continue
            report["batches"] += 1
            if more:
                left.append(user_id)
            else:
                report["marks"] += 1
        readers = left
    report["left"] = len(readers)
    return report


def settle_for_fanout(session: Session, group_key: str, user_ids: Sequence[str]) -> int:
    """Free the coalescing slot of ``group_key`` for the batch's readers whose unread row
    there a mark covers (it reads as read: an event must make a new entry, not join it).
    With no mark anywhere, one probe of an empty table and nothing more."""
    if session.scalar(sa.select(ReadMark.user_id).limit(1)) is None:
        return 0
    marked = set(session.scalars(
        sa.select(ReadMark.user_id).where(dialects.among(session, ReadMark.user_id,
                                                         list(user_ids)))
        .with_for_update(read=True)))
    if not marked:
        return 0
    mark = sa.alias(ReadMark.__table__, "mark")
    covered = sa.select(mark.c.read_at).where(covers(Notification, mark.c)).scalar_subquery()
    return dialects.rowcount(session.execute(
        sa.update(Notification)
        .where(dialects.among(session, Notification.user_id, sorted(marked)),
               Notification.group_key == group_key, Notification.read_at.is_(None),
               sa.exists().where(covers(Notification, mark.c)))
        .values(**read_values(covered))
        .execution_options(synchronize_session=False)))
