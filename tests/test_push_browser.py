"""Browser push in a real headless chromium (docs/channels.md#browser-push): the service
worker registers from the preferences page; a push delivered through the DevTools protocol
(``ServiceWorker.deliverPushMessage``) shows a notification tagged with its entry, a
coalesced one replaces it, and a click opens the entry's link (or brings its tab forward);
the page lists the reader's browsers and removes one.

Push needs a profile of its own (Chrome has no Push API in incognito contexts, which
Playwright's ``new_context`` makes), so each test runs chromium with a persistent profile
in a temporary folder.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.browser import CHROMIUM, CHROMIUM_ARGS, needs_chromium, sign_in
from tests.helpers.push_service import PushService

pytestmark = [
    needs_chromium,
    pytest.mark.app_config(WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"], WTF_CSRF_ENABLED=True),
]

PREFERENCES = "/_notifications/preferences"


@pytest.fixture
def database_url(tmp_path):
    """The browser tests exercise the page and the worker, not the database."""
    return f"sqlite:///{tmp_path / 'wiki.sqlite3'}"


@pytest.fixture
def profile(tmp_path, live_url, playwright):
    """Chromium with a profile of its own, notifications allowed for the wiki (launched
    by the test process's one Playwright driver, tests/helpers/browser.py)."""
    context = playwright.chromium.launch_persistent_context(
        str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    context.grant_permissions(["notifications"], origin=live_url)
    try:
        yield context
    finally:
        context.close()


def registered(page) -> tuple[str, str]:
    """The scope and script of the worker the page registered, once active."""
    return tuple(page.evaluate(
        "navigator.serviceWorker.ready.then(r => [r.scope, r.active.scriptURL])"))


def registration_id(context, page) -> str:
    cdp = context.new_cdp_session(page)
    found: list[dict] = []
    cdp.on("ServiceWorker.workerRegistrationUpdated", lambda e: found.extend(e["registrations"]))
    cdp.send("ServiceWorker.enable")
    for _ in range(40):
        if found:
            break
        page.wait_for_timeout(50)
    (registration,) = [r for r in found if not r["isDeleted"]]
    return cdp, registration["registrationId"]


def shown_once(page, condition: str) -> list[list]:
    """The worker's notifications (title, body, tag, link) once ``condition`` (JavaScript,
    of their list ``ns``) holds, read in the same step that saw it hold: read again after
    it, a busy machine's headless chromium had sometimes let them go meanwhile (a full
    run's list came back empty right after a wait had seen one)."""
    return page.wait_for_function(
        "navigator.serviceWorker.ready.then(r => r.getNotifications())"
        f".then(ns => ({condition}) && ns.map(n => [n.title, n.body, n.tag, n.data.url]))"
    ).json_value()


#: A ``notificationclick`` on the worker's newest notification, in the worker itself. A
#: click on the screen cannot be made in headless chromium (no notification is drawn), and
#: an event made by script carries no user interaction, so chromium refuses the window the
#: handler opens or focuses ("Not allowed to open a window"): the worker's own calls are
#: recorded on their way through, then the notification's state is read back.
CLICK = """async () => {
  const calls = [];
  const open = self.clients.openWindow.bind(self.clients);
  self.clients.openWindow = (url) => {
    calls.push(["open", url]);
    return open(url).catch((error) => calls.push(["refused", error.name]));
  };
  const focus = WindowClient.prototype.focus;
  WindowClient.prototype.focus = function () {
    calls.push(["focus", this.url]);
    return focus.call(this).catch((error) => calls.push(["refused", error.name]));
  };
  const notifications = await self.registration.getNotifications();
  self.dispatchEvent(new NotificationEvent("notificationclick",
                                           {notification: notifications.at(-1)}));
  await new Promise((resolve) => setTimeout(resolve, 300));
  calls.push(["left", (await self.registration.getNotifications()).length]);
  return calls;
}"""


def test_a_pushed_entry_shows_tagged_is_replaced_when_coalesced_and_opens_on_click(
        profile, live_url):
    page = profile.new_page()
    sign_in(page, live_url)
    page.goto(live_url + PREFERENCES)
    assert registered(page) == (f"{live_url}/_notifications/",
                                f"{live_url}/_notifications/sw.js")
    cdp, registration = registration_id(profile, page)
    link = f"{live_url}/pages/home"

    def push(body: str) -> None:
        cdp.send("ServiceWorker.deliverPushMessage", {
            "origin": live_url, "registrationId": registration,
            "data": json.dumps({"title": "Main wiki", "body": body, "url": link, "tag": "7",
                                "category": "watchedPage"})})

    push("Home was edited by Bob Builder")
    assert shown_once(page, "ns.length === 1") == [
        ["Main wiki", "Home was edited by Bob Builder", "wikinotify-7", link]]
    push("Home was edited twice, last by Bob Builder")  # the same entry, coalesced
    assert shown_once(page, "ns.length > 0 && ns[0].body.includes('twice')") == [
        ["Main wiki", "Home was edited twice, last by Bob Builder", "wikinotify-7", link]]

    (worker,) = profile.service_workers
    assert worker.evaluate(CLICK) == [["open", link], ["refused", "InvalidAccessError"],
                                      ["left", 0]]
    # With the entry's page open in a tab, that tab is brought forward instead.
    push("Home was edited three times, last by Bob Builder")
    page.wait_for_function("navigator.serviceWorker.ready.then(r => r.getNotifications())"
                           ".then(ns => ns.length === 1)")
    tab = profile.new_page()
    tab.goto(link)
    calls = worker.evaluate(CLICK)
    assert calls[0] == ["focus", link] and calls[-1] == ["left", 0]
    assert not [call for call in calls if call[0] == "open"]


def test_the_page_lists_the_readers_browsers_and_removes_one(profile, live_url):
    service = PushService()
    try:
        page = profile.new_page()
        sign_in(page, live_url)
        page.goto(live_url + PREFERENCES)
        token = page.locator("#wn-push").get_attribute("data-csrf")
        answer = page.request.post(
            f"{live_url}/_notifications/api/push/subscriptions",
            data=service.browser("phone").subscription(),
            headers={"X-CSRFToken": token, "User-Agent": "Mozilla/5.0 (Linux; Android 14) "
                     "AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Mobile Safari/537.36"})
        assert answer.status == 201
        page.reload()
        row = page.locator(".wn-push-list tbody tr")
        assert row.count() == 1
        assert "Chrome on Android" in row.text_content()
        assert page.locator('th:has-text("Push")').count() == 1  # the grid's new column
        with page.expect_response(lambda r: r.request.method == "DELETE") as deleted:
            page.click(".wn-push-remove")
        assert deleted.value.status == 204
        page.wait_for_selector(".wn-push-list", state="detached")  # the page reloads itself
        assert page.locator('th:has-text("Push")').count() == 0
    finally:
        service.close()


def test_a_real_subscription_from_the_page(profile, live_url):
    page = profile.new_page()
    sign_in(page, live_url)
    page.goto(live_url + PREFERENCES)
    registered(page)
    key = page.evaluate("fetch('/_notifications/api/push/key').then(r => r.json())")["publicKey"]
    outcome = page.evaluate("""(key) => navigator.serviceWorker.ready.then((r) => Promise.race([
        r.pushManager.subscribe({userVisibleOnly: true, applicationServerKey: key})
          .then((s) => "subscribed " + s.endpoint, (e) => "refused " + e.name + ": " + e.message),
        new Promise((resolve) => setTimeout(() => resolve("no answer in 5 s"), 5000)),
    ]))""", key)
    if not outcome.startswith("subscribed"):
        pytest.skip("headless chromium here has no push service to subscribe with "
                    f"(pushManager.subscribe: {outcome}; Chrome's is Firebase Cloud "
                    "Messaging, out of reach with --disable-background-networking and no "
                    "network); the worker's push and click handling is tested through the "
                    "DevTools protocol above, and subscribing through the API in "
                    "tests/test_push_api.py")
    assert "fcm.googleapis.com" in outcome
