"""wikinotify's vital signs (docs/operating.md#the-status-command): whether fan-out, mail and
deliveries keep up, whether workers and ``rq cron`` run, and what needs an operator.

:func:`measure` takes them once; Admin → Notifications, ``flask wikinotify status`` and the
metrics all read the same :class:`Vitals`, so a figure is counted in one place. Every query
is bounded: counts of what is waiting now stop at :data:`COUNT_CAP`, counts over time look
back :data:`WINDOW` only. Redis is asked with the readiness timeout
(:func:`wikinotify.queue.probe_client`): a Redis that is down makes the Redis figures
unknown (``redis_reachable`` False) and is itself the warning, never an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from babel.numbers import format_decimal
from flask import Flask
from flask_babel import get_locale, gettext, ngettext
from redis import Redis
from redis.exceptions import RedisError
from rq import Queue, Worker
from rq.cron import CronScheduler
from sqlalchemy.orm import Session

from . import dialects, queue
from .config import config
from .models import (
    DELIVERY_NOT_SENT,
    MAIL_NOT_SENT,
    Delivery,
    EmailState,
    Event,
    Notification,
)
from .outbound import engine

#: PostgreSQL's SQLSTATE for a statement cancelled by ``statement_timeout``.
TIMED_OUT = "57014"

#: Counts of what is waiting right now stop here: the figure is there to show that
#: something is behind, and an exact count of a huge backlog would cost a scan of it.
COUNT_CAP = 10_000


def counted(n: int, locale: str | None = None) -> str:
    """A count that stops at :data:`COUNT_CAP`, said as at least that many there
    ("10,000+"): in ``locale``'s digits on a page, plain ones for the operator's CLI."""
    digits = str(n) if locale is None else format_decimal(n, locale=locale)
    return f"{digits}+" if n >= COUNT_CAP else digits


def _said(n: int) -> str:
    """A capped count in a warning: in the page's language, plain digits outside one."""
    locale = get_locale()
    return counted(n, None if locale is None else str(locale))

#: Counts over time ("failed in the last 24 hours") look back this far.
WINDOW = timedelta(hours=24)

#: ``rq cron`` heartbeats at least once a minute (it sleeps at most 60 s between runs);
#: silent for longer than this, it is not running. RQ prunes a scheduler silent this long
#: from its registry (``DEFAULT_CRON_SCHEDULER_TTL``).
CRON_SILENCE = 120

#: When a mail was given up: the drain stamps ``emailed_at`` on the last attempt, whether
#: it went out (``sent``) or not (``failed``).
FAILED_AT = Notification.emailed_at

#: One mail: the drain marks all of a mail's rows with one ``emailed_at``, so a mail is a
#: distinct (reader, ``emailed_at``), as the hourly mail limit counts it
#: (:func:`wikinotify.mail.hourly.mails_allowed_from`). A digest of five entries is one mail.
MAIL = (Notification.user_id, Notification.emailed_at)

#: An event waiting for fan-out. Dead letters are not a backlog: they wait for an
#: administrator, and are counted apart.
WAITING = (Event.processed_at.is_(None), Event.failed_at.is_(None))
#: An event whose fan-out failed on every attempt.
DEAD_LETTER = Event.failed_at.is_not(None)


