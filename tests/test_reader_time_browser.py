"""A reader who chose no time zone sees her browser's (docs/rules.md#whose-time), in a real
headless chromium set to Los Angeles, after a real RQ worker (in this process) ran the jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from babel.dates import format_timedelta
from flask_babel import force_locale, gettext

from demo.models import db
from tests.helpers.browser import LANGUAGES, needs_chromium, sign_in
from tests.helpers.jobs import run_jobs
from tests.helpers.wiki import edit, entries_for
from wikinotify.models import Notification

pytestmark = needs_chromium


@pytest.fixture
def database_url(tmp_path):
    """The browser tests exercise the pages, not the database: SQLite is enough."""
    return f"sqlite:///{tmp_path / 'wiki.sqlite3'}"


def test_with_no_zone_chosen_the_inbox_and_the_bell_use_the_browser_s(app, live_url, browser):
    """alice chose no zone and the demo's site names none: the server draws the page in
    UTC, the page's script tells it the browser's zone, and the page is drawn again."""
    with app.app_context():  # alice watches Onboarding (seed)
        edit("handbook/onboarding", "bob", "An edit")
        run_jobs(app)
        [entry] = entries_for("alice")
        at = datetime(2026, 11, 12, 2, 49, tzinfo=UTC)  # 18:49 on the 11th in Los Angeles
        db.session.execute(sa.update(Notification).where(Notification.id == entry.id)
                           .values(created_at=at, updated_at=at))
        db.session.commit()

    context = browser.new_context(timezone_id="America/Los_Angeles", locale="en-US")
    page = context.new_page()
    sign_in(page, live_url, "alice")
    # The wiki's pages wrote the browser's zone already (the badge's script): forget it,
    # as on a first visit, so the inbox is drawn in UTC and asked for again.
    page.evaluate("document.cookie = 'wikinotify_tz=; path=/; max-age=0'")
    page.goto(f"{live_url}/_notifications/inbox")
    time = page.locator(".wn-entry time[datetime='2026-11-12T02:49:00Z']")
    time.filter(has_text="6:49\u202fPM").wait_for()  # once drawn again
    assert page.locator(".wn-day").inner_text() == "Wednesday, November 11, 2026"
    assert time.get_attribute("title") == "November 11, 2026, 6:49:00\u202fPM PST"

    page.click(".wn-badge")  # the bell menu says it the same way
    menu_time = page.locator(".wn-menu time")
    menu_time.wait_for()
    assert menu_time.inner_text() == "Nov 11, 2026, 6:49:00\u202fPM"
    assert menu_time.get_attribute("datetime").startswith("2026-11-12T02:49:00")
    context.close()


def test_a_time_said_just_now_ticks_to_a_minute_ago_while_the_page_stays_open(
        app, live_url, browser):
    """times.js says a recent time's age again every minute, from its ``datetime``, as the
    server words it, in each language offered; the exact time stays its title. The
    browser's clock is Playwright's, moved on a minute and five seconds."""
    from playwright.sync_api import expect
    with app.app_context():  # alice watches Onboarding (seed)
        edit("handbook/onboarding", "bob", "An edit")
    run_jobs(app)
    for language in LANGUAGES:
        with app.test_request_context(), force_locale(language):
            just_now = gettext("just now")
        a_minute_ago = format_timedelta(-timedelta(minutes=1), add_direction=True,
                                        format="short", locale=language)
        context = browser.new_context(locale=language)
        page = context.new_page()
        page.clock.install(time=datetime.now(UTC))
        sign_in(page, live_url, "alice")
        page.goto(f"{live_url}/_notifications/inbox")
        time = page.locator(".wn-entry time.wn-time")
        assert time.inner_text() == just_now, language
        exact = time.get_attribute("title")
        page.clock.fast_forward("01:05")
        expect(time).to_have_text(a_minute_ago)
        assert time.get_attribute("title") == exact
        context.close()
