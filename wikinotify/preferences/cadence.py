"""When a notification's email is due (docs/rules.md#mail-cadence), and the digests that hold it
back (docs/rules.md#digests)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from zoneinfo import ZoneInfo, available_timezones

from ..categories import Category
from ..host import UserFacts
from ..models import Cadence, InstanceSettings

#: The local hour of a daily or weekly digest whose reader named none.
DEFAULT_HOUR = 9
#: The weekday of a weekly digest whose reader named none (``date.weekday()``: Monday).
DEFAULT_WEEKDAY = 0
#: The per-user offset inside the hour spans this much, so a wiki's digests trickle out.
SPREAD = timedelta(hours=1)


@cache
def known_timezones() -> frozenset[str]:
    """IANA names zoneinfo knows. A name is checked against this list rather than handed
    to ``ZoneInfo``, which would read a path such as ``../../etc/passwd`` as a zone file."""
    return frozenset(available_timezones())


@dataclass(frozen=True)
class Schedule:
    """A reader's email schedule; the defaults stand for a reader who chose nothing."""

    cadence: str = Cadence.IMMEDIATE
    hour: int = DEFAULT_HOUR
    weekday: int = DEFAULT_WEEKDAY
    #: The zone the reader chose; ``None`` follows the account's, then the site's, then UTC.
    timezone: str | None = None

    @property
    def is_digest(self) -> bool:
        return self.cadence != Cadence.IMMEDIATE


IMMEDIATE = Schedule()


def chosen_zone(schedule: Schedule, user: UserFacts | None) -> str | None:
    """The zone the reader chose: her email schedule's, else her account's in the wiki;
    ``None`` when she chose none. A name zoneinfo does not know (a host's typo) is
    passed over."""
    account = user.timezone if user is not None else None
    for name in (schedule.timezone, account):
        if name and name in known_timezones():
            return name
    return None


def zone_for(schedule: Schedule, user: UserFacts | None, site_timezone: str | None,
             browser: str | None = None) -> str:
    """The one rule for the reader's zone (docs/rules.md#whose-time), which a digest's
    hour is read in and every time she is shown: the one she chose, else her browser's
    (a page knows it, a mail does not), else the site's, else UTC."""
    for name in (chosen_zone(schedule, user), browser, site_timezone):
        if name and name in known_timezones():
            return name
    return "UTC"


def user_offset(user_id: str) -> timedelta:
    """A fixed point inside the hour for ``user_id``: the same reader always lands on the
    same second, and a wiki's readers spread over the hour instead of one spike
    (docs/rules.md#digests)."""
    digest = hashlib.sha256(user_id.encode()).digest()
    return timedelta(seconds=int.from_bytes(digest[:4], "big") % int(SPREAD.total_seconds()))


def _at(day: date, hour: int, zone: ZoneInfo) -> datetime:
    """``hour`` o'clock on ``day`` in ``zone``, as a UTC instant. An hour that does not
    exist that day (skipped by a spring-forward change) is read with the offset before
    the change, so it lands an hour later on the new clock, never on the day before."""
    return datetime.combine(day, time(hour), tzinfo=zone).astimezone(UTC)


def next_digest(schedule: Schedule, zone_name: str, user_id: str, now: datetime) -> datetime:
    """The first send time of ``schedule`` after ``now``: the top of the hour (hourly),
    or the chosen local hour (daily; weekly on its weekday), plus the reader's offset.

    The local date and hour are read through zoneinfo, each candidate day on its own, so
    a daylight-saving change never moves a 09:00 digest to 08:00 or 10:00."""
    offset = user_offset(user_id)
    zone = ZoneInfo(zone_name)
    local = now.astimezone(zone)
    if schedule.cadence == Cadence.HOURLY:
        # The local top of the hour, as an instant: within one hour the offset from UTC
        # does not change its minutes, so subtracting the local minutes is exact.
        top = now - timedelta(minutes=local.minute, seconds=local.second,
                              microseconds=local.microsecond)
        due = top + offset
        return due if due > now else due + timedelta(hours=1)
    # Eight days cover a weekly digest whose slot today has just passed.
    for days in range(8):
        day = local.date() + timedelta(days=days)
        if schedule.cadence == Cadence.WEEKLY and day.weekday() != schedule.weekday:
            continue
        due = _at(day, schedule.hour, zone) + offset
        if due > now:
            return due
    raise AssertionError(f"no send time for {schedule!r}")  # pragma: no cover


def email_after_for(
    user: UserFacts | None,
    now: datetime,
    instance: InstanceSettings,
    category: Category,
    schedule: Schedule = IMMEDIATE,
    site_timezone: str | None = None,
) -> datetime:
    """The one function that says when an entry's email goes out.

    A short window after the entry first appears (``email_delay_seconds``), so that a burst of
    saves joins one mail; or, for a reader with a digest, the digest's next send time.
    A category whose ``digest`` is off (what someone waits on: a mention, a reply, a
    review request) keeps the window whatever the schedule.

    ``user`` is read for a digest only (its zone and its place in the hour): without a
    schedule, the time is the same for everyone, and a fan-out asks once per batch.
    """
    if not schedule.is_digest or not category.digest:
        return now + timedelta(seconds=instance.email_delay_seconds)
    if user is None:
        raise ValueError("a digest's send time depends on its reader: pass the user")
    zone = zone_for(schedule, user, site_timezone)
    return next_digest(schedule, zone, user.id, now)
