"""Preferences (docs/rules.md#preferences-are-stored-only-where-they-differ): per user, per
category, per channel; a row only where it differs from the category's default."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .. import dialects
from ..categories import Category, Channels
from ..host import UserFacts
from ..models import (
    Channel,
    EmailSchedule,
    EmailState,
    InstanceSettings,
    Notification,
    Preference,
    utcnow,
)
from .cadence import IMMEDIATE, Schedule, chosen_zone, email_after_for, zone_for
from .rule import BASE_CHANNELS, CHANNEL_FIELDS, OUTBOUND_CHANNELS, channel_default, effective


@dataclass(frozen=True)
class CategoryChoice:
    """One category as a user sees it: the effective choice and the defaults."""

    category: Category
    effective: Channels
    defaults: Channels


def stored_rows(session: Session, user_id: str) -> dict[tuple[str, str], bool]:
    """The user's stored (category, channel) → enabled rows."""
    rows = session.execute(
        sa.select(Preference.category, Preference.channel, Preference.enabled).where(
            Preference.user_id == user_id
        )
    )
    return {(category, channel): enabled for category, channel, enabled in rows}


def stored_channels(stored: Mapping[tuple[str, str], bool], key: str) -> dict[str, bool]:
    """The rows of :func:`stored_rows` about category ``key``: channel → enabled, what
    :func:`~.rule.effective` reads."""
    return {channel: on for (category, channel), on in stored.items() if category == key}


def effective_defaults(category: Category, mail_on: bool) -> Channels:
    """The category's defaults where this instance can send mail; email off otherwise."""
    return effective(category, {}, mail_on=mail_on)


def choices(
    session: Session, user_id: str, categories: Iterable[Category], *, mail_on: bool
) -> list[CategoryChoice]:
    """What ``user_id`` gets for each category: stored rows over defaults, and email off
    everywhere while mail is not configured (docs/rules.md#the-launch-categories)."""
    stored = stored_rows(session, user_id)
    return [CategoryChoice(category,
                           effective(category, stored_channels(stored, category.key),
                                     mail_on=mail_on),
                           effective_defaults(category, mail_on))
            for category in categories]


def save(
    session: Session,
    user_id: str,
    categories: Iterable[Category],
    wanted: Mapping[str, Mapping[str, bool]],
    *,
    mail_on: bool,
) -> list[str]:
    """Store ``wanted`` (``{key: {"inApp": bool, "email": bool, "webhook"?: bool,
    "chat"?: bool, "push"?: bool}}``) for ``user_id``; an outbound channel left out stays as it is.

    Only rows that differ from the defaults are kept: a value set back to its default
    deletes its row. While mail is not configured, the email channel is left as it was,
    so saving a page that shows email as off does not erase what the user had chosen.
    Returns the keys of the categories whose effective choice changed.
    """
    base = list(BASE_CHANNELS) if mail_on else [Channel.IN_APP]
    stored = stored_rows(session, user_id)
    changed: list[str] = []
    for category in categories:
        category_changed = False
        asked = wanted[category.key]
        for channel in [*base, *(c for c in OUTBOUND_CHANNELS if c in asked)]:
            default = channel_default(category, channel)
            current = stored.get((category.key, channel), default)
            value = asked[channel]
            if value == current:
                continue
            category_changed = True
            _store(session, user_id, category.key, channel, value, default)
        if category_changed:
            changed.append(category.key)
    return changed


def _store(
    session: Session, user_id: str, key: str, channel: str, value: bool, default: bool
) -> None:
    where = (
        Preference.user_id == user_id,
        Preference.category == key,
        Preference.channel == channel,
    )
    if value == default:
        session.execute(sa.delete(Preference).where(*where))
        return
    # One upsert, not a read then an insert: two requests saving at once (four one-click
    # POSTs of the same mail, say) must both succeed.
    now = utcnow()
    insert = dialects.insert(session, Preference.__table__).values(
        user_id=user_id, category=key, channel=channel, enabled=value, updated_at=now
    )
    session.execute(
        insert.on_conflict_do_update(
            index_elements=[Preference.user_id, Preference.category, Preference.channel],
            set_={"enabled": value, "updated_at": now},
        )
    )


