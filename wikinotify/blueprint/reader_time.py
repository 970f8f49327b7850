"""Whose time a page shows, and the Jinja filters pages and mails format times with
(docs/rules.md#whose-time).

A page knows the reader's chosen zone, not her browser's: ``times.js`` writes the browser's
in a cookie and, the first time it differs from the zone a page was drawn in, asks for the
page again. A mail passes its reader's zone and locale in its context (``reader_zone``,
``reader_locale``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime

from babel import Locale
from flask import has_request_context, request
from flask_babel import get_locale
from jinja2 import pass_context
from jinja2.runtime import Context
from markupsafe import Markup

from .. import request_kept, times, vitals
from ..i18n import SOURCE_LANGUAGE
from ..login import caller_facts
from ..models import utcnow
from ..preferences.cadence import IMMEDIATE, zone_for
from ..preferences.grid import reader_zone
from ..state import state
from .core import bp, current_site_id, session


def page_zone() -> tuple[str, bool]:
    """The caller's zone on this request, and whether she chose it; asked once a request."""
    return request_kept.kept("zone", _page_zone)


def _page_zone() -> tuple[str, bool]:
    host = state().host
    site = host.site(current_site_id())
    site_timezone = site.timezone if site is not None else None
    browser = request.cookies.get(times.BROWSER_ZONE_COOKIE)
    user = caller_facts()
    if user is None:  # a guest's page (unsubscribe): the browser's, else the site's
        return zone_for(IMMEDIATE, None, site_timezone, browser), False
    return reader_zone(session(), user, site_timezone, browser)


def _zone(context: Context) -> tuple[str, bool]:
    """A mail names its reader's zone; a page asks the request."""
    given = context.get("reader_zone")
    if given is not None:
        return str(given), True
    if has_request_context():
        return page_zone()
    return "UTC", True


def _locale(context: Context | None = None) -> str:
    """A mail names its reader's locale (Flask-Babel's, asked once a mail: it costs
    as much as the formatting of a time); a page asks Flask-Babel."""
    given = context.get("reader_locale") if context is not None else None
    return str(given) if given is not None else str(get_locale() or SOURCE_LANGUAGE)


@bp.app_template_filter("wn_time")
@pass_context
def wn_time(context: Context, when: datetime, dated: bool = True) -> Markup:
    """``<time>`` on a page: "3 min ago" within a week, else the date and time (only the
    time under a day heading: ``dated=False``); the exact time on hover and focus."""
    zone, chosen = _zone(context)
    return times.element(when, zone, _locale(), now=utcnow(), dated=dated, guessed=not chosen)


@bp.app_template_filter("wn_exact")
@pass_context
def wn_exact(context: Context, when: datetime) -> str:
    """The exact time with its zone named, as a mail says it."""
    return times.exact(when, _zone(context)[0], _locale(context))


@bp.app_template_filter("wn_clock")
@pass_context
def wn_clock(context: Context, when: datetime) -> str:
    """The time of day in the reader's zone (an hour's bar on Admin)."""
    return times.clock(when, _zone(context)[0], _locale())


@bp.app_template_filter("wn_day")
def wn_day(value: date) -> str:
    """A day heading in the reader's language (``value``: her local day)."""
    return times.day(value, _locale())


@bp.app_template_filter("wn_count")
def wn_count(n: int) -> str:
    """A count that stops at the cap, as Admin shows it: "10,000+" (:func:`vitals.counted`)."""
    return vitals.counted(n, _locale())


def zone_and_locale() -> tuple[str, str]:
    """The caller's zone and language on this request (:func:`shown_in` takes them)."""
    return page_zone()[0], _locale()


def shown_in(whens: Sequence[datetime], zone: str, locale: str,
             just_now: str | None = None) -> list[dict[str, str]]:
    """Each of ``whens`` as it is shown in ``zone`` and ``locale`` now: "3 min ago" and
    the exact time; "just now" as ``just_now`` says it, else as the current catalogue
    does (a request's)."""
    parsed, now = Locale.parse(locale), utcnow()
    return [{"text": times.shown(when, zone, parsed, now=now, dated=True, just_now=just_now),
             "exact": times.exact(when, zone, parsed)} for when in whens]


def exact_here(when: datetime) -> str:
    """The exact time, its zone named, for the caller of this request."""
    return times.exact(when, page_zone()[0], _locale())


def local_day(when: datetime) -> date:
    """The caller's day ``when`` falls on: the inbox's days are hers, not UTC's."""
    return times.day_of(when, page_zone()[0])