@dataclass(frozen=True)
class Vitals:
    """One reading of wikinotify's vital signs; :meth:`warnings` says what needs an
    operator. Counts of what waits now are capped at :data:`COUNT_CAP`."""

    #: Events waiting for fan-out, and the age of the oldest (seconds; None: none waits).
    events_waiting: int
    oldest_waiting_age: float | None
    #: Events whose fan-out failed on every attempt, waiting for an administrator's retry.
    dead_letters: int
    #: Entries whose mail is not out yet (``pending``, or ``sending`` under a lease), and
    #: of them what a mail run would take now: a due count that stays high says the mail
    #: runs are behind. Entries, not mails (a digest of fifty is fifty): counting mails
    #: would read every such row (the index holds ``email_after`` only), where a capped
    #: count of rows stops at :data:`COUNT_CAP` index entries.
    mail_entries_pending: int
    mail_entries_due: int
    #: Mails (a digest is one) given up on in the last :data:`WINDOW` (capped too).
    mail_failed_24h: int
    #: Webhook and chat deliveries not yet made, and those an administrator may retry
    #: (:data:`wikinotify.outbound.engine.RETRYABLE`) given up on in the last
    #: :data:`WINDOW` among the latest :data:`COUNT_CAP` deliveries
    #: (:func:`latest_deliveries`): no index keeps failed deliveries or their times.
    deliveries_waiting: int
    deliveries_failed_24h: int
    #: Jobs queued on each of wikinotify's queues, by name (empty: Redis unreachable).
    queue_lengths: dict[str, int]
    #: RQ workers serving at least one of wikinotify's queues.
    workers: int
    #: wikinotify's queues that have work waiting (jobs queued, or rows their runs take)
    #: but no worker serving them: that work waits for ever.
    starved_queues: tuple[str, ...]
    #: Seconds since wikinotify's ``rq cron`` last heartbeat (None: never seen).
    cron_last_seen_age: float | None
    #: Whether Redis answered; when not, the four Redis figures above are unknown.
    redis_reachable: bool
    #: wikinotify's queues, fan-out first, and the backlog age that is a warning
    #: (``WIKINOTIFY_BACKLOG_WARNING``): what the warnings name.
    queues: tuple[str, ...]
    backlog_warning: float

    def warnings(self) -> list[str]:
        """What needs an operator, each a sentence saying what to do, in the current
        request's language (English outside a request). Empty: all is well."""
        said = [self._backlog()]
        if self.redis_reachable:
            # An old backlog with no worker says already what to run.
            said += [None if said[0] else self._no_worker(), self._starved(), self._cron()]
        else:
            said.append(gettext(
                "Redis cannot be reached: nothing can be queued, and no worker or cron can be "
                "seen. Check that Redis runs and that WIKINOTIFY_REDIS_URL names it."))
        said += [self._dead_letters(), self._mail_failed()]
        return [sentence for sentence in said if sentence]

    @property
    def worker_command(self) -> str:
        """What to run, as docs/operating.md#deploying writes it (``$REDIS``: the Redis that
        ``WIKINOTIFY_REDIS_URL`` names, which the status never prints)."""
        return "rq worker --url $REDIS " + " ".join(self.queues)

    def _backlog(self) -> str | None:
        age = self.oldest_waiting_age
        if age is None or age <= self.backlog_warning:
            return None
        waited = gettext("The oldest waiting event has waited %(seconds)d seconds "
                         "(the warning starts at %(limit)d).",
                         seconds=age, limit=self.backlog_warning)
        if self.workers or not self.redis_reachable:
            return waited + " " + gettext(
                "Fan-out is behind: check the workers' output for errors, or start more "
                "workers: %(command)s", command=self.worker_command)
        return waited + " " + gettext(
            "No worker seems to be running: start one in the wiki's directory: %(command)s",
            command=self.worker_command)

    def _no_worker(self) -> str | None:
        if self.workers:
            return None
        return gettext("No RQ worker serves wikinotify's queues: nothing is fanned out, "
                       "mailed or delivered. Start one in the wiki's directory: %(command)s",
                       command=self.worker_command)

    def _starved(self) -> str | None:
        if not self.workers or not self.starved_queues:
            return None  # no worker at all is said already
        return gettext("Work waits on %(queues)s, which no worker serves: give the workers "
                       "every wikinotify queue: %(command)s",
                       queues=", ".join(self.starved_queues), command=self.worker_command)

    def _cron(self) -> str | None:
        age = self.cron_last_seen_age
        if age is not None and age <= CRON_SILENCE:
            return None
        return gettext("rq cron has not run in the last two minutes: nothing catches up "
                       "after a lost kick, and digests and the nightly purge wait. Run one "
                       "(only one): rq cron wikinotify.jobs.cron --url $REDIS")

    def _dead_letters(self) -> str | None:
        if not self.dead_letters:
            return None
        return ngettext(
            "%(events)s event failed on every attempt: nobody has been told of it. Once its "
            "cause is fixed, retry it in Admin → Notifications or with: "
            "flask wikinotify retry events --all",
            "%(events)s events failed on every attempt: nobody has been told of them. Once "
            "their cause is fixed, retry them in Admin → Notifications or with: "
            "flask wikinotify retry events --all",
            self.dead_letters, events=_said(self.dead_letters))

    def _mail_failed(self) -> str | None:
        if not self.mail_failed_24h:
            return None
        return ngettext(
            "%(mails)s mail failed in the last 24 hours: see the reasons in Admin → "
            "Notifications; retry with: flask wikinotify retry mails --all",
            "%(mails)s mails failed in the last 24 hours: see the reasons in Admin → "
            "Notifications; retry with: flask wikinotify retry mails --all",
            self.mail_failed_24h, mails=_said(self.mail_failed_24h))


