"""Admin → Notifications (docs/rules.md#admin-notifications): the instance settings an administrator
edits, and the read-only status that shows whether fan-out and mail keep up.

The status's figures and warnings are :mod:`wikinotify.vitals`' (the status command's and the
metrics' too); this module adds the lists an administrator acts on and the hourly chart.
Every status query is bounded: by a time window, a ``LIMIT``, or both, and counts of
what is waiting *now* stop at :data:`wikinotify.vitals.COUNT_CAP`. Hours are bucketed with
a portable ``CASE`` over bound timestamps, so the same SQL runs on SQLite and PostgreSQL
and never returns more than 24 rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from flask import current_app
from marshmallow import ValidationError
from sqlalchemy.orm import Session

from . import dialects, vitals
from .config import config
from .host import Host
from .instance_settings import instance_settings, set_site_enabled
from .mail import relay
from .mail.setup import mail_configured, mail_problem
from .models import (
    Cadence,
    Delivery,
    DeliveryState,
    EmailSchedule,
    EmailState,
    Endpoint,
    Event,
    FanoutRange,
    Notification,
    SiteSwitch,
)

#: API name of each instance setting → its column on :class:`~wikinotify.models.InstanceSettings`.
SETTING_COLUMNS = {
    "retentionDays": "retention_days",
    "emailDelaySeconds": "email_delay_seconds",
    "mailBatchSize": "mail_batch_size",
}

#: The status looks back :data:`wikinotify.vitals.WINDOW`, in :data:`HOURS` buckets of one
#: hour each.
HOURS = 24

#: How many of the latest failed emails the status lists with their reasons.
RECENT_FAILURES = 10

#: How many dead-letter events (fan-outs given up on) the status lists, latest first; and
#: how many failed webhook and chat deliveries.
FAILED_EVENTS = 20


def instance_settings_values(session: Session) -> dict[str, int]:
    """The three instance settings by API name; never the unsubscribe secret."""
    row = instance_settings(session)
    return {name: getattr(row, column) for name, column in SETTING_COLUMNS.items()}


#: The shortest retention while anyone has a digest: a weekly reader's entries wait up to
#: a week, but a daily one's must at least outlive the day they wait for (docs/rules.md#digests).
DIGEST_RETENTION_DAYS = 2


def check_retention(session: Session, values: Mapping[str, Any]) -> None:
    """Refuse a ``retentionDays`` under :data:`DIGEST_RETENTION_DAYS` while anyone has a
    digest, as a ``ValidationError`` naming the field: the purge would delete entries
    before their digest went out."""
    days = values.get("retentionDays")
    if days is None or days >= DIGEST_RETENTION_DAYS:
        return
    digest = session.scalar(
        sa.select(EmailSchedule.user_id).where(EmailSchedule.schedule != Cadence.IMMEDIATE).limit(1)
    )
    if digest is not None:
        raise ValidationError({"retentionDays": [
            f"Must be at least {DIGEST_RETENTION_DAYS} while anyone has an email digest."
        ]})


def update_instance_settings(session: Session, values: Mapping[str, Any]) -> list[str]:
    """Apply validated ``values`` and return the names of the fields that changed.

    ``values`` holds any of :data:`SETTING_COLUMNS`' names and ``sites``, a list of
    ``{"id", "enabled"}``; sites not listed keep their switch. A site's field is named
    ``site:<id>``. Nothing is committed: the caller audits, then commits.
    """
    changed = _apply_numbers(session, values)
    changed += _apply_site_switches(session, values.get("sites", ()))
    return changed


def _apply_numbers(session: Session, values: Mapping[str, Any]) -> list[str]:
    row = instance_settings(session)
    changed = []
    for name, column in SETTING_COLUMNS.items():
        if name in values and getattr(row, column) != values[name]:
            setattr(row, column, values[name])
            changed.append(name)
    return changed


def _apply_site_switches(session: Session, wanted: Iterable[Mapping[str, Any]]) -> list[str]:
    wanted = list(wanted)
    current = site_switches(session, [site["id"] for site in wanted])
    changed = []
    for site in wanted:
        if current[site["id"]] != site["enabled"]:
            set_site_enabled(session, site["id"], site["enabled"])
            changed.append(f"site:{site['id']}")
    return changed


def site_switches(session: Session, site_ids: Sequence[str]) -> dict[str, bool]:
    """Whether notifications are on, for each of ``site_ids``, in one query (no row: on)."""
    query = sa.select(SiteSwitch.site_id, SiteSwitch.enabled).where(
        SiteSwitch.site_id.in_(site_ids)
    )
    stored = dict(session.execute(query).all()) if site_ids else {}
    return {site_id: stored.get(site_id, True) for site_id in site_ids}


def status(session: Session, host: Host, *, now: datetime) -> dict[str, Any]:
    """What Admin → Notifications shows read-only: the outbox, mail over the last 24 hours,
    the latest failures, whether mail is configured, the relay's configuration failure
    while no send has succeeded since, and the sites with their switch and scheme (a
    plain-``http`` site loses Gmail's one-click unsubscribe,
    docs/rules.md#one-click-unsubscribe)."""
    all_sites = sites(session, host)
    # Flask types its proxy as the app itself, so the proxy's method is unknown to mypy.
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    vital = vitals.measure(session, app, now=now)
    return {
        "mailConfigured": mail_configured(),
        "mailProblem": mail_problem(),
        "mailSettingsUrl": config("MAIL_SETTINGS_URL"),
        "mailAlert": relay.alert(app),
        "countCap": vitals.COUNT_CAP,
        "vitals": vital,
        "warnings": vital.warnings(),
        "outbox": {"unprocessed": vital.events_waiting,
                   "oldestAgeSeconds": _seconds(vital.oldest_waiting_age)},
        "email": _email(session, vital, now),
        "failures": recent_failures(session),
        "failedEvents": failed_events(session),
        "failedDeliveries": failed_deliveries(session),
        "sites": all_sites,
        "plainHttpSites": [site for site in all_sites if not site["https"]],
    }


def sites(session: Session, host: Host) -> list[dict[str, Any]]:
    """Every site of the wiki with its switch (docs/rules.md#the-site-switch) and whether it is
    served over https."""
    facts = host.sites()
    switches = site_switches(session, [site.id for site in facts])
    return [
        {"id": site.id, "title": site.title, "baseUrl": site.base_url,
         "enabled": switches[site.id], "https": site.is_https}
        for site in facts
    ]


def _seconds(age: float | None) -> int | None:
    return None if age is None else int(age)


def _email(session: Session, vital: vitals.Vitals, now: datetime) -> dict[str, Any]:
    """Mails sent and failed per hour over :data:`wikinotify.vitals.WINDOW`, how many
    notifications the sent ones carried, and what is waiting now (from ``vital``).

    ``sent`` and ``failed`` count mails (:data:`wikinotify.vitals.MAIL`), by ``emailed_at``
    and :data:`wikinotify.vitals.FAILED_AT`; ``notificationsEmailed``, the entries those
    sent mails carried. Pending is a queue, not an event in time, so it is an honest
    current total (capped) of entries (rows, not mails) whose mail is not out yet:
    ``pending`` rows and ``sending`` ones under a lease. Of those, "due" are the ones the
    drain would take now (a lapsed lease included), as opposed to rows whose window is
    still open: a due count that stays high says the mail runs are behind.
    """
    starts = [now - vitals.WINDOW + timedelta(hours=hour) for hour in range(HOURS)]
    sent = _hourly(session, Notification.emailed_at, EmailState.SENT, starts)
    failed = _hourly(session, vitals.FAILED_AT, EmailState.FAILED, starts)
    emailed = sa.select(sa.func.count()).where(
        Notification.email_state == EmailState.SENT, Notification.emailed_at >= starts[0])
    return {
        "sent": sum(sent),
        "failed": vital.mail_failed_24h,  # sum(failed), counted once
        "notificationsEmailed": session.scalar(emailed) or 0,
        "pending": vital.mail_entries_pending,
        "pendingDue": vital.mail_entries_due,
        "hours": [
            {"start": start, "sent": s, "failed": f}
            for start, s, f in zip(starts, sent, failed, strict=True)
        ],
    }


def _hourly(
    session: Session, column: Any, email_state: str, starts: Sequence[datetime]
) -> list[int]:
    """Mails (:data:`wikinotify.vitals.MAIL`) whose rows are in ``email_state`` and whose
    ``column`` falls in each hour starting at ``starts``.

    A mail stamped after the last start (including a worker's clock slightly ahead) lands
    in the last hour. The CASE is computed in a subquery and grouped outside it: PostgreSQL
    would not match a GROUP BY repeating the CASE, whose bound parameters are numbered anew.
    """
    mails = vitals.mails(email_state, column, since=starts[0])
    hour = sa.case(
        *[(mails.c.at >= start, index) for index, start in reversed(list(enumerate(starts)))],
        else_=0,
    ).label("hour")
    rows = sa.select(hour).subquery()
    counts = [0] * len(starts)
    grouped = sa.select(rows.c.hour, sa.func.count()).group_by(rows.c.hour)
    for index, count in session.execute(grouped):
        counts[index] = count
    return counts


def recent_failures(session: Session) -> list[dict[str, Any]]:
    """The latest :data:`RECENT_FAILURES` emails given up on, with the drain's reason and
    its class (``transient`` once the attempts are spent, ``permanent``)."""
    query = (
        sa.select(
            Notification.id,
            Notification.category,
            Notification.user_id,
            Notification.email_error,
            Notification.email_error_class,
            vitals.FAILED_AT.label("at"),
        )
        .where(Notification.email_state == EmailState.FAILED)
        .order_by(vitals.FAILED_AT.desc(), Notification.id.desc())
        .limit(RECENT_FAILURES)
    )
    return [
        {"id": row.id, "category": row.category, "userId": row.user_id,
         "error": row.email_error, "errorClass": row.email_error_class, "at": row.at}
        for row in session.execute(query)
    ]


def failed_events(session: Session) -> list[dict[str, Any]]:
    """The latest :data:`FAILED_EVENTS` dead letters: events whose fan-out failed on
    every attempt, with the last error (walks the partial index of failed events)."""
    snapshot = Event.data["snapshot"]
    query = (
        sa.select(
            Event.id,
            Event.kind,
            Event.page_id,
            snapshot["title"].as_string().label("title"),
            snapshot["path"].as_string().label("path"),
            Event.attempts,
            Event.error,
            Event.failed_at,
        )
        .where(vitals.DEAD_LETTER)
        .order_by(Event.failed_at.desc(), Event.id.desc())
        .limit(FAILED_EVENTS)
    )
    return [
        {"id": row.id, "kind": row.kind, "pageId": row.page_id, "pageTitle": row.title,
         "pagePath": row.path, "attempts": row.attempts, "error": row.error,
         "at": row.failed_at}
        for row in session.execute(query)
    ]


def failed_deliveries(session: Session) -> list[dict[str, Any]]:
    """The latest :data:`FAILED_EVENTS` webhook and chat deliveries given up on, newest
    first, with their endpoint's channel and owner and the last error. Sought among
    :func:`wikinotify.vitals.latest_deliveries` only: the list is there to retry what
    failed lately."""
    latest = vitals.latest_deliveries()
    query = (
        sa.select(Delivery.id, Delivery.type, Delivery.attempts, Delivery.error_class,
                  Delivery.error, Delivery.updated_at, Endpoint.id.label("endpoint_id"),
                  Endpoint.kind, Endpoint.owner_id)
        .join(Endpoint, Endpoint.id == Delivery.endpoint_id)
        .where(Delivery.id.in_(sa.select(latest.c.id)), Delivery.state == DeliveryState.FAILED)
        .order_by(Delivery.id.desc())
        .limit(FAILED_EVENTS)
    )
    return [
        {"id": row.id, "endpointId": row.endpoint_id, "channel": row.kind,
         "ownerId": row.owner_id, "type": row.type, "attempts": row.attempts,
         "errorClass": row.error_class, "error": row.error, "at": row.updated_at}
        for row in session.execute(query)
    ]


def retry_event(session: Session, event_id: int) -> bool:
    """Make the dead letter ``event_id`` claimable again, as if it had never failed; its
    cursor is kept, so the fan-out resumes where it stopped. ``False`` if no failed event
    has this id. Nothing is committed: the caller audits, then commits."""
    revived = {"attempts": 0, "failed_at": None, "retry_after": None, "error": None,
               "claimed_at": None, "claimed_by": None}
    result = session.execute(
        sa.update(Event).where(Event.id == event_id, vitals.DEAD_LETTER).values(revived)
    )
    if not dialects.rowcount(result):
        return False
    # A split event failed with one of its ranges: that range is retried, from its cursor;
    # the ranges already done stay done.
    session.execute(
        sa.update(FanoutRange)
        .where(FanoutRange.event_id == event_id, FanoutRange.failed_at.is_not(None))
        .values(revived)
    )
    return True