def stop_all_email(session: Session, user_id: str, categories: Iterable[Category]) -> list[str]:
    """Turn email off for every category in one go (the foot of the page, and the
    unsubscribe page's "Stop all notification email")."""
    return _set_email(session, user_id, categories, on=False)


def resume_email(session: Session, user_id: str, categories: Iterable[Category]) -> list[str]:
    """Turn email on again for ``categories`` (the unsubscribe page's "Subscribe again");
    the in-app choices stay as they are."""
    return _set_email(session, user_id, categories, on=True)


def _set_email(
    session: Session, user_id: str, categories: Iterable[Category], *, on: bool
) -> list[str]:
    categories = list(categories)
    current = choices(session, user_id, categories, mail_on=True)
    wanted: dict[str, Mapping[str, bool]] = {
        c.category.key: {Channel.IN_APP: c.effective.in_app, Channel.EMAIL: on}
        for c in current}
    return save(session, user_id, categories, wanted, mail_on=True)


def reader_zone(session: Session, user: UserFacts, site_timezone: str | None,
                browser: str | None = None) -> tuple[str, bool]:
    """The zone ``user`` is shown times in (:func:`zone_for`, with her stored schedule),
    and whether she chose it (else a page may ask her browser for its own)."""
    schedule = email_schedule(session, user.id)
    return (zone_for(schedule, user, site_timezone, browser),
            chosen_zone(schedule, user) is not None)


def _schedule(row: Any) -> Schedule:
    """A stored schedule: an :class:`EmailSchedule`, or a row of its columns."""
    # A column left NULL (an immediate reader's hour) takes the default.
    return Schedule(
        cadence=row.schedule,
        hour=IMMEDIATE.hour if row.hour is None else row.hour,
        weekday=IMMEDIATE.weekday if row.weekday is None else row.weekday,
        timezone=row.timezone,
    )


#: A stored schedule's columns, not the row as an entity: loading thousands of entities
#: cost more than the read.
_SCHEDULES = sa.select(EmailSchedule.user_id, EmailSchedule.schedule, EmailSchedule.hour,
                       EmailSchedule.weekday, EmailSchedule.timezone)


def schedules(session: Session, user_ids: Sequence[str]) -> dict[str, Schedule]:
    """The stored schedules of ``user_ids``, one query (a fan-out batch); a reader with no
    row is immediate and is not in the answer."""
    if not user_ids:
        return {}
    rows = session.execute(_SCHEDULES.where(
        dialects.among(session, EmailSchedule.user_id, user_ids)
    ))
    return {row.user_id: _schedule(row) for row in rows}


def every_schedule(session: Session, limit: int) -> dict[str, Schedule] | None:
    """Every stored schedule, as :func:`schedules` would find them batch by batch, read
    once for a fan-out of many batches; ``None`` when there are more than ``limit``."""
    rows = dialects.at_most(session, _SCHEDULES, limit)
    return None if rows is None else {row.user_id: _schedule(row) for row in rows}


def schedule_of(stored: Mapping[str, Schedule], user_id: str) -> Schedule:
    """``user_id``'s schedule among those :func:`schedules` read: immediate unless she
    stored one."""
    return stored.get(user_id, IMMEDIATE)


#: One reader's schedule, asked by every page that shows her times: made once, then only
#: bound (building it cost more Python than its round trip).
#: Its columns, not the row as an entity: the ORM's loading of one cost more than the
#: statement's round trip.
_SCHEDULE_OF = sa.select(
    EmailSchedule.schedule, EmailSchedule.hour, EmailSchedule.weekday, EmailSchedule.timezone,
).where(EmailSchedule.user_id == sa.bindparam("user_id"))


def email_schedule(session: Session, user_id: str) -> Schedule:
    """The user's email delivery schedule; immediate unless they chose otherwise."""
    row = session.execute(_SCHEDULE_OF, {"user_id": user_id}).first()
    return IMMEDIATE if row is None else _schedule(row)


