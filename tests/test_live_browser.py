"""The live badge, the bell menu and the live inbox in a real headless chromium, fed by
real Redis pub/sub, a real worker and, for one test, a second web process."""

from __future__ import annotations

import pytest

from tests.helpers.browser import needs_chromium, sign_in
from tests.helpers.jobs import run_jobs, run_worker
from tests.helpers.wiki import edit
from wikinotify.blueprint import stream_life

pytestmark = needs_chromium

#: A bound on waiting for something that should happen within a second (not a speed test).
WAIT_MS = 10_000


@pytest.fixture
def database_url(tmp_path):
    """The browser tests exercise the pages, not the database: SQLite is enough."""
    return f"sqlite:///{tmp_path / 'wiki.sqlite3'}"


@pytest.fixture
def one_entry(app):
    with app.app_context():  # alice watches Onboarding (seed)
        edit("handbook/onboarding", "bob", "One edit")
    # In this process: the entry is there before any page opens, so which process ran
    # the job cannot matter; the first test keeps a real `rq worker` for what can.
    run_jobs(app)


def signed_in_page(browser, live_url, path="/", username="alice"):
    page = browser.new_context().new_page()
    sign_in(page, live_url, username)
    with page.expect_response(lambda r: "/stream" in r.url):
        page.goto(f"{live_url}{path}")
    return page


def title_says_unread(page, unread: bool) -> None:
    """Wait until the tab's title does (or does not) start with the unread count: the
    script sets it after the badge, so it may lag the badge by a moment."""
    page.wait_for_function("unread => document.title.startsWith('(') === unread",
                           arg=unread, timeout=WAIT_MS)


def badge_reads(page, text: str) -> None:
    """Wait until the badge shows ``text`` ("" for no number)."""
    page.wait_for_function(
        """text => {
             const count = document.querySelector(".wn-badge .wn-badge-count");
             return text ? !count.hidden && count.textContent === text : count.hidden;
           }""", arg=text, timeout=WAIT_MS)


def test_a_workers_fan_out_reaches_the_badge_and_the_open_inbox(app, live_url, browser):
    home = signed_in_page(browser, live_url)
    inbox = signed_in_page(browser, live_url, "/_notifications/inbox")
    assert home.locator(".wn-badge .wn-badge-count").is_hidden()
    assert inbox.locator(".wn-entry").count() == 0
    with app.app_context():
        edit("handbook/onboarding", "bob", "Bob's edit")
    run_worker(app)
    badge_reads(home, "1")
    title_says_unread(home, True)
    assert home.title().startswith("(1) ")
    inbox.locator(".wn-entry.wn-new").wait_for(timeout=WAIT_MS)
    assert inbox.locator(".wn-entry .wn-text").first.inner_text() == (
        "Onboarding was edited by Bob Builder")


def test_an_entry_that_arrives_before_the_inbox_hears_the_stream_is_shown(
        app, live_url, browser):
    """The page's list was drawn before the entry; the stream's first summary already
    counts it. The inbox compares that summary with the one its list was drawn with, not
    with nothing: the entry appears (the race the accessibility test lost in CI)."""
    page = browser.new_context().new_page()
    sign_in(page, live_url)
    held = []  # the inbox's stream waits here until the entry is written
    page.route("**/_notifications/stream", lambda route: held.append(route))
    with page.expect_request("**/_notifications/stream"):
        page.goto(f"{live_url}/_notifications/inbox")
    page.locator(".wn-empty").wait_for()
    with app.app_context():
        edit("handbook/onboarding", "bob", "Bob's edit")
    run_jobs(app)
    held[-1].continue_()
    page.unroute("**/_notifications/stream")
    page.locator(".wn-entry.wn-new").wait_for(timeout=WAIT_MS)


def test_reading_in_another_tab_updates_the_badge(app, one_entry, live_url, browser):
    home = signed_in_page(browser, live_url)
    badge_reads(home, "1")
    title_says_unread(home, True)
    assert home.title().startswith("(1) ")
    other = home.context.new_page()
    other.goto(f"{live_url}/pages/handbook/onboarding")  # opening the page reads it
    badge_reads(home, "")
    title_says_unread(home, False)


def test_a_read_on_another_web_process_reaches_the_stream(
        app, one_entry, live_url, second_web_process, browser):
    home = signed_in_page(browser, live_url)
    badge_reads(home, "1")
    elsewhere = browser.new_context().new_page()
    sign_in(elsewhere, second_web_process)
    elsewhere.goto(f"{second_web_process}/pages/handbook/onboarding")
    badge_reads(home, "")


