"""Times as a reader reads them (docs/rules.md#whose-time): in her zone, in her language's
format, "3 min ago" for the last week, the exact time (its zone named) on hover and focus.

Pages and mails call the same helpers; which zone is hers is decided once, in
:func:`wikinotify.preferences.cadence.zone_for`.
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from babel import Locale
from babel.dates import format_date, format_datetime, format_time, format_timedelta
from markupsafe import Markup

from .catalogue import gettext

#: Newer than this, a time on a page is relative ("3 min ago"); older, a date and time.
RECENT = timedelta(days=7)
#: Newer than this, it is "just now" (Babel would say "in 0 sec."); ``times.js`` says the
#: age again every minute from there on.
JUST_NOW = timedelta(minutes=1)
#: The cookie a page's script writes the browser's zone in (docs/rules.md#whose-time).
BROWSER_ZONE_COOKIE = "wikinotify_tz"


def local(when: datetime, zone: str) -> datetime:
    """``when`` (UTC) on the clock of ``zone``."""
    return when.astimezone(ZoneInfo(zone))


def day_of(when: datetime, zone: str) -> date:
    """The reader's day ``when`` falls on, which the inbox groups by (not UTC's)."""
    return local(when, zone).date()


@functools.lru_cache(maxsize=4096)
def exact(when: datetime, zone: str, locale: str | Locale) -> str:
    """The date and time to the second, the zone named: "December 4, 2026, 6:49:00 PM PST".
    Kept for the next asker: the mail run says each entry's time twice a mail (text and
    HTML), and every reader mailed about one event is told the same instant, a tenth of
    a digest's build when Babel wrote it afresh each time."""
    return format_datetime(when, "long", tzinfo=ZoneInfo(zone), locale=locale)


def clock(when: datetime, zone: str, locale: str | Locale) -> str:
    """The time of day: "6:49 PM", "18:49"."""
    return format_time(when, "short", tzinfo=ZoneInfo(zone), locale=locale)


def day(value: date, locale: str) -> str:
    """A day heading: "Friday, December 4, 2026"."""
    return format_date(value, "full", locale=locale)


def shown(when: datetime, zone: str, locale: str | Locale, *, now: datetime, dated: bool,
          just_now: str | None = None) -> str:
    """What a page shows: "just now" within :data:`JUST_NOW`, relative within
    :data:`RECENT`; older, the time alone under a day heading (``dated`` False), else the
    date and the time. ``locale`` is the current one (the page's, whose catalogue says
    "just now", unless ``just_now`` says it already); parsed already, Babel does not
    parse it again (half of a relative time's 14 µs)."""
    age = now - when
    if timedelta(0) <= age < JUST_NOW:
        return gettext("just now") if just_now is None else just_now
    if timedelta(0) <= age < RECENT:
        return format_timedelta(-age, add_direction=True, format="short", locale=locale)
    if dated:
        return _dated(when, zone, locale)
    return clock(when, zone, locale)


@functools.lru_cache(maxsize=4096)
def _dated(when: datetime, zone: str, locale: str | Locale) -> str:
    """The date and time of an entry older than :data:`RECENT`, which no longer changes
    with the time it is read at: kept for the next asker, as :func:`exact` is (a deep
    page of the inbox says thirty of them, each as long as a relative time's five)."""
    return format_datetime(when, "medium", tzinfo=ZoneInfo(zone), locale=locale)


def element(when: datetime, zone: str, locale: str, *, now: datetime, dated: bool,
            guessed: bool) -> Markup:
    """``<time>`` for a page: the instant in ISO 8601 UTC, the exact time as its title,
    focusable so a keyboard reaches the title too (the stylesheet shows it on focus).
    ``guessed``: the zone is not the reader's choice, so the page's script may ask
    again with the browser's (``data-wn-zone``)."""
    instant = when.astimezone(UTC).isoformat().replace("+00:00", "Z")
    zone_attribute = Markup(' data-wn-zone="{}"').format(zone) if guessed else ""
    return Markup('<time class="wn-time" datetime="{}" title="{}" tabindex="0"{}>{}</time>').format(
        instant, exact(when, zone, locale), zone_attribute,
        shown(when, zone, locale, now=now, dated=dated))
