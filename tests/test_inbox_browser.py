"""The badge and the inbox in a real headless chromium, after a real RQ worker ran the
jobs (in this process: the worker process itself is test_pipeline's and
test_live_browser's to prove)."""

from __future__ import annotations

import pytest

from tests.helpers.browser import needs_chromium, sign_in
from tests.helpers.jobs import run_jobs
from tests.helpers.wiki import edit

pytestmark = needs_chromium


@pytest.fixture
def database_url(tmp_path):
    """The browser tests exercise the pages, not the database: SQLite is enough."""
    return f"sqlite:///{tmp_path / 'wiki.sqlite3'}"


def test_ten_edits_read_as_one_entry_with_a_badge_of_one(app, live_url, browser):
    with app.app_context():  # alice watches Onboarding (seed); bob saves it ten times
        for n in range(10):
            edit("handbook/onboarding", "bob", f"Edit {n}")
    run_jobs(app)

    page = browser.new_page()
    sign_in(page, live_url, "alice")
    page.goto(f"{live_url}/")
    badge = page.locator(".wn-badge .wn-badge-count")
    badge.wait_for(state="visible")
    assert badge.inner_text() == "1"
    with page.expect_response(lambda r: "/stream" in r.url):
        page.reload()  # the script follows the summary's stream from load on
    assert badge.inner_text() == "1"

    page.click(".wn-badge")  # the bell menu; its "See all" opens the inbox
    # The menu's entries come after it opens and push "See all" down: a click aimed
    # before they land can miss it (a CI run's click did).
    page.locator(".wn-menu .wn-menu-entry").first.wait_for()
    page.click(".wn-menu >> text=See all")
    page.wait_for_url(f"{live_url}/_notifications/inbox")
    entries = page.locator(".wn-entry")
    assert entries.count() == 1
    assert entries.first.locator(".wn-text").inner_text() == (
        "Onboarding was edited 10 times, last by Bob Builder"
    )
    # Following the entry opens the page, which marks it read (docs/rules.md#mail-cadence).
    entries.first.locator(".wn-text").click()
    page.wait_for_url(f"{live_url}/pages/handbook/onboarding")
    assert page.locator(".wn-badge .wn-badge-count").is_hidden()