def measure(session: Session, app: Flask, *, now: datetime) -> Vitals:
    """Read wikinotify's vital signs: a few bounded queries and a few Redis reads, each
    given up after ``WIKINOTIFY_READY_TIMEOUT`` (the queries on PostgreSQL, with
    ``OperationalError``: a lock held for long or a wedged database must not hang the
    status command or Admin's page)."""
    with statement_timeout(session, float(config("READY_TIMEOUT", app))):
        rows = _database_figures(session, now)
    # The rows each queue's runs take: work waits there even with no job queued yet.
    rows_waiting = {
        queue.queue_name(app): rows["events_waiting"],
        queue.queue_name(app, queue.Job.SEND_MAIL): rows["mail_entries_due"],
        queue.queue_name(app, queue.Job.DELIVER): rows["deliveries_waiting"],
    }
    names = tuple(queue.queue_names(app))
    return Vitals(**rows, **_redis_figures(app, names, rows_waiting, now), queues=names,
                  backlog_warning=float(config("BACKLOG_WARNING", app)))


@contextmanager
def statement_timeout(session: Session, seconds: float) -> Iterator[None]:
    """On PostgreSQL, the statements run inside give up after ``seconds`` (SQLSTATE
    :data:`TIMED_OUT`); the transaction's own timeout is back afterwards. A statement that
    timed out aborts the transaction: its rollback restores the timeout."""
    if not dialects.is_postgresql(session):
        yield
        return
    set_it = sa.text("SELECT set_config('statement_timeout', :value, true)")
    before = session.scalar(sa.text("SELECT current_setting('statement_timeout')"))
    session.execute(set_it, {"value": f"{int(seconds * 1000)}ms"})
    yield
    session.execute(set_it, {"value": before})


def _database_figures(session: Session, now: datetime) -> dict[str, Any]:
    pending = Notification.email_state.in_(MAIL_NOT_SENT)
    return {
        "events_waiting": capped_count(session, Event, *WAITING),
        "oldest_waiting_age": _age(now, oldest_waiting(session)),
        "dead_letters": capped_count(session, Event, DEAD_LETTER),
        "mail_entries_pending": capped_count(session, Notification, pending),
        "mail_entries_due": capped_count(session, Notification, pending,
                                 Notification.email_after <= now),
        "mail_failed_24h": session.scalar(sa.select(sa.func.count()).select_from(
            mails(EmailState.FAILED, FAILED_AT, since=now - WINDOW, limit=COUNT_CAP))) or 0,
        "deliveries_waiting": capped_count(session, Delivery,
                                           Delivery.state.in_(DELIVERY_NOT_SENT)),
        "deliveries_failed_24h": capped_count(
            session, Delivery, Delivery.id.in_(sa.select(latest_deliveries().c.id)),
            *engine.RETRYABLE, Delivery.updated_at >= now - WINDOW),
    }


