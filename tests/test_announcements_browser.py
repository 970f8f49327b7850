"""Admin → Notifications → Announcements in chromium (docs/rules.md#announcements): an
administrator publishes one from the page (a refused field said beside it first), and the
reader finds it pinned at the top of her inbox and first in the bell menu; axe finds nothing
wrong at 1280 and 390 px, light and dark, in English and French.

One wiki and one server for the module; chromium is the test process's
(tests/helpers/browser.py)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from tests.helpers.app import dispose, seeded_app
from tests.helpers.browser import expect_no_violations, needs_chromium, serving, sign_in
from tests.helpers.jobs import run_jobs
from tests.helpers.wiki import edit

pytestmark = needs_chromium

PAGE = "/_notifications/admin/announcements"
BODY = "The wiki is read-only on Saturday, see https://status.example.org. <b>Thanks</b>"


@pytest.fixture(scope="module")
def wiki(tmp_path_factory, redis_url):
    database_url = f"sqlite:///{tmp_path_factory.mktemp('announce') / 'wiki.sqlite3'}"
    app = seeded_app(database_url, WIKINOTIFY_REDIS_URL=redis_url,
                     WIKINOTIFY_QUEUE=f"wikinotify-test-{uuid.uuid4().hex[:10]}",
                     WIKINOTIFY_MAIL_ENABLED=True, WTF_CSRF_ENABLED=True)
    with serving(app) as url:
        yield SimpleNamespace(app=app, url=url)
    dispose(app)


@pytest.fixture(params=["en", "fr"])
def tab(browser, request):
    context = browser.new_context(locale=request.param)
    page = context.new_page()
    page.language = request.param
    yield page
    context.close()


def test_an_administrator_publishes_and_the_reader_finds_it_pinned(wiki, tab):
    sign_in(tab, wiki.url, "admin")
    tab.goto(wiki.url + "/_notifications/admin")
    tab.click(f"a[href$='{PAGE}']")  # linked from Admin → Notifications
    tab.fill("#wn-body", BODY)
    tab.click("button.wn-save")  # no title: refused, said beside the field
    tab.locator("#wn-title-error").wait_for()
    assert tab.locator("#wn-title").get_attribute("aria-invalid") == "true"
    assert tab.input_value("#wn-body") == BODY  # what was typed is kept
    expect_no_violations(tab, tab.language)

    title = f"Read-only on Saturday ({tab.language})"
    tab.fill("#wn-title", title)
    tab.check("input[name=important]")
    tab.click("button.wn-save")
    tab.locator(".wn-announcement h3", has_text=title).wait_for()
    expect_no_violations(tab, tab.language)

    with wiki.app.app_context():  # something newer than the announcement for alice
        edit("handbook/onboarding", "bob", f"Newer ({tab.language}).")
    run_jobs(wiki.app)
    tab.context.clear_cookies()
    sign_in(tab, wiki.url, "alice")
    tab.goto(wiki.url + "/_notifications/inbox")
    pinned = tab.locator(".wn-pinned-list .wn-entry").first
    pinned.wait_for()
    assert title in pinned.inner_text()
    link = pinned.locator(".wn-body a")
    assert link.get_attribute("href") == "https://status.example.org"
    assert "<b>Thanks</b>" in pinned.locator(".wn-body").inner_text()  # shown as written
    expect_no_violations(tab, tab.language)

    tab.goto(wiki.url + "/")  # the bell menu lists it first
    tab.click(".wn-badge")
    first = tab.locator(".wn-menu .wn-menu-entry").first
    first.wait_for()
    assert title in first.inner_text()
