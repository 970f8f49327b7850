"""On the reader's terms (docs/rules.md#digests) in a real headless chromium: Alice sets a daily
digest with the preferences page's own form and mutes a page with the page's own button; a real
RQ worker (in this process) fans Bob's edits out, and both take effect in what she is sent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import expect

from demo import wiki
from tests.helpers.browser import needs_chromium, sign_in
from tests.helpers.jobs import run_jobs
from tests.helpers.wiki import edit, entries_for, page, set_delay, user
from wikinotify.preferences.cadence import Schedule, next_digest, user_offset

pytestmark = [
    needs_chromium,
    pytest.mark.app_config(smtp=True, WIKINOTIFY_MAIL_ENABLED=True, WTF_CSRF_ENABLED=True),
]

ZONE = "America/New_York"
#: A bound on waiting for a page to answer (not a speed test).
WAIT_MS = 10_000


@pytest.fixture
def database_url(tmp_path):
    """The browser tests exercise the pages, not the database: SQLite is enough."""
    return f"sqlite:///{tmp_path / 'wiki.sqlite3'}"


def watched_rows(name: str, path: str) -> list:
    """``name``'s watched-page entries for ``path``, oldest first (a read entry is not
    grouped into, so opening a page starts a new one for its next edit)."""
    return entries_for(name, category="watchedPage", page_id=str(page(path).id))


def assert_held_for_the_digest(row, hour: int) -> None:
    """``row`` waits for the next ``hour`` o'clock in ZONE (plus Alice's fixed offset),
    not for the instance's window (0 here: it would have gone out at once)."""
    alice = str(user("alice").id)
    assert row.email_state == "pending"
    assert row.email_after == next_digest(
        Schedule("daily", hour, 0, ZONE), ZONE, alice, row.created_at)
    # The same, said without the code under test: that hour, local, within a day.
    local = (row.email_after - user_offset(alice)).astimezone(ZoneInfo(ZONE))
    assert (local.hour, local.minute, local.second) == (hour, 0, 0)
    assert row.created_at + timedelta(hours=10) < row.email_after
    assert row.email_after <= row.created_at + timedelta(hours=25)  # 25: a DST night


def test_a_digest_and_a_mute_set_in_the_browser_shape_what_alice_is_sent(
        app, live_url, browser, smtp):
    with app.app_context():
        set_delay(0)  # without the digest, Bob's edit would be mailed by the same worker run
    # Twelve hours from now in New York: far from both the window and the current hour.
    hour = (datetime.now(UTC).astimezone(ZoneInfo(ZONE)).hour + 12) % 24
    tab = browser.new_context().new_page()
    tab.set_default_timeout(WAIT_MS)
    sign_in(tab, live_url, "alice")

    # -- the digest, chosen with the page's form (no script involved) --
    tab.goto(f"{live_url}/_notifications/preferences")
    form = tab.locator("#wn-schedule-form")
    form.locator("select[name=cadence]").select_option("daily")
    form.locator("select[name=hour]").select_option(str(hour))
    form.locator("select[name=timezone]").select_option(ZONE)
    form.locator("button.wn-save-schedule").click()
    expect(tab.locator(".wn-saved")).to_have_text("Your email delivery is saved.")
    expect(form.locator("select[name=cadence]")).to_have_value("daily")
    expect(form.locator("select[name=hour]")).to_have_value(str(hour))
    expect(form.locator("select[name=timezone]")).to_have_value(ZONE)
    answer = tab.request.get(f"{live_url}/_notifications/api/preferences")
    assert answer.ok
    assert answer.json()["emailSchedule"] == {
        "cadence": "daily", "hour": hour, "weekday": 0, "timezone": ZONE}

    with app.app_context():  # Alice watches Onboarding and the Runbook (seed)
        edit("handbook/onboarding", "bob", "Held for the digest")
        # A mention stays immediate under a digest: it shows the worker's drain did run.
        wiki.add_comment(page("home"), user("carol"), "@alice a question")
    run_jobs(app)
    assert [m["Subject"] for m in smtp.inbox.messages] == [
        "[Main wiki] Home: 1 mention by Carol Danvers"]
    with app.app_context():
        [onboarding] = watched_rows("alice", "handbook/onboarding")
        assert_held_for_the_digest(onboarding, hour)

    # -- the mute, from the page's own button --
    tab.goto(f"{live_url}/pages/handbook/onboarding")
    button = tab.locator(".actions form.wn-mute button")
    expect(button).to_have_text("Mute this page")
    button.click()
    tab.wait_for_url(f"{live_url}/pages/handbook/onboarding")
    expect(button).to_have_text("Unmute this page")
    expect(button).to_have_attribute("aria-pressed", "true")
    mutes = tab.request.get(f"{live_url}/_notifications/api/mutes").json()["items"]
    assert [(m["kind"], m["id"]) for m in mutes] == [("page", onboarding.page_id)]
    with app.app_context():
        # The mail that was waiting for the muted page is cancelled with the mute.
        assert watched_rows("alice", "handbook/onboarding")[0].email_state == "skipped"

    with app.app_context():
        edit("handbook/onboarding", "bob", "Muted: Alice hears nothing of this")
        edit("ops/runbook", "bob", "Not muted: Alice is told, in her digest")
    run_jobs(app)
    with app.app_context():
        [muted] = watched_rows("alice", "handbook/onboarding")  # no new entry
        assert (muted.id, muted.count, muted.last_event_id, muted.email_state) == (
            onboarding.id, onboarding.count, onboarding.last_event_id, "skipped")
        [runbook] = watched_rows("alice", "ops/runbook")
        assert_held_for_the_digest(runbook, hour)
    assert len(smtp.inbox.messages) == 1  # still only the mention

    # Her inbox says the same: the Runbook's news on top, Onboarding still at one edit.
    tab.goto(f"{live_url}/_notifications/inbox")
    expect(tab.locator(".wn-entry .wn-text")).to_have_text([
        "Runbook was edited by Bob Builder",
        "Carol Danvers mentioned you on Home",
        "Onboarding was edited by Bob Builder",
    ])
