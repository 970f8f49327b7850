"""The bell menu at a phone's width in a real headless chromium (docs/rules.md#the-inbox-api):
each entry shows its actor's initials in a circle and the comment's excerpt."""

from __future__ import annotations

import pytest

from demo import wiki
from tests.helpers.browser import needs_chromium, sign_in
from tests.helpers.jobs import run_jobs
from tests.helpers.wiki import page, user

pytestmark = needs_chromium


@pytest.fixture
def database_url(tmp_path):
    """The browser tests exercise the pages, not the database: SQLite is enough."""
    return f"sqlite:///{tmp_path / 'wiki.sqlite3'}"


def test_the_bell_menu_shows_the_excerpt_and_initials_at_390_px(app, live_url, browser):
    with app.app_context():  # alice watches Onboarding (seed)
        wiki.add_comment(page("handbook/onboarding"), user("bob"), "Bring a laptop")
    run_jobs(app)

    context = browser.new_context(viewport={"width": 390, "height": 800})
    tab = context.new_page()
    sign_in(tab, live_url, "alice")
    tab.click(".wn-badge")
    entry = tab.locator(".wn-menu .wn-menu-entry")
    entry.locator(".wn-excerpt").wait_for()
    assert entry.locator(".wn-excerpt").inner_text().strip("\u201c\u201d\"") == "Bring a laptop"
    face = entry.locator(".wn-face")
    assert face.inner_text() == "BB" and face.get_attribute("aria-hidden") == "true"
    box, menu = face.bounding_box(), tab.locator(".wn-menu").bounding_box()
    assert box["width"] == box["height"] == 24
    assert menu["x"] >= 0 and menu["x"] + menu["width"] <= 390
    context.close()
