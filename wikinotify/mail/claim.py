"""The mail queue: the rows of ``wikinotify_notifications`` whose email is due, claimed a
(user, site) at a time through :mod:`wikinotify.workqueue`, and what a run writes on them
(``sent``, a failure, given back).

A (user, site)'s due rows are claimed by moving them to ``sending``, whose ``email_after``
becomes a lease, counted from the claim on the database's clock: a long run (a slow relay)
never claims rows whose lease has already lapsed, and workers whose clocks disagree agree
on it. The claim returns the rows themselves, as the table's rows, and the run writes them
with statements of its own (:mod:`wikinotify.mail.drain` tells the rest).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .. import dialects, workqueue
from ..inbox import read_marks
from ..models import (
    MAIL_NOT_SENT,
    EmailState,
    Mute,
    Notification,
    NotificationRow,
    sql_in,
    utcnow,
)
from . import relay
from .held import HeldConnection

log = logging.getLogger(__name__)

#: Three attempts, then ``failed``; a wait of a minute, then five, between them.
RETRY = workqueue.RetryPolicy(attempts=3,
                              waits=(timedelta(minutes=1), timedelta(minutes=5)))

_DUE = Notification.email_state.in_(MAIL_NOT_SENT)

_COLUMNS = tuple(Notification.__table__.columns)
#: Answered with each claimed row: whether its reader mutes anything at the claim. Her
#: entries are then re-checked against her mutes as they are (:func:`mutes_anything`,
#: ``mutes.muted_entries``); a reader who mutes nothing, most, costs no second statement.
#: Asked in the claim, after it, so a mute made since the run began counts.
_MUTING = "muting"
_MUTING_SQL = (f"EXISTS (SELECT 1 FROM {Mute.__tablename__} AS m "
               f"WHERE m.user_id = {Notification.__tablename__}.user_id) AS {_MUTING}")

#: One (user, site)'s due rows (a lapsed lease included), all of them. On PostgreSQL each
#: statement of a run is a transaction of its own (:class:`.held.HeldConnection`), and on
#: SQLite the claim is the first of its transaction (the run commits before each), so
#: now() is the claim's time.
CLAIM = workqueue.Claim(
    table="wikinotify_notifications",
    free=f"{sql_in('email_state', MAIL_NOT_SENT)} AND email_after <= {{now}}",
    narrow="user_id = :user_id AND site_id {same} :site_id",
    take=f"email_state = '{EmailState.SENDING}', email_after = {{now+:lease}}",
    returning=", ".join([*(column.name for column in _COLUMNS), _MUTING_SQL]),
    columns=(*_COLUMNS, sa.column(_MUTING, sa.Boolean)),
)

# The last mail's ``sent`` mark (:func:`sent`), in the claim's statement: its rows are
# ``sending`` under a lease of this run's that has not lapsed, none of the claim's.
_SENT_POSTGRESQL = f"""WITH sent AS (
    UPDATE wikinotify_notifications SET email_state = '{EmailState.SENT}', emailed_at = :sent_at,
        email_error = NULL, email_error_class = NULL,
        read_at = CASE WHEN in_app THEN read_at ELSE :sent_at END
    WHERE id = ANY(:sent_ids))
