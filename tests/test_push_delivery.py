"""Browser push end to end (docs/channels.md#browser-push): a browser subscribes through the
API, an edit is fanned out, and the delivery engine pushes to a real push service on
127.0.0.1 (tests/helpers/push_service.py), which checks the VAPID signature against the key
the wiki serves, while the browser's side decrypts the payload with its own private key:
the payload must be the entry. Then every way a push service answers."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from demo.models import db
from tests.helpers.jobs import run_jobs
from tests.helpers.push_service import Browser, PushService
from tests.helpers.web import login
from tests.helpers.wiki import edit, entries_for, prefer, user, watch
from wikinotify import queue
from wikinotify.models import Delivery, Endpoint, PushSubscription, utcnow
from wikinotify.outbound import push

pytestmark = [
    pytest.mark.app_config(WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"], WIKINOTIFY_OUTBOUND_TIMEOUT=2),
]

CHROME = ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
          "Chrome/131.0.0.0 Safari/537.36")


@pytest.fixture
def service():
    service = PushService()
    yield service
    service.close()


def subscribe(client, service: PushService, name: str = "alice",
              device: str | None = None) -> Browser:
    """``name`` signs in and subscribes a new browser (``device``, else ``name``), as push.js
    does."""
    login(client, name)
    service.public_key = client.get("/_notifications/api/push/key").get_json()["publicKey"]
    browser = service.browser(device or name)
    answer = client.post("/_notifications/api/push/subscriptions", json=browser.subscription(),
                         headers={"User-Agent": CHROME})
    assert answer.status_code == 201, answer.get_json()
    return browser


def watched_edit(app, text: str = "One.") -> None:
    """Alice watches Home, Bob edits it, and the fan-out and the deliveries run."""
    with app.app_context():
        watch("home", "alice")
        edit("home", "bob", text)
    run_jobs(app)


def deliveries() -> list[Delivery]:
    db.session.expire_all()
    return list(db.session.scalars(sa.select(Delivery).order_by(Delivery.id)))


def subscriptions() -> list[PushSubscription]:
    db.session.expire_all()
    return list(db.session.scalars(sa.select(PushSubscription)))


def test_an_edit_is_pushed_signed_encrypted_and_is_the_entry(app, client, service):
    browser = subscribe(client, service)
    with app.app_context():
        watch("home", "alice")
        edit("home", "bob", "New welcome text.")
    run_jobs(app)
    (pushed,) = service.pushes(browser)  # VAPID checked, payload decrypted
    with app.app_context():
        (entry,) = entries_for("alice")
        assert pushed["payload"] == {
            "title": "Main wiki", "body": "Home was edited by Bob Builder",
            "url": "http://localhost:5000/pages/home", "tag": str(entry.id),
            "category": "watchedPage"}
        assert (pushed["urgency"], pushed["ttl"]) == ("normal", "86400")
        (row,) = subscriptions()
        assert row.last_used_at is not None and row.browser == "Chrome on Linux"
        assert [d.state for d in deliveries()] == ["delivered"]


def test_a_coalesced_entry_keeps_its_tag_so_it_replaces_the_first_on_screen(app, client, service):
    browser = subscribe(client, service)
    watched_edit(app)
    with app.app_context():
        edit("home", "bob", "Two.")
    run_jobs(app)
    first, second = (p["payload"] for p in service.pushes(browser))
    assert first["tag"] == second["tag"]
    assert second["body"] == "Home was edited twice, last by Bob Builder"


def test_a_french_reader_is_pushed_in_french_and_a_mention_is_urgent(app, client, service):
    browser = subscribe(client, service)
    with app.app_context():
        user("alice").locale = "fr"
        db.session.commit()
        watch("home", "alice")
        edit("home", "bob", "Nouveau texte.")
    run_jobs(app)
    (pushed,) = service.pushes(browser)
    assert pushed["payload"]["body"] == "La page «\u202fHome\u202f» a été modifiée par Bob Builder"
    assert push.delivery_of("mention") == ("high", 86400)
    assert push.delivery_of("watchedPage") == ("normal", 86400)


def deliver_again(app) -> None:
    """Make every waiting delivery due, and run the deliveries."""
    with app.app_context():
        db.session.execute(sa.update(Delivery).values(next_attempt_at=utcnow()))
        db.session.commit()
    queue.enqueue(app, queue.Job.DELIVER)
    run_jobs(app)


def test_the_push_column_decides_and_is_read_again_just_before_the_send(app, client, service):
    browser = subscribe(client, service)
    service.answer(browser.path, 503)
    watched_edit(app)
    assert len(service.pushes(browser)) == 1
    with app.app_context():
        # Turned off after the fan-out wrote the delivery, before its next attempt.
        prefer("alice", "watchedPage", push=False)
    service.answer(browser.path, 201)
    deliver_again(app)
    assert len(service.pushes(browser)) == 1
    with app.app_context():
        (delivery,) = deliveries()
        assert (delivery.state, delivery.error) == ("ineligible",
                                                    "push is off for this category")
        edit("home", "carol", "Two.")  # off at the fan-out: no delivery at all
    run_jobs(app)
    with app.app_context():
        assert len(deliveries()) == 1


@pytest.mark.parametrize("status", [404, 410])
def test_an_ended_subscription_is_removed(app, client, service, status):
    browser = subscribe(client, service)
    service.answer(browser.path, status)
    watched_edit(app)
    assert len(service.pushes(browser)) == 1
    with app.app_context():
        assert subscriptions() == [] and deliveries() == []
        assert db.session.scalars(sa.select(Endpoint)).all() == []
    assert client.get("/_notifications/api/push/subscriptions").get_json() == {"items": []}
    # Its column goes with it: the reader has no browser to push to.
    assert "push" not in client.get("/_notifications/api/preferences").get_json()["channels"]


def test_a_payload_refused_as_too_large_is_sent_once_more_without_its_excerpt(
        app, client, service):
    browser = subscribe(client, service)
    service.answer(browser.path, 413)
    watched_edit(app)
    first, second = service.pushes(browser)
    assert second["size"] <= first["size"]
    assert second["payload"]["tag"] == first["payload"]["tag"]
    with app.app_context():
        (delivery,) = deliveries()  # the service refused the smaller one too: no loop
        assert (delivery.state, delivery.response_code) == ("failed", 413)


def test_the_shrunk_payload_keeps_the_sentence_and_drops_the_excerpt():
    long = push.Payload("Wiki", "x" * 300 + "\nthe excerpt", "https://w/p", "7", "mention")
    small = long.shrunk()
    assert small.body == "x" * (push.SHRUNK_TEXT - 1) + "…"
    assert (small.tag, small.url) == ("7", "https://w/p")
    assert len(small.json()) < len(long.json())


def test_a_rate_limit_waits_as_long_as_the_service_asks(app, client, service):
    browser = subscribe(client, service)
    service.answer(browser.path, 429, headers={"Retry-After": "120"})
    watched_edit(app)
    assert len(service.pushes(browser)) == 1
    with app.app_context():
        (delivery,) = deliveries()
        assert (delivery.state, delivery.error_class) == ("pending", "rate_limit")
        wait = delivery.next_attempt_at - utcnow()
        assert timedelta(seconds=100) < wait <= timedelta(seconds=120)
        assert len(subscriptions()) == 1


def test_a_server_error_is_tried_again_and_then_delivered(app, client, service):
    browser = subscribe(client, service)
    service.answer(browser.path, 503)
    watched_edit(app)
    with app.app_context():
        (delivery,) = deliveries()
        assert (delivery.state, delivery.error_class) == ("pending", "transient")
    service.answer(browser.path, 201)
    deliver_again(app)
    assert len(service.pushes(browser)) == 2
    with app.app_context():
        assert [d.state for d in deliveries()] == ["delivered"]


def test_an_endpoint_the_guard_no_longer_admits_is_blocked_at_send_time(app, client, service):
    browser = subscribe(client, service)
    with app.app_context():
        watch("home", "alice")
        edit("home", "bob", "One.")
    app.config["WIKINOTIFY_OUTBOUND_ALLOW"] = []  # the operator took 127.0.0.1 back
    run_jobs(app)
    assert service.pushes(browser) == []
    with app.app_context():
        (delivery,) = deliveries()
        assert delivery.state == "blocked"
        assert "https" in delivery.error


def test_an_announcement_is_pushed_to_its_readers_urgently(app, client, service):
    """An announcement reaches push through the ordinary channel machinery
    (docs/rules.md#announcements): the reader's browser gets it, high urgency, its title."""
    browser = subscribe(client, service)
    login(client, "admin")
    published = client.post("/_notifications/api/admin/announcements", json={
        "title": "Read-only on Saturday", "body": "From 9:00, see https://status.example.org",
        "audience": {"everyone": True}})
    assert published.status_code == 201, published.get_json()
    client.post("/logout")
    run_jobs(app)
    (pushed,) = service.pushes(browser)  # alice's one browser; admin, its author, has none
    assert pushed["payload"]["category"] == "announcement"
    assert "Read-only on Saturday" in pushed["payload"]["body"]
    assert pushed["urgency"] == "high"


def test_signing_out_removes_the_sessions_subscriptions_and_nothing_reaches_the_browser(
        app, client, service):
    shared = subscribe(client, service)  # Alice, on a shared computer
    other = app.test_client()
    elsewhere = subscribe(other, service, device="phone")  # her own phone: another session
    client.post("/logout")
    login(client, "bob")
    with app.app_context():
        (kept,) = subscriptions()  # the phone's
        assert kept.browser == "Chrome on Linux"
        assert db.session.scalar(sa.select(sa.func.count(Endpoint.id))) == 1
    watched_edit(app)
    assert service.pushes(shared) == []
    assert len(service.pushes(elsewhere)) == 1