def test_the_bell_menu_works_from_the_keyboard(app, one_entry, live_url, browser):
    page = signed_in_page(browser, live_url)
    badge_reads(page, "1")
    bell = page.locator(".wn-badge")
    assert bell.get_attribute("aria-expanded") == "false"
    assert bell.get_attribute("aria-label") == "Notifications: 1 new"
    bell.focus()
    page.keyboard.press("Enter")
    menu = page.locator("#wn-menu")
    menu.wait_for(state="visible")
    assert bell.get_attribute("aria-expanded") == "true"
    entry = menu.locator(".wn-menu-entry")
    entry.first.wait_for()
    assert entry.count() == 1 and "wn-unread" in entry.first.get_attribute("class")
    assert entry.first.locator("a").inner_text() == "Onboarding was edited by Bob Builder"
    badge_reads(page, "")  # opening the menu is seeing: the number goes, unread stays
    page.keyboard.press("Escape")
    menu.wait_for(state="hidden")
    assert page.evaluate("document.activeElement.classList.contains('wn-badge')")

    page.keyboard.press("Enter")
    menu.locator(".wn-menu-entry").first.wait_for()
    menu.locator("text=Mark all as read").click()
    page.wait_for_function(
        "!document.querySelector('#wn-menu .wn-menu-entry.wn-unread')", timeout=WAIT_MS)
    menu.locator("text=See all").click()
    page.wait_for_url(f"{live_url}/_notifications/inbox")


def test_without_javascript_the_bell_is_a_link_to_the_inbox(app, one_entry, live_url, browser):
    page = browser.new_context(java_script_enabled=False).new_page()
    sign_in(page, live_url)
    page.goto(f"{live_url}/")
    assert page.locator(".wn-badge .wn-badge-count").inner_text() == "1"
    page.click(".wn-badge")
    page.wait_for_url(f"{live_url}/_notifications/inbox")


@pytest.mark.parametrize("app_config", [{"WIKINOTIFY_REDIS_URL": "redis://127.0.0.1:1"}])
def test_without_redis_the_page_works_and_the_badge_polls(app, live_url, browser):
    page = browser.new_context().new_page()
    sign_in(page, live_url)
    with page.expect_response(lambda r: "/summary" in r.url and r.status == 200):
        page.goto(f"{live_url}/")  # the stream answers 503, so the script polls instead
    assert page.locator(".wn-badge").is_visible()


@pytest.mark.parametrize("app_config", [{"WIKINOTIFY_STREAM_PER_ACCOUNT": 1}])
def test_a_tab_whose_stream_a_newer_tab_took_polls_and_does_not_take_it_back(
        app, one_entry, live_url, browser):
    first = signed_in_page(browser, live_url)  # holds the account's one stream
    badge_reads(first, "1")
    second = first.context.new_page()
    with first.expect_response(lambda r: "/summary" in r.url and r.status == 200), \
            second.expect_response(lambda r: "/stream" in r.url) as given:
        second.goto(f"{live_url}/")
    assert given.value.status == 200
    badge_reads(first, "1")
    badge_reads(second, "1")
    asked_again: list[str] = []
    first.on("request", lambda r: asked_again.append(r.url) if "/stream" in r.url else None)
    first.wait_for_timeout(stream_life.RETRY_MS + 1000)  # past the browser's own retry
    assert asked_again == []


def test_a_route_change_refreshes_the_summary_at_most_every_15_seconds(
        app, live_url, browser, one_entry):
    """docs/journey.md#the-live-badge: a single-page host's pushState (or the back button) asks
    for the summary, unless it was asked for within 15 s. Playwright's clock moves time."""
    page = browser.new_context().new_page()
    page.clock.install()
    sign_in(page, live_url, "alice")
    with page.expect_response(lambda r: "/stream" in r.url):
        page.goto(f"{live_url}/")
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/summary" in r.url else None)
    with page.expect_response(lambda r: "/summary" in r.url):
        page.evaluate("history.pushState({}, '', '/?route=1')")
    page.evaluate("history.pushState({}, '', '/?route=2')")  # within 15 s: not again
    page.evaluate("history.replaceState({}, '', '/?route=3')")
    page.clock.fast_forward(14_000)
    page.evaluate("history.back()")
    page.clock.fast_forward(2_000)  # 16 s since the last
    with page.expect_response(lambda r: "/summary" in r.url):
        page.evaluate("history.pushState({}, '', '/?route=4')")
    assert len(asked) == 2
    page.context.close()
