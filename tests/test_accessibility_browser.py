"""axe-core finds nothing wrong with wikinotify's pages (docs/adopting.md#in-your-pages):
the inbox empty and with entries, the preferences, the
administration page showing an error, the webhooks and deliveries pages, the unsubscribe page
(valid, used and invalid link), a mail's "Mute this page" page and the bell menu open; each on
a desktop (1280 px) and a phone (390 px), in the light and the dark theme
(docs/adopting.md#themes), in every language offered (WIKINOTIFY_LANGUAGES). Also the inbox
grouped by page, an entry's Undo after Dismiss, the bell menu with the wiki's pictures of
people, and the page a form over the rate limit gets. axe judges the whole document, so the
demo wiki's layout around the pages too.

The four screens are judged one after the other in the same tab (the viewport resized, the
colour scheme emulated), which costs four axe runs but no more page loads.

One wiki and one server for the module (chromium is the test process's): the pages are
only read (each state a page needs is set up once, below), so sharing them costs no
independence."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
import sqlalchemy as sa

from demo.models import db
from tests.helpers.app import dispose, seeded_app
from tests.helpers.browser import (
    LANGUAGES,
    expect_no_violations,
    needs_chromium,
    serving,
    sign_in,
)
from tests.helpers.jobs import run_jobs
from tests.helpers.wiki import edit, entries_for, page, user, watch
from wikinotify import inbox
from wikinotify.instance_settings import instance_settings
from wikinotify.mail.tokens import make_mute_token, make_token
from wikinotify.models import Notification
from wikinotify.state import state

pytestmark = needs_chromium

INBOX = "/_notifications/inbox"
AVATAR = ('<svg xmlns="http://www.w3.org/2000/svg" width="24" height="24">'
          '<circle cx="12" cy="12" r="12" fill="#2b5c8a"/></svg>')
UNSUBSCRIBE = "/_notifications/unsubscribe"


@pytest.fixture(scope="module")
def wiki(tmp_path_factory, redis_url):
    """The demo wiki served on 127.0.0.1, where alice has three entries (one read, one a
    mention with its excerpt), and unsubscribe links for alice and bob."""
    from demo import wiki as demo_wiki

    database_url = f"sqlite:///{tmp_path_factory.mktemp('a11y') / 'wiki.sqlite3'}"
    app = seeded_app(
        database_url,
        WIKINOTIFY_REDIS_URL=redis_url,
        WIKINOTIFY_QUEUE=f"wikinotify-test-{uuid.uuid4().hex[:10]}",
        WIKINOTIFY_MAIL_ENABLED=True,
        WTF_CSRF_ENABLED=True,
        WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"],  # dave's webhook, below
        # Low enough for one test to reach the page a form over the limit gets; no other
        # test writes that often as one account.
        WIKINOTIFY_WRITE_RATE_LIMIT="10/minute",
    )
    # The wiki's pictures of people (Host.avatar_urls), served by the wiki itself: the
    # bell menu shows them instead of initials.
    app.add_url_rule("/test-avatar/<user_id>.svg", "test_avatar", lambda user_id: (
        AVATAR, 200, {"Content-Type": "image/svg+xml"}))
    with app.app_context():  # alice watches Onboarding and the Runbook (seed)
        edit("handbook/onboarding", "bob", "Day one, revised.")
        edit("ops/runbook", "bob", "1. Check the dashboards, then the logs.")
        demo_wiki.add_comment(page("handbook/onboarding"), user("bob"), "@alice can you review?")
    run_jobs(app)
    with app.app_context():
        alice = str(user("alice").id)
        runbook = next(e for e in entries_for("alice") if e.data.get("path") == "ops/runbook")
        assert inbox.mark_read(db.session, alice, runbook.id)
        secret = instance_settings(db.session).unsubscribe_secret
        tokens = {name: make_token(secret, str(user(name).id), ["watchedPage", "mention"])
                  for name in ("alice", "bob")}
        tokens["mute"] = make_mute_token(secret, alice, str(page("handbook/onboarding").id))
        tokens["onboarding"] = str(page("handbook/onboarding").id)  # the page filter's id
        db.session.commit()
        assert len(entries_for("alice")) == 3
    with app.app_context():
        host = state().host
    with serving(app) as url:
        host.avatar_urls = lambda ids: {i: f"{url}/test-avatar/{i}.svg" for i in ids}
        yield SimpleNamespace(app=app, url=url, tokens=tokens)
        del host.avatar_urls
    dispose(app)


@pytest.fixture(params=LANGUAGES)
def language(request):
    return request.param


@pytest.fixture
def tab(browser, language):
    """A fresh context (no cookies) whose browser asks for ``language``."""
    context = browser.new_context(locale=language)
    yield context.new_page()
    context.close()


def visit(tab, wiki, path: str, ready: str, who: str | None = None) -> None:
    """Sign in as ``who`` (a guest stays out), open ``path`` and wait for ``ready``."""
    if who is not None:
        sign_in(tab, wiki.url, who)
    tab.goto(f"{wiki.url}{path}")
    tab.locator(ready).first.wait_for()


#: Pages only opened: (path, with a token name in braces for an unsubscribe link; what
#: shows the page is ready; who is signed in, None for a guest).
OPENED = {
    "inbox empty": (INBOX, ".wn-empty", "bob"),  # bob watches nothing
    "preferences": ("/_notifications/preferences", ".wn-grid", "alice"),
    # An administrator's: with the link to Admin → Notifications.
    "inbox, an administrator's": (INBOX, "a[href$='/_notifications/admin']", "admin"),
    "preferences, an administrator's": ("/_notifications/preferences",
                                        "a[href$='/_notifications/admin']", "admin"),
    "unsubscribe, valid link": (UNSUBSCRIBE + "?t={alice}", "button.wn-unsubscribe-these", None),
    "unsubscribe, invalid link": (UNSUBSCRIBE + "?t=not-a-token", ".wn-unsubscribe .wn-error",
                                  None),
    # Grouped by page (?view=pages): a heading per page.
    "inbox, by page": (INBOX + "?view=pages", ".wn-entry", "alice"),
    # Filtered to one page's unread entries: the filter bar with its chip.
    "inbox, filtered": (INBOX + "?category=watchedPage&unread=1&page={onboarding}", ".wn-chip",
                        "alice"),
    "mute this page, from a mail": ("/_notifications/mute?t={mute}", "button.wn-mute-confirm",
                                    None),
}


@pytest.mark.parametrize("name", OPENED)
def test_a_page_as_opened(wiki, tab, language, name):
    path, ready, who = OPENED[name]
    visit(tab, wiki, path.format(**wiki.tokens), ready, who)
    expect_no_violations(tab, language)


def test_inbox_with_entries(wiki, tab, language):
    visit(tab, wiki, INBOX, ".wn-entry", who="alice")
    tab.locator(".wn-entry button.wn-mute").first.wait_for()  # shown by inbox.js
    assert tab.locator(".wn-entry").count() == 3
    assert tab.locator(".wn-entry.wn-unread").count() == 2
    assert tab.locator(".wn-excerpt").count() == 1
    quotes = tab.evaluate("getComputedStyle(document.querySelector('.wn-excerpt')).quotes")
    if language == "fr":  # French quotes, a narrow no-break space inside each
        assert quotes == '"\u00ab\u202f" "\u202f\u00bb"', quotes
    expect_no_violations(tab, language)


def test_admin_with_an_error_shown(wiki, tab, language):
    visit(tab, wiki, "/_notifications/admin", "#wn-retentionDays", who="admin")
    tab.fill("#wn-retentionDays", "0")
    tab.click("button.wn-save")
    tab.locator("#wn-retentionDays-error").wait_for()
    expect_no_violations(tab, language)


def test_unsubscribe_done(wiki, tab, language):
    visit(tab, wiki, f"{UNSUBSCRIBE}?t={wiki.tokens['bob']}", "button.wn-unsubscribe-these")
    tab.click("button.wn-unsubscribe-these")
    tab.locator(".wn-unsubscribe .wn-saved").wait_for()
    expect_no_violations(tab, language)


def test_an_entry_that_arrives_in_the_open_inbox(wiki, tab, language):
    """The open inbox shows it at the top, tinted (.wn-new): its text is judged on the tint."""
    with wiki.app.app_context():  # dave's inbox starts empty in each language
        db.session.execute(
            sa.delete(Notification).where(Notification.user_id == str(user("dave").id)))
        db.session.commit()
    visit(tab, wiki, INBOX, ".wn-empty", who="dave")
    with wiki.app.app_context():
        watch("handbook/onboarding", "dave")
        edit("handbook/onboarding", "bob", f"Day one, in {language}.")
    run_jobs(wiki.app)
    tab.locator(".wn-entry.wn-new").wait_for()
    expect_no_violations(tab, language)
    # Dismissed: its Undo, held on screen while it is judged (its timer stopped).
    tab.locator(".wn-entry form.wn-dismiss button").first.click()
    tab.locator(".wn-inbox .wn-toast .wn-undo").wait_for()
    tab.evaluate("clearTimeout(document.querySelector('.wn-inbox .wn-toast').wnTimer)")
    expect_no_violations(tab, language)


def test_the_page_a_form_over_the_rate_limit_gets(wiki, tab, language):
    """bob mutes alice with the pages' form until the write limit answers, then once more
    from the page: the page that says when to come back
    (docs/adopting.md#what-the-api-and-the-pages-refuse)."""
    visit(tab, wiki, "/_notifications/preferences", ".wn-grid", who="bob")
    with wiki.app.app_context():
        alice = str(user("alice").id)
    form = {"kind": "user", "id": alice, "action": "mute", "next": INBOX,
            "csrf_token": tab.locator("input[name=csrf_token]").first.input_value()}
    for _ in range(12):
        if tab.request.post(f"{wiki.url}/_notifications/mutes", form=form,
                            max_redirects=0).status == 429:
            break
    tab.evaluate("""form => { const f = document.createElement('form');
        f.method = 'post'; f.action = '/_notifications/mutes';
        for (const [k, v] of Object.entries(form)) {
          const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v;
          f.appendChild(i); }
        document.body.appendChild(f); f.submit(); }""", form)
    tab.locator(".wn-rate-limited .wn-error").wait_for()
    expect_no_violations(tab, language)


@pytest.mark.parametrize(("who", "entries"), [("alice", 3), ("bob", 0)])
def test_the_bell_menu_open(wiki, tab, language, who, entries):
    visit(tab, wiki, "/", ".wn-badge", who=who)
    tab.click(".wn-badge")
    tab.locator(".wn-menu .wn-menu-entry, .wn-menu .wn-empty").first.wait_for()
    assert tab.locator(".wn-menu-entry").count() == entries
    # Each actor's picture from the wiki (Host.avatar_urls), loaded, 24 px, decorative
    # (the sentence beside it names the person).
    faces = tab.locator(".wn-menu-entry img.wn-face")
    assert faces.count() == entries
    for face in faces.all():
        assert face.get_attribute("src").startswith(f"{wiki.url}/test-avatar/")
        assert face.get_attribute("alt") == ""
        face.evaluate("img => img.decode()")  # loaded, or this raises
        box = face.bounding_box()
        assert box["width"] == box["height"] == 24, box
    expect_no_violations(tab, language)


def test_webhooks_and_an_endpoints_deliveries(wiki, tab, language):
    visit(tab, wiki, "/_notifications/preferences/webhooks", "#wn-webhook-url", who="dave")
    tab.fill("#wn-webhook-url", f"http://127.0.0.1:9/{language}")
    tab.locator("form.wn-add-webhook input[name=categories]").first.check()
    tab.click("form.wn-add-webhook button[type=submit]")
    tab.locator("a[href*='/deliveries']").first.wait_for()
    expect_no_violations(tab, language)
    tab.locator("a[href*='/deliveries']").first.click()
    tab.locator(".wn-deliveries").wait_for()
    expect_no_violations(tab, language)


#: What the webhook form says of a private address, in each language (wikinotify/refusals.py).
REFUSED_URL = {
    "en": "This URL is refused: it leads to a private address (10.0.0.9)",
    "fr": "Cette URL est refusée\u202f: elle mène à une adresse privée (10.0.0.9)",
    "de": "Diese URL wird abgelehnt: Die URL führt zu einer privaten Adresse (10.0.0.9)",
}


def test_a_refusal_on_a_phone_in_the_dark(wiki, tab, language):
    """A refused webhook URL on a 390 px phone in the dark theme: the sentence, in the
    reader's language, beside the field (which is marked invalid and described by it) and in
    the summary at the top, linking to it; all of it on the screen; axe clean."""
    tab.set_viewport_size({"width": 390, "height": 844})
    tab.emulate_media(color_scheme="dark")
    visit(tab, wiki, "/_notifications/preferences/webhooks", "#wn-webhook-url", who="dave")
    tab.fill("#wn-webhook-url", "http://10.0.0.9/hook")
    tab.locator("form.wn-add-webhook input[name=categories]").first.check()
    tab.click("form.wn-add-webhook button[type=submit]")
    beside = tab.locator("#wn-webhook-url-error")
    beside.wait_for()
    assert beside.inner_text().startswith(REFUSED_URL[language])
    field = tab.locator("#wn-webhook-url")
    assert field.get_attribute("aria-invalid") == "true"
    assert "wn-webhook-url-error" in field.get_attribute("aria-describedby").split()
    summary = tab.locator(".wn-refusals a[href='#wn-webhook-url']")
    assert REFUSED_URL[language] in summary.inner_text()
    for part in (summary, beside, field):
        box = part.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    summary.click()  # the link takes her to the field
    assert tab.evaluate("location.hash") == "#wn-webhook-url"
    expect_no_violations(tab, language)


def test_the_bell_menu_on_a_phone_stays_on_screen_and_scrolls(wiki, browser):
    """At 390 px the menu opened off the left edge; on a short screen its last control,
    "See all" (after "Mark all as read"), must still be reached by scrolling the menu."""
    # A short window, so that alice's three entries overflow the menu and it must scroll.
    context = browser.new_context(viewport={"width": 390, "height": 260})
    tab = context.new_page()
    try:
        visit(tab, wiki, "/", ".wn-badge", who="alice")
        tab.click(".wn-badge")
        tab.locator(".wn-menu .wn-menu-entry").first.wait_for()
        box = tab.locator(".wn-menu").bounding_box()
        assert box["x"] >= 0 and box["y"] >= 0, box
        assert box["x"] + box["width"] <= 390 and box["y"] + box["height"] <= 260, box
        assert tab.evaluate("(m => m.scrollHeight > m.clientHeight)"
                            "(document.getElementById('wn-menu'))"), "nothing to scroll here"
        last = tab.locator(".wn-menu-actions a")
        last.scroll_into_view_if_needed()
        inside = last.bounding_box()
        assert box["y"] <= inside["y"]
        assert inside["y"] + inside["height"] <= box["y"] + box["height"]
        assert tab.evaluate("(a => { const r = a.getBoundingClientRect();"
                            " return document.elementFromPoint(r.x + r.width / 2,"
                            " r.y + r.height / 2) === a; })"
                            "(document.querySelector('.wn-menu-actions a'))")
    finally:
        context.close()


def test_the_filter_bar_fits_a_phone(wiki, browser):
    """At 390 px the filter bar, its chip included, wraps inside the screen: nothing of it
    sticks out, and the page does not scroll sideways."""
    context = browser.new_context(viewport={"width": 390, "height": 700})
    tab = context.new_page()
    try:
        path = f"{INBOX}?category=watchedPage&page={wiki.tokens['onboarding']}"
        visit(tab, wiki, path, ".wn-chip", who="alice")
        for part in (".wn-filter-bar", ".wn-filter-bar select", ".wn-filter-bar button",
                     ".wn-chip", ".wn-chip a"):
            box = tab.locator(part).bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= 390, (part, box)
        chip_remove = tab.locator(".wn-chip a").bounding_box()
        assert chip_remove["width"] >= 24 and chip_remove["height"] >= 24, chip_remove
        assert tab.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        context.close()
