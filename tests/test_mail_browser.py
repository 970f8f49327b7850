"""The demo's mailbox in a real headless chromium: an edit produces a mail, the mail's
unsubscribe page works, and the preferences page then shows that email off."""

from __future__ import annotations

import pytest

from demo.mailbox import start_sink
from tests.helpers.browser import needs_chromium, sign_in
from tests.helpers.jobs import run_jobs
from tests.helpers.smtp import free_port
from tests.helpers.wiki import edit, set_delay


@pytest.fixture
def database_url(tmp_path):
    """The browser tests exercise the pages, not the database: SQLite is enough."""
    return f"sqlite:///{tmp_path / 'wiki.sqlite3'}"


@pytest.fixture
def sink(tmp_path):
    folder, port = str(tmp_path / "mailbox"), free_port()
    controller = start_sink(folder, "127.0.0.1", port)
    yield folder, port
    controller.stop()


def sink_settings(sink) -> dict:
    folder, port = sink
    return {"MAIL_SERVER": "127.0.0.1", "MAIL_PORT": port, "DEMO_MAILBOX": folder}


pytestmark = [
    needs_chromium,
    # A TESTING app's Flask-Mail suppresses sending; run_jobs sends from this app.
    pytest.mark.app_config(sink_settings, MAIL_DEFAULT_SENDER="Demo wiki <wiki@localhost>",
                           MAIL_SUPPRESS_SEND=False, WTF_CSRF_ENABLED=True),
]


@pytest.fixture
def mailed(app):
    """Bob edits a page Alice watches; a real RQ worker, in this process, fans it out and
    sends the mail (the pages under test read the mail, not the worker process)."""
    with app.app_context():
        set_delay(0)
        edit("handbook/onboarding", "bob", "A change for alice")
    run_jobs(app)


def open_mailbox(browser, live_url):
    """The demo's mailbox, in a browser of its own signed in as the administrator."""
    page = browser.new_page()
    sign_in(page, live_url, "admin")
    page.goto(f"{live_url}/demo/mailbox")
    return page


def email_checked(page, key: str) -> bool:
    return page.locator(f'input[name="{key}.email"]').is_checked()


def test_the_mails_unsubscribe_page_turns_its_email_off(mailed, live_url, browser):
    page = browser.new_page()
    sign_in(page, live_url, "alice")
    page.goto(f"{live_url}/_notifications/preferences")
    assert email_checked(page, "watchedPage")

    # The mailbox is the administrator's; the unsubscribe page needs no session, only the
    # mail's token, as when alice opens it from her mail client.
    mailbox = open_mailbox(browser, live_url)
    message = mailbox.locator("article.message").first
    assert "Onboarding was edited by Bob Builder" in message.inner_text()
    message.locator("text=Open the unsubscribe page").click()
    mailbox.wait_for_selector("text=This mail was about:")
    assert "Pages you watch" in mailbox.inner_text("main")
    mailbox.click("button.wn-unsubscribe-these")
    mailbox.wait_for_selector("text=You will no longer receive email for these notifications.")

    page.goto(f"{live_url}/_notifications/preferences")
    assert not email_checked(page, "watchedPage")
    assert page.locator('input[name="watchedPage.inApp"]').is_checked()
    assert email_checked(page, "mention")  # only the mail's categories


def test_the_one_click_button_posts_as_a_mail_client_would(mailed, live_url, browser):
    mailbox = open_mailbox(browser, live_url)
    with mailbox.expect_response(lambda r: r.request.method == "POST") as answer:
        mailbox.click("form.one-click button")
    assert answer.value.status == 200
    assert answer.value.body() == b""
    page = browser.new_page()
    sign_in(page, live_url, "alice")
    page.goto(f"{live_url}/_notifications/preferences")
    assert not email_checked(page, "watchedPage")
