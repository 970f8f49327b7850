"""The preferences page in a real headless chromium: toggles save without a reload, and
the same page works with JavaScript off."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tests.helpers.browser import needs_chromium, sign_in

pytestmark = [
    needs_chromium,
    pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True, WTF_CSRF_ENABLED=True),
]


@pytest.fixture
def database_url(tmp_path):
    """The browser tests exercise the page, not the database: SQLite is enough."""
    return f"sqlite:///{tmp_path / 'wiki.sqlite3'}"


def test_a_toggle_saves_without_a_page_reload(browser, live_url):
    page = browser.new_page()
    sign_in(page, live_url)
    page.goto(f"{live_url}/_notifications/preferences")
    page.evaluate("window.__sameDocument = true")
    mention_email = page.locator('input[name="mention.email"]')
    assert mention_email.is_checked()
    with page.expect_response(lambda r: r.request.method == "PUT") as put:
        mention_email.uncheck()
    assert put.value.status == 200
    page.wait_for_selector(".wn-status:has-text('Saved')")
    assert page.evaluate("window.__sameDocument") is True  # no reload happened
    page.reload()
    assert not page.locator('input[name="mention.email"]').is_checked()
    assert page.locator('input[name="mention.inApp"]').is_checked()


def test_stop_all_email_with_javascript(browser, live_url):
    page = browser.new_page()
    sign_in(page, live_url)
    page.goto(f"{live_url}/_notifications/preferences")
    with page.expect_response(lambda r: r.request.method == "PUT"):
        page.click("button.wn-stop-all")
    page.reload()
    emails = page.locator('input[name$=".email"]')
    assert emails.count() == 9  # the nine categories a reader chooses for
    assert not any(emails.nth(i).is_checked() for i in range(9))


def test_the_form_works_with_javascript_off(browser, live_url):
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    sign_in(page, live_url)
    page.goto(f"{live_url}/_notifications/preferences")
    page.check('input[name="pageCreated.inApp"]')
    page.click("button.wn-save")
    page.wait_for_selector("text=Your notification preferences are saved.")
    assert page.locator('input[name="pageCreated.inApp"]').is_checked()
    context.close()


def test_the_feed_link_fits_a_phone_and_its_reset_ends_the_old_one(browser, live_url):
    """docs/rules.md#the-feed: at 390 px the long link wraps inside the screen; the reset
    button (CSRF and all) gives a new link, and the old one answers 404."""
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    sign_in(page, live_url)
    page.goto(f"{live_url}/_notifications/preferences")
    link = page.locator('a.wn-feed-link[type="application/atom+xml"]')
    box = link.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    # The link is on the site's address (as a mail's are); fetched here from the live server.
    old = live_url + urlsplit(link.get_attribute("href")).path
    assert page.request.get(old).headers["content-type"] == "application/atom+xml; charset=utf-8"
    page.click("button.wn-feed-reset")
    page.wait_for_selector("text=Your feed has a new link. The old one no longer works.")
    new = live_url + urlsplit(page.locator("a.wn-feed-link").get_attribute("href")).path
    assert new != old
    assert page.request.get(old).status == 404
    assert page.request.get(new).status == 200
    context.close()
