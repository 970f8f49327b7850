"""The badge and the inbox in a real headless chromium, after a real RQ worker ran the
jobs (in this process: the worker process itself is test_pipeline's and
test_live_browser's to prove)."""

from __future__ import annotations

import pytest

from tests.helpers.browser import needs_chromium, sign_in
from tests.helpers.jobs import run_jobs
from tests.helpers.wiki import edit, watch

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


def test_the_menus_actions_do_not_move_when_its_entries_arrive(app, live_url, browser):
    """The bell menu opens with its entries in it: opened empty, the entries arriving would
    push "Mark all as read" and "See all" down under a pointer already on its way."""
    with app.app_context():  # alice watches Onboarding (seed) and Home; bob saves each
        watch("home", "alice")
        for path in ("handbook/onboarding", "home"):
            edit(path, "bob", "An edit")
    run_jobs(app)
    page = browser.new_page()
    sign_in(page, live_url, "alice")

    def slow_list(route) -> None:
        page.wait_for_timeout(300)  # a list answered a moment after the click
        route.continue_()

    page.route("**/_notifications/api/notifications?*", slow_list)
    page.route("**/_notifications/api/notifications", slow_list)
    page.goto(f"{live_url}/")
    page.locator(".wn-badge .wn-badge-count").wait_for(state="visible")
    # Where "See all" stands in each frame the menu is shown in, from the first one.
    page.evaluate("""() => {
        window.seeAllAt = [];
        const menu = document.getElementById("wn-menu");
        const look = () => {
            if (!menu.hidden) window.seeAllAt.push(
                Math.round(menu.querySelector(".wn-menu-actions a").getBoundingClientRect().top));
            if (window.seeAllAt.length < 40) requestAnimationFrame(look);
        };
        requestAnimationFrame(look);
    }""")
    page.click(".wn-badge")
    page.locator(".wn-menu .wn-menu-entry").first.wait_for()
    page.wait_for_function("window.seeAllAt.length >= 40", timeout=10_000)
    seen = page.evaluate("window.seeAllAt")
    assert page.locator(".wn-menu .wn-menu-entry").count() == 2
    assert len(set(seen)) == 1, f"See all moved while the menu was shown: {sorted(set(seen))}"