def save_schedule(session: Session, user_id: str, schedule: Schedule) -> bool:
    """Store ``schedule`` for ``user_id``; whether it changed. One upsert, as :func:`_store`."""
    if email_schedule(session, user_id) == schedule:
        return False
    values = {"schedule": schedule.cadence, "hour": schedule.hour,
              "weekday": schedule.weekday, "timezone": schedule.timezone,
              "updated_at": utcnow()}
    insert = dialects.insert(session, EmailSchedule.__table__).values(user_id=user_id, **values)
    session.execute(insert.on_conflict_do_update(index_elements=[EmailSchedule.user_id],
                                                 set_=values))
    return True


def reschedule_pending(
    session: Session,
    user: UserFacts,
    categories: Iterable[Category],
    schedule: Schedule,
    instance: InstanceSettings,
    *,
    now: datetime,
    site_timezone: str | None,
) -> int:
    """Move the send time of ``user``'s pending mail to what ``schedule`` says now, so a
    reader who leaves a daily digest for immediate mail is not kept waiting for it
    (docs/rules.md#digests).

    Only categories a digest may hold back move: the others' rows were due within the
    short window anyway. Every digest row of one reader gets the same time, so this is
    one UPDATE per category."""
    moved = 0
    for category in categories:
        if not category.digest:
            continue
        due = email_after_for(user, now, instance, category, schedule, site_timezone)
        result = session.execute(
            sa.update(Notification)
            .where(Notification.user_id == user.id, Notification.email_state == EmailState.PENDING,
                   Notification.category == category.key)
            .values(email_after=due)
        )
        moved += dialects.rowcount(result)
    return moved


@dataclass(frozen=True)
class Overview:
    """Everything the preferences page and ``GET /api/preferences`` show."""

    choices: list[CategoryChoice]
    email_available: bool
    site_enabled: bool
    email_schedule: Schedule
    #: The zone a schedule with none of its own is read in (the account's, the site's, UTC).
    default_timezone: str
    #: The grid's columns: in-app, email, and each outbound channel the reader set up.
    channels: tuple[str, ...] = BASE_CHANNELS

    def shown(self, channels: Channels) -> dict[str, bool]:
        """``channels`` as the API shows them: one key per column of the grid."""
        return {name: getattr(channels, CHANNEL_FIELDS[name]) for name in self.channels}

    @property
    def shown_schedule(self) -> Schedule:
        """The schedule as shown: one with no zone of its own names the zone it is read in."""
        return replace(self.email_schedule,
                       timezone=self.email_schedule.timezone or self.default_timezone)

    @property
    def rows(self) -> list[ShownChoice]:
        """The grid's rows: each category's choice and defaults in the grid's columns."""
        return [ShownChoice(c.category, self.shown(c.effective), self.shown(c.defaults))
                for c in self.choices]


@dataclass(frozen=True)
class ShownChoice:
    """One category's row of the grid (:class:`wikinotify.schemas.CategoryPreferenceSchema`
    dumps it): its effective choice and its defaults, one key per column."""

    category: Category
    effective: dict[str, bool]
    defaults: dict[str, bool]


def overview(
    session: Session,
    categories: Iterable[Category],
    user_id: str,
    *,
    mail_on: bool,
    site_on: bool,
    user: UserFacts | None = None,
    site_timezone: str | None = None,
    outbound: Iterable[str] = (),
) -> Overview:
    """What the preferences page shows ``user_id``; ``outbound`` names the outbound
    channels she has set up (each gets a column)."""
    outbound = set(outbound)
    return Overview(
        choices=choices(session, user_id, categories, mail_on=mail_on),
        email_available=mail_on,
        site_enabled=site_on,
        email_schedule=email_schedule(session, user_id),
        default_timezone=zone_for(IMMEDIATE, user, site_timezone),
        channels=(*BASE_CHANNELS, *(c for c in OUTBOUND_CHANNELS if c in outbound)),
    )
