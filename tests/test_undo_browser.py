"""Undo and unread in a real headless chromium (docs/rules.md#undo): the inbox's Dismiss and
Mark all as read, then its Undo, reached from the keyboard, bring the entries back; the bell
menu's Mark all as read offers Undo too; a read entry's "Mark as unread" makes it unread."""

from __future__ import annotations

import pytest

from tests.helpers.browser import needs_chromium, sign_in
from tests.helpers.jobs import run_jobs
from tests.helpers.wiki import edit, watch

pytestmark = needs_chromium

INBOX = "/_notifications/inbox"


@pytest.fixture
def database_url(tmp_path):
    """The browser tests exercise the pages, not the database: SQLite is enough."""
    return f"sqlite:///{tmp_path / 'wiki.sqlite3'}"


def test_dismiss_and_mark_all_read_undo_and_mark_unread(app, live_url, browser):
    with app.app_context():  # alice watches Onboarding (seed) and Home
        watch("home", "alice")
        edit("handbook/onboarding", "bob", "Onboarding edit")
        edit("home", "bob", "Home edit")
    run_jobs(app)

    page = browser.new_page()
    sign_in(page, live_url, "alice")
    page.goto(f"{live_url}{INBOX}")
    entries = page.locator(".wn-days .wn-entry")
    assert entries.count() == 2
    toast = page.locator(".wn-inbox .wn-toast[role=status]")

    # Dismiss: the entry goes, the live region says so, and Undo (by keyboard) brings it back.
    first = entries.first.locator(".wn-text").inner_text()
    entries.first.locator("form.wn-dismiss button").click()
    page.locator(".wn-inbox .wn-toast .wn-undo").wait_for()
    assert "Notification dismissed." in toast.inner_text()
    assert entries.count() == 1
    page.locator(".wn-inbox .wn-toast .wn-undo").focus()
    page.keyboard.press("Enter")
    page.wait_for_function("document.querySelectorAll('.wn-days .wn-entry').length === 2")
    assert toast.inner_text() == "Undone."
    assert first in [e.inner_text() for e in entries.locator(".wn-text").all()]
    assert page.locator(".wn-days .wn-entry.wn-unread").count() == 2

    # Mark all as read, then Undo: both unread again.
    page.click(".wn-inbox form.wn-read-all button")
    page.locator(".wn-inbox .wn-toast .wn-undo").wait_for()
    page.wait_for_function("!document.querySelector('.wn-days .wn-entry.wn-unread')")
    page.click(".wn-inbox .wn-toast .wn-undo")
    page.wait_for_function("document.querySelectorAll('.wn-days .wn-unread').length === 2")

    # Read one, then "Mark as unread" (a plain form: the page reloads).
    entries.first.locator("text=Mark as read").click()
    page.wait_for_url(f"{live_url}{INBOX}")
    assert page.locator(".wn-days .wn-entry.wn-unread").count() == 1
    page.locator(".wn-days .wn-mark-unread").click()
    page.wait_for_url(f"{live_url}{INBOX}")
    assert page.locator(".wn-days .wn-entry.wn-unread").count() == 2

    # The bell menu: Mark all as read offers Undo in the menu.
    page.goto(f"{live_url}/")
    page.click(".wn-badge")
    page.locator(".wn-menu-list .wn-menu-entry").first.wait_for()
    page.click(".wn-menu-read-all")
    page.locator(".wn-menu .wn-toast .wn-undo").wait_for()
    page.wait_for_function("!document.querySelector('.wn-menu-list .wn-unread')")
    page.click(".wn-menu .wn-toast .wn-undo")
    page.wait_for_function("document.querySelectorAll('.wn-menu-list .wn-unread').length === 2")
    assert page.locator(".wn-menu .wn-toast").inner_text() == "Undone."
