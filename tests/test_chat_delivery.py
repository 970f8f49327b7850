"""Chat end to end (docs/channels.md#chat): an edit on the wiki, the fan-out, and the message
through Apprise's own ntfy plugin to a real HTTP receiver on 127.0.0.1, in the
reader's language; then what the service's answers do to the delivery, with the same rows,
classes and guard as webhooks. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from demo.models import db
from tests.helpers.jobs import run_jobs, run_worker
from tests.helpers.wiki import edit, user, watch
from wikinotify.models import Delivery, Endpoint, utcnow
from wikinotify.outbound import endpoints

pytestmark = pytest.mark.app_config(WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"])


def add_chat(url: str, owner: str = "alice") -> int:
    endpoint = endpoints.create_chat(
        db.session, str(user(owner).id), url=url, hint="shown", categories=["watchedPage"]
    )
    db.session.commit()
    return endpoint.id


def deliveries_of(endpoint_id: int) -> list[Delivery]:
    db.session.expire_all()
    return list(db.session.scalars(
        db.select(Delivery).where(Delivery.endpoint_id == endpoint_id).order_by(Delivery.id)
    ))


def test_an_edit_reaches_the_readers_chat_through_apprise(app, receiver):
    with app.app_context():
        watch("home", "alice")
        endpoint_id = add_chat(f"ntfy://127.0.0.1:{receiver.port}/chat")
        edit("home", "bob", "New welcome text.")
    run_worker(app)  # the fan-out and the delivery, by a real `rq worker` process
    (request,) = receiver.requests
    message = json.loads(request.body)
    assert message["message"] == (
        "Home was edited by Bob Builder\nhttp://localhost:5000/pages/home")
    assert message["title"]
    with app.app_context():
        (delivery,) = deliveries_of(endpoint_id)
        assert (delivery.state, delivery.attempts, delivery.response_code) == ("delivered", 1, 200)
        assert delivery.latency_ms is not None


def test_a_french_reader_is_told_in_french_through_ntfy(app, receiver):
    with app.app_context():
        alice = user("alice")
        alice.locale = "fr"
        db.session.commit()
        watch("home", "alice")
        add_chat(f"ntfy://127.0.0.1:{receiver.port}/alice-wiki")
        edit("home", "bob", "Nouveau texte.")
    run_jobs(app)
    (request,) = receiver.requests
    message = json.loads(request.body)
    assert message["topic"] == "alice-wiki"
    assert message["message"] == (
        "La page «\u202fHome\u202f» a été modifiée par Bob Builder\n"
        "http://localhost:5000/pages/home")


def test_the_actor_and_other_readers_get_no_message(app, receiver):
    with app.app_context():
        watch("home", "alice")
        add_chat(f"ntfy://127.0.0.1:{receiver.port}/alice")
        edit("home", "alice", "My own edit.")
    run_jobs(app)
    assert receiver.requests == []


def test_a_rate_limited_message_waits_as_the_service_asks(app, receiver):
    receiver.answer("/", 429, headers={"Retry-After": "600"})
    with app.app_context():
        watch("home", "alice")
        endpoint_id = add_chat(f"ntfy://127.0.0.1:{receiver.port}/chat")
        edit("home", "bob", "Busy.")
    before = utcnow()
    run_jobs(app)
    with app.app_context():
        (delivery,) = deliveries_of(endpoint_id)
        assert (delivery.state, delivery.error_class, delivery.response_code) == (
            "pending", "rate_limit", 429)
        wait = delivery.next_attempt_at - before
        assert timedelta(seconds=590) <= wait <= timedelta(seconds=700)


def test_a_service_that_is_gone_disables_the_target(app, receiver):
    receiver.answer("/", 410)
    with app.app_context():
        watch("home", "alice")
        endpoint_id = add_chat(f"ntfy://127.0.0.1:{receiver.port}/chat")
        edit("home", "bob", "Anyone?")
    run_jobs(app)
    with app.app_context():
        (delivery,) = deliveries_of(endpoint_id)
        assert delivery.error_class == "gone"
        db.session.expire_all()
        assert db.session.get_one(Endpoint, endpoint_id).state == "disabled"


def test_an_address_the_guard_refuses_is_blocked_with_no_request(app, receiver):
    with app.app_context():
        watch("home", "alice")
        # Saved while 127.0.0.1 was allowed; the operator has since taken that back.
        endpoint_id = add_chat(f"ntfy://localhost:{receiver.port}/chat")
        app.config["WIKINOTIFY_OUTBOUND_ALLOW"] = []
        edit("home", "bob", "Blocked.")
    run_jobs(app)
    assert receiver.requests == []
    with app.app_context():
        (delivery,) = deliveries_of(endpoint_id)
        assert (delivery.state, delivery.error_class) == ("blocked", "blocked")
        assert "loopback address 127.0.0.1" in delivery.error


def test_a_generic_target_saved_before_is_refused_at_send_with_no_request(app, receiver):
    """A json:// target stored before generic targets were refused sends nothing: the
    rule that refuses it on save is the rule the sender applies."""
    with app.app_context():
        watch("home", "alice")
        endpoint_id = add_chat(f"json://127.0.0.1:{receiver.port}/chat?+X-Injected=yes")
        edit("home", "bob", "Flood?")
    run_jobs(app)
    assert receiver.requests == []
    with app.app_context():
        (delivery,) = deliveries_of(endpoint_id)
        assert (delivery.state, delivery.error_class) == ("failed", "permanent")
        assert "add a webhook instead" in delivery.error


def test_a_service_answering_100_mb_costs_the_worker_no_memory(app, receiver, rss_growth):
    with app.app_context():
        watch("home", "alice")
        endpoint_id = add_chat(f"ntfy://127.0.0.1:{receiver.port}/chat")
        edit("home", "bob", "A short answer first, so the run's own costs are paid.")
    run_jobs(app)
    receiver.answer("/", 200, stream=100 * 2**20)
    with app.app_context():
        edit("home", "bob", "A huge answer.")
    with rss_growth() as grown:
        run_jobs(app)
    assert grown() < 8 * 2**20, f"grew by {grown() / 2**20:.0f} MiB"
    with app.app_context():
        first, huge = deliveries_of(endpoint_id)
        # As for a webhook: the status decides; only the answer's first 64 KiB are read.
        assert (huge.state, huge.response_code) == ("delivered", 200)