"""

#: A (user, site): one mail.
Pair = tuple[str, str | None]
#: A mail the relay took: its rows and when.
Sent = tuple[list[NotificationRow], datetime]


def due_pairs(session: Session, limit: int) -> list[Pair]:
    """Up to ``limit`` (user, site) pairs with mail due (or a lapsed lease), oldest first,
    by the database's clock, as the claim and :func:`mail_waiting` judge it: a worker
    whose clock lags would otherwise be sent again and again for mail it cannot see."""
    query = (
        sa.select(Notification.user_id, Notification.site_id)
        .where(_DUE, Notification.email_after <= sa.text(dialects.now_sql(session)))
        .group_by(Notification.user_id, Notification.site_id)
        .order_by(sa.func.min(Notification.email_after))
        .limit(limit)
    )
    return [(user_id, site_id) for user_id, site_id in session.execute(query)]


def claim(
    session: Session, user_id: str, site_id: str | None, lease: timedelta,
    last: Sent | None = None, held: HeldConnection | None = None,
) -> list[NotificationRow]:
    """Move the pair's due rows to ``sending`` under a lease of ``lease`` from now, on the
    database's clock, and return them, newest first; another run that picked the same
    pair gets none of them. The caller commits, before the mail goes (on SQLite the claim
    must be the first statement of its transaction: its now() is the lease's start).

    ``last``, the last mail the run handed over, is marked ``sent`` in the same
    transaction (on PostgreSQL, in the same statement).

    The rows come as the table's (:class:`NotificationRow`), not as entities: the run
    reads them and writes them with statements of its own, and the session has nothing
    to keep, expire or detach. Where the run's ``held`` connection commits each statement
    on its own (PostgreSQL), the claim is sent on it directly
    (:meth:`.held.HeldConnection.rows`): the same statement, the same rows."""
    params: dict[str, Any] = {"user_id": user_id, "site_id": site_id,
                              "lease": lease.total_seconds()}
    with_sent = last is not None and dialects.is_postgresql(session)
    if with_sent and last is not None:
        params |= {"sent_ids": [e.id for e in last[0]], "sent_at": last[1]}
    before = _SENT_POSTGRESQL if with_sent else ""
    # A Row answers each of its columns by name, as the Protocol asks.
    if held is not None and held.autocommit:
        rows = cast(list[NotificationRow], held.rows(CLAIM.driver_sql(session, before), params))
    else:
        rows = cast(list[NotificationRow],
                    session.execute(CLAIM.statement(session, before), params).all())
    if last is not None and not with_sent:
        sent(session, *last)
    rows.sort(key=lambda e: (e.updated_at, e.id), reverse=True)
    return rows


def mutes_anything(entries: Sequence[NotificationRow]) -> bool:
    """Whether the reader of ``entries`` muted anything when :func:`claim` took them (an
    entry that did not come from a claim says yes: it is re-checked)."""
    return any(getattr(entry, _MUTING, True) for entry in entries)


def mark(session: Session, ids: Sequence[int], *, claimed: bool = False,
         **values: Any) -> None:
    """Set ``values`` on the rows ``ids``. ``claimed``: only on those still due,
    a mail's rows when what was to be done with it failed: on PostgreSQL each statement
    of a run commits on its own, so a row skipped before the failure stays skipped."""
    if ids:
        statement = sa.update(Notification).where(Notification.id.in_(ids)).values(**values)
        if claimed:
            statement = statement.where(_DUE)
        session.execute(statement)


def _sent_statement() -> sa.Update:
    table = Notification.__table__
    sent_at = sa.bindparam("sent_at", type_=table.c.emailed_at.type)
    return sa.update(table).where(table.c.id.in_(sa.bindparam("ids", expanding=True))).values(
        email_state=EmailState.SENT, emailed_at=sent_at, email_error=None, email_error_class=None,
        read_at=sa.case((table.c.in_app, table.c.read_at), else_=sent_at))


#: The ``sent`` mark, made once, of the table (not the entity): the ORM's update, built
#: for each mail, cost as much as the claim.
_SENT = _sent_statement()


def sent(session: Session, entries: Sequence[NotificationRow], now: datetime) -> None:
    """``sent``; an email-only row closes, since it has no inbox to be read in
    (docs/rules.md#entries). One statement for both."""
    session.execute(_SENT, {"ids": [e.id for e in entries], "sent_at": now})


#: What :func:`record` made of a mail's rows: the report's count it adds to.
FAILED, RETRIED, POSTPONED = "failed", "retried", "postponed"


def record(session: Session, ids: Sequence[int], failure: relay.Failure) -> str:
    """What ``failure`` makes of the mail's rows (the table in :mod:`wikinotify.mail.relay`),
    each keeping the class and the reason: :data:`FAILED`, :data:`RETRIED` (back to
    pending after :data:`RETRY`'s wait) or :data:`POSTPONED` (no attempt burnt)."""
    values: dict[str, Any] = {"email_error": RETRY.error(failure.reason),
                              "email_error_class": failure.kind}
    if failure.kind == relay.PERMANENT:
        return _failed(session, ids, values)
    if failure.kind != relay.TRANSIENT:
        wait = relay.RATE_LIMIT_WAIT if failure.kind == relay.RATE_LIMIT else timedelta(
            seconds=relay.PAUSE_SECONDS)
        mark(session, ids, claimed=True, email_state=EmailState.PENDING,
             email_after=utcnow() + wait, **values)
        log.warning("wikinotify: mail postponed (%s): %s", failure.kind, failure.reason)
        return POSTPONED
    spent = session.scalar(
        sa.select(sa.func.max(Notification.email_attempts)).where(Notification.id.in_(ids))
    )
    attempts = (spent or 0) + 1
    values["email_attempts"] = attempts
    later = RETRY.retry_in(attempts)
    if later is None:
        return _failed(session, ids, values)
    mark(session, ids, claimed=True, email_state=EmailState.PENDING, email_after=utcnow() + later,
         **values)
    log.info("wikinotify: mail to be retried (attempt %d): %s", attempts, failure.reason)
    return RETRIED


def _failed(session: Session, ids: Sequence[int], values: dict[str, Any]) -> str:
    # emailed_at: when the mail step concluded, here by giving up (the admin page's
    # "last failures" are ordered by it, and a mail's rows share it).
    mark(session, ids, claimed=True, email_state=EmailState.FAILED, emailed_at=utcnow(), **values)
    log.warning("wikinotify: mail failed for good: %s", values["email_error"])
    return FAILED


#: A row of a mail given up on, which an administrator may retry.
RETRYABLE = Notification.email_state == EmailState.FAILED


def retry_failed(session: Session, row_id: int) -> bool:
    """An administrator's retry of the failed mail that the row ``row_id`` was to go in:
    its rows (the reader's, of its site, given up at one time) are due again at once, on
    the database's clock, with their attempts back, as if never tried; a row read since
    is skipped, as reading cancels the mail. ``False`` if no failed row has this id.
    Nothing is committed: the caller audits, then commits."""
    failed = session.execute(
        sa.select(Notification.user_id, Notification.site_id, Notification.emailed_at)
        .where(Notification.id == row_id, RETRYABLE)
    ).first()
    if failed is None:
        return False
    mail = sa.update(Notification).where(
        RETRYABLE, Notification.user_id == failed.user_id,
        Notification.site_id.is_not_distinct_from(failed.site_id),
        Notification.emailed_at.is_not_distinct_from(failed.emailed_at))
    skipped = session.execute(mail.where(~read_marks.unread(Notification))
                              .values(email_state=EmailState.SKIPPED))
    revived = session.execute(mail.values(
        email_state=EmailState.PENDING, email_after=sa.text(dialects.now_sql(session)),
        emailed_at=None, email_attempts=0, email_error=None, email_error_class=None))
    # Another retry of the same mail may have come first: then nothing changed here, and
    # nothing is to be audited twice.
    return bool(dialects.rowcount(skipped) + dialects.rowcount(revived))


def mail_waiting(session: Session) -> bool:
    """Whether any mail is due now (the job runs again at once if so)."""
    return CLAIM.waiting(session)


def skip_pending(session: Session, user_id: str, categories: Sequence[str]) -> int:
    """Cancel the user's mail of ``categories`` not sent yet (after an unsubscribe), a
    run's claim included (:data:`~wikinotify.models.MAIL_NOT_SENT`)."""
    query = sa.update(Notification).where(
        Notification.user_id == user_id,
        _DUE,
        Notification.category.in_(list(categories)),
    )
    result = session.execute(query.values(email_state=EmailState.SKIPPED))
    return dialects.rowcount(result)
