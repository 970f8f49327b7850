"""Muting from where the noise is, in a real headless chromium: an inbox row's "Mute this
page" and a bell entry's "Mute <person>" send ``PUT /api/mutes`` (docs/rules.md#mutes)."""

from __future__ import annotations

import pytest

from demo.models import db
from tests.helpers.browser import needs_chromium, sign_in
from tests.helpers.jobs import run_jobs
from tests.helpers.wiki import edit, page, user
from wikinotify.preferences import mutes

pytestmark = needs_chromium


@pytest.fixture
def database_url(tmp_path):
    """The browser tests exercise the pages, not the database: SQLite is enough."""
    return f"sqlite:///{tmp_path / 'wiki.sqlite3'}"


def muted(app, kind: str, target: str) -> bool:
    with app.app_context():
        return mutes.is_muted(db.session, str(user("alice").id), kind, target)


def test_mute_this_page_in_the_inbox_and_mute_a_person_in_the_bell(app, live_url, browser):
    with app.app_context():  # alice watches Onboarding (seed)
        edit("handbook/onboarding", "bob", "An edit")
        onboarding, bob = str(page("handbook/onboarding").id), str(user("bob").id)
    run_jobs(app)

    tab = browser.new_page()
    sign_in(tab, live_url, "alice")
    tab.goto(f"{live_url}/_notifications/inbox")
    row = tab.locator(".wn-entry").first
    button = row.get_by_role("button", name="Mute this page")
    with tab.expect_response(lambda r: r.url.endswith("/api/mutes")) as answer:
        button.click()
    assert answer.value.status == 204
    row.get_by_role("button", name="Page muted").wait_for()
    assert muted(app, "page", onboarding) and not muted(app, "user", bob)

    tab.click(".wn-badge")
    person = tab.locator(".wn-menu").get_by_role("button", name="Mute Bob Builder")
    with tab.expect_response(lambda r: r.url.endswith("/api/mutes")) as answer:
        person.click()
    assert answer.value.status == 204
    tab.locator(".wn-menu").get_by_role("button", name="Bob Builder muted").wait_for()
    assert muted(app, "user", bob)