def capped_count(session: Session, table: Any, *conditions: Any) -> int:
    """``count(*)`` of ``table``'s rows matching ``conditions``, reading at most
    :data:`COUNT_CAP` of them."""
    capped = sa.select(sa.literal(1)).select_from(table).where(*conditions).limit(COUNT_CAP)
    return session.scalar(sa.select(sa.func.count()).select_from(capped.subquery())) or 0


def oldest_waiting(session: Session) -> datetime | None:
    """When the oldest event waiting for fan-out was emitted."""
    # ORDER BY … LIMIT 1 rather than min(): it walks the partial index of unprocessed
    # events, and the value comes back through the column type on SQLite too.
    return session.scalar(
        sa.select(Event.created_at).where(*WAITING).order_by(Event.created_at).limit(1)
    )


def mails(email_state: str, column: Any, *, since: datetime,
          limit: int | None = None) -> sa.Subquery:
    """The mails (:data:`MAIL`) whose rows are in ``email_state`` and whose ``column``
    (as ``at``) is ``since`` or later: one row per mail, ``limit`` of them at most."""
    return (
        sa.select(*MAIL, column.label("at"))
        .where(Notification.email_state == email_state, column >= since)
        .distinct()
        .limit(limit)
        .subquery()
    )


def latest_deliveries() -> sa.Subquery:
    """The latest :data:`COUNT_CAP` deliveries' ids, walked by their primary key: no index
    keeps the failed ones, so they are sought among the latest only."""
    return sa.select(Delivery.id).order_by(Delivery.id.desc()).limit(COUNT_CAP).subquery()


def _age(now: datetime, then: datetime | None) -> float | None:
    if then is None:
        return None
    return max(0.0, (now - then).total_seconds())


def _redis_figures(app: Flask, names: tuple[str, ...], rows_waiting: dict[str, int],
                   now: datetime) -> dict[str, Any]:
    client = queue.probe_client(app)
    try:
        lengths = {name: Queue(name, connection=client).count for name in names}
        serving = _workers(client, names)
        cron_age = _cron_age(client, names, now)
    except (RedisError, OSError):
        return {"queue_lengths": {}, "workers": 0, "starved_queues": (),
                "cron_last_seen_age": None, "redis_reachable": False}
    return {
        "queue_lengths": lengths,
        "workers": len(set().union(*serving.values())),
        "starved_queues": tuple(
            name for name in names
            if not serving[name] and (lengths[name] or rows_waiting.get(name))),
        "cron_last_seen_age": cron_age,
        "redis_reachable": True,
    }


def _workers(client: Redis, names: tuple[str, ...]) -> dict[str, set[str]]:
    """The names of the workers RQ's registry has for each queue. A worker killed without
    a word leaves the registry when its key expires (``rq worker``'s ``--worker-ttl``)."""
    return {name: {worker.name for worker in Worker.all(queue=Queue(name, connection=client))}
            for name in names}


def _cron_age(client: Redis, names: tuple[str, ...], now: datetime) -> float | None:
    """Seconds since the last heartbeat of an ``rq cron`` that schedules one of
    wikinotify's jobs (:func:`wikinotify.queue.scheduled_names`) on one of ``names``: another
    application's cron on the same Redis does not count, even on a queue of that name."""
    ours = queue.scheduled_names()
    # cleanup=False: reading the status never prunes RQ's registry.
    beats = [
        scheduler.last_heartbeat
        for scheduler in CronScheduler.all(client, cleanup=False)
        if any(job.queue_name in names and job.func_name in ours
               for job in scheduler.get_jobs())
    ]
    latest = max((beat for beat in beats if beat is not None), default=None)
    return _age(now, latest)
