"""Webhook deliveries end to end (docs/channels.md#webhooks): an edit on the wiki, the fan-out
through a real RQ worker, and a signed request to a real HTTP receiver on 127.0.0.1, which
verifies it with the ``standardwebhooks`` library as a real receiver would. Then every way a
receiver can answer, and what each one does to the delivery and the endpoint; on SQLite
and PostgreSQL."""

from __future__ import annotations

import json
import socket
import time
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from demo.models import Group, db
from tests.helpers.jobs import run_jobs, run_worker, wait_for
from tests.helpers.receiver import Receiver
from tests.helpers.wiki import edit, entries_for, main_site, page, user, watch
from wikinotify import queue
from wikinotify.categories import announcement
from wikinotify.models import Delivery, Endpoint, Event, Notification, Preference, utcnow
from wikinotify.outbound import engine, secrets_box, standard_webhooks, verification
from wikinotify.outbound.outcomes import retry_after_seconds
from wikinotify.state import state

pytestmark = [
    # The receiver is on 127.0.0.1, which only this setting lets through the SSRF guard;
    # a one-second total timeout makes "slow" quick to test.
    pytest.mark.app_config(WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"], WIKINOTIFY_OUTBOUND_TIMEOUT=1),
]


#: The signing secret of each webhook a test made, by its URL's path: every request the
#: receiver gets must verify with it.
SECRETS: dict[str, str] = {}


@pytest.fixture
def receiver():
    SECRETS.clear()
    receiver = Receiver()
    yield receiver
    receiver.close()
    assert_every_request_verifies(receiver)


def assert_every_request_verifies(receiver: Receiver) -> None:
    """Every request ``receiver`` got is a webhook's, signed to Standard Webhooks with that
    webhook's secret: verified with the library a real receiver uses."""
    for request in receiver.requests:
        secret = SECRETS.get(request.path)
        assert secret is not None, f"a request to {request.path}, which no webhook names"
        Webhook(secret).verify(request.body, headers_of(request))


def add_webhook(url: str, owner: str | None = "alice", *, state_: str = "active",
                categories: tuple[str, ...] = ("watchedPage",)) -> tuple[int, str]:
    """An endpoint row for ``owner`` (the API's part is tested in test_webhooks_api)."""
    secret = standard_webhooks.new_secret()
    SECRETS[urlsplit(url).path] = secret
    endpoint = Endpoint(
        kind="webhook", owner_id=str(user(owner).id) if owner else None, url=url,
        categories=list(categories), secret_encrypted=secrets_box.seal(secret),
        state=state_, verified_at=utcnow() if state_ == "active" else None,
    )
    db.session.add(endpoint)
    db.session.commit()
    return endpoint.id, secret


def queue_test(endpoint_id: int, message: str = "hello") -> int:
    """A ``webhook.test`` delivery, due now."""
    delivery = Delivery(endpoint_id=endpoint_id, message_id=standard_webhooks.new_message_id(),
                        type="webhook.test", payload={"message": message}, state="pending",
                        next_attempt_at=utcnow())
    db.session.add(delivery)
    db.session.commit()
    return delivery.id


def deliver(app) -> None:
    """One delivery run through a real RQ SimpleWorker, as the kick enqueues it."""
    queue.enqueue(app, queue.Job.DELIVER)
    run_jobs(app)


def delivery(delivery_id: int) -> Delivery:
    db.session.expire_all()
    return db.session.get_one(Delivery, delivery_id)


def endpoint(endpoint_id: int) -> Endpoint:
    db.session.expire_all()
    return db.session.get_one(Endpoint, endpoint_id)


def make_due(delivery_id: int) -> None:
    db.session.execute(sa.update(Delivery).where(Delivery.id == delivery_id)
                       .values(next_attempt_at=utcnow() - timedelta(seconds=1)))
    db.session.commit()


def deliveries_of(endpoint_id: int) -> list[Delivery]:
    db.session.expire_all()
    query = sa.select(Delivery).where(Delivery.endpoint_id == endpoint_id)
    return list(db.session.scalars(query.order_by(Delivery.id)))


def headers_of(request) -> dict[str, str]:
    return {k.lower(): v for k, v in request.headers.items()}


# -- an edit, delivered and verified ------------------------------------------------------


def test_an_edit_reaches_the_readers_webhook_signed_to_the_standard(app, receiver):
    with app.app_context():
        watch("home", "alice")
        endpoint_id, secret = add_webhook(receiver.url("/in"))
        edit("home", "bob", "New welcome text.")
    run_worker(app)  # the fan-out and the delivery, by a real `rq worker` process
    (request,) = receiver.at("/in")
    headers = headers_of(request)
    payload = Webhook(secret).verify(request.body, headers)
    assert payload["type"] == "watchedPage"
    data = payload["data"]
    assert data["category"] == "watchedPage"
    assert data["text"] == "Home was edited by Bob Builder"
    # The inbox API's fields, with the link made absolute for a receiver outside the wiki.
    assert data["url"] == "http://localhost:5000/pages/home"
    assert data["page"] == {"id": data["page"]["id"], "title": "Home", "path": "home"}
    assert {"id", "variant", "count", "readAt", "createdAt", "actor"} <= set(data)
    # A receiver refuses a tampered body, and a replay once the timestamp is stale.
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(request.body.replace(b"Home", b"Hack"), headers)
    stale = {**headers, "webhook-timestamp": str(int(datetime.now(UTC).timestamp()) - 600)}
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(secret).verify(request.body, stale)
    with app.app_context():
        (row,) = deliveries_of(endpoint_id)
        assert (row.state, row.attempts, row.response_code) == ("delivered", 1, 200)
        assert row.message_id == headers["webhook-id"]
        assert row.user_id == str(user("alice").id) and row.latency_ms is not None


def test_a_replayed_fan_out_adds_no_second_delivery(app, receiver):
    from wikinotify.categories import FanoutContext
    from wikinotify.models import Event

    with app.app_context():
        watch("home", "alice")
        endpoint_id, _ = add_webhook(receiver.url("/in"))
        edit("home", "bob", "Once.")
    run_jobs(app)
    with app.app_context():
        st = state(app)
        event = db.session.scalars(sa.select(Event)).one()
        event.cursor, event.processed_at = None, None
        db.session.commit()
        from wikinotify.pipeline.events import fan_out

        ctx = FanoutContext(host=st.host, session=db.session())
        fan_out(ctx, event, st.registry.listening(event.kind, event.origin),
                mail_on=False, deadline=float("inf"))
        assert len(deliveries_of(endpoint_id)) == 1


def test_a_reader_with_the_channel_off_gets_an_entry_but_no_delivery(app, receiver):
    with app.app_context():
        watch("home", "alice")
        endpoint_id, _ = add_webhook(receiver.url("/in"))
        db.session.add(Preference(user_id=str(user("alice").id), category="watchedPage",
                                  channel="webhook", enabled=False))
        db.session.commit()
        edit("home", "bob", "Quietly.")
    run_jobs(app)
    with app.app_context():
        assert deliveries_of(endpoint_id) == []
        assert len(entries_for("alice")) == 1
    assert receiver.requests == []


# -- verification ---------------------------------------------------------------------------


def test_a_new_endpoint_is_active_only_after_it_echoes_the_challenge(app, receiver):
    with app.app_context():
        watch("home", "alice")
        endpoint_id, secret = add_webhook(receiver.url("/in"), state_="unverified")
        verification.start(db.session(), endpoint(endpoint_id))
        db.session.commit()
        challenge = endpoint(endpoint_id).challenge
        # Unverified: the edit gives the endpoint nothing.
        edit("home", "bob", "Before verification.")
    receiver.answer("/in", 200, body=json.dumps({"challenge": challenge}).encode())
    deliver(app)  # the API kicks a run after it queues the verification
    (request,) = receiver.at("/in")
    payload = Webhook(secret).verify(request.body, headers_of(request))
    assert payload["type"] == "webhook.verification"
    assert payload["data"] == {"challenge": challenge}
    with app.app_context():
        verified = endpoint(endpoint_id)
        assert verified.state == "active" and verified.verified_at is not None
        assert [d.type for d in deliveries_of(endpoint_id)] == ["webhook.verification"]
        edit("home", "bob", "After verification.")
    run_jobs(app)
    assert [json.loads(r.body)["type"] for r in receiver.at("/in")] == [
        "webhook.verification", "watchedPage"]


def test_a_2xx_without_the_echo_leaves_the_endpoint_unverified(app, receiver):
    with app.app_context():
        endpoint_id, _ = add_webhook(receiver.url("/in"), state_="unverified")
        row = verification.start(db.session(), endpoint(endpoint_id))
        db.session.commit()
        delivery_id = row.id
    deliver(app)
    with app.app_context():
        assert endpoint(endpoint_id).state == "unverified"
        failed = delivery(delivery_id)
        assert (failed.state, failed.error_class, failed.response_code) == (
            "failed", "permanent", 200)
        assert "challenge" in failed.error


# -- what each answer does ------------------------------------------------------------------


def test_the_webhook_id_is_the_same_on_every_retry(app, receiver):
    receiver.answer("/in", 500)
    with app.app_context():
        endpoint_id, secret = add_webhook(receiver.url("/in"))
        delivery_id = queue_test(endpoint_id)
    deliver(app)
    with app.app_context():
        first = delivery(delivery_id)
        assert (first.state, first.attempts, first.error_class) == ("pending", 1, "transient")
        wait = first.next_attempt_at - utcnow()
        # The first back-off is a minute, give or take the jitter.
        assert timedelta(seconds=40) < wait <= timedelta(seconds=72)
        make_due(delivery_id)
    receiver.answer("/in", 204)
    deliver(app)
    with app.app_context():
        done = delivery(delivery_id)
        assert (done.state, done.attempts, done.response_code) == ("delivered", 2, 204)
        assert endpoint(endpoint_id).failing_since is None
        message_id = done.message_id
    ids = {headers_of(r)["webhook-id"] for r in receiver.at("/in")}
    assert ids == {message_id}
    assert_every_request_verifies(receiver)


def free_port() -> int:
    """A port nothing listens on: bound, then closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("answer", "state", "error_class", "error"),
    [
        ({"status": 200, "delay": 2.0}, "pending", "transient", "timed out after 1 s"),
        ("refused", "pending", "transient", "could not connect"),
        ({"status": 500}, "pending", "transient", "the receiver answered 500"),
        ({"status": 503}, "pending", "transient", "the receiver answered 503"),
        ({"status": 408}, "pending", "transient", "the receiver answered 408"),
        ({"status": 400}, "failed", "permanent", "the receiver answered 400"),
        ({"status": 404}, "failed", "permanent", "the receiver answered 404"),
        ({"status": 302, "headers": {"Location": "http://169.254.169.254/latest/meta-data/"}},
         "failed", "permanent", "redirected to http://169.254.169.254/latest/meta-data/"),
    ],
    ids=["slow", "refused", "500", "503", "408", "400", "404", "redirect-to-metadata"],
)
def test_each_kind_of_answer_gets_its_documented_class(app, receiver, answer, state,
                                                       error_class, error):
    if answer == "refused":
        url = f"http://127.0.0.1:{free_port()}/in"
    else:
        receiver.answer("/in", **answer)
        url = receiver.url("/in")
    with app.app_context():
        endpoint_id, _ = add_webhook(url)
        delivery_id = queue_test(endpoint_id)
    deliver(app)
    with app.app_context():
        row = delivery(delivery_id)
        assert (row.state, row.attempts, row.error_class) == (state, 1, error_class)
        assert error in row.error
        # A failure starts the endpoint's failing streak; it stays on (for three days).
        assert endpoint(endpoint_id).state == "active"
        assert endpoint(endpoint_id).failing_since is not None
    # A redirect is never followed: the receiver saw one request, nothing else was asked.
    # (The slow answer's request may be read by the receiver's thread only after the
    # sender gave up on it, on a busy machine: wait for it, then look for any other.)
    if answer != "refused":
        wait_for(lambda: receiver.at("/in"), seconds=10)
    assert len(receiver.at("/in")) == (0 if answer == "refused" else 1)
    assert_every_request_verifies(receiver)


def test_a_receiver_trickling_its_answer_is_cut_off_at_the_total_timeout(app, receiver):
    # One byte of the status line and headers every 0.4 s: never idle long enough for a
    # read timeout, and 40 bytes would take 16 s. The total timeout here is 1 s.
    receiver.answer("/in", 200, trickle=0.4)
    with app.app_context():
        endpoint_id, _ = add_webhook(receiver.url("/in"))
        delivery_id = queue_test(endpoint_id)
        st = state(app)
        started = time.monotonic()
        engine.run(app, db.session(), st.host, st.registry)
        took = time.monotonic() - started
        row = delivery(delivery_id)
        assert (row.state, row.error_class, row.error) == (
            "pending", "transient", "timed out after 1 s")
        # Cut off at its deadline, not when the receiver finished (the lease outlives it).
        assert row.latency_ms < 2000 and took < 5
    assert len(receiver.at("/in")) == 1


def test_a_429_waits_as_long_as_retry_after_says(app, receiver):
    receiver.answer("/in", 429, headers={"Retry-After": "600"})
    with app.app_context():
        endpoint_id, _ = add_webhook(receiver.url("/in"))
        delivery_id = queue_test(endpoint_id)
    deliver(app)
    with app.app_context():
        row = delivery(delivery_id)
        assert (row.state, row.error_class, row.response_code) == ("pending", "rate_limit", 429)
        wait = row.next_attempt_at - utcnow()
        assert timedelta(seconds=590) < wait <= timedelta(seconds=600)


def test_retry_after_as_an_http_date_is_honoured_and_capped_at_a_day():
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert retry_after_seconds("Tue, 01 Dec 2026 12:05:00 GMT", now) == 300
    assert retry_after_seconds("999999", now) == 24 * 3600
    assert retry_after_seconds("soon", now) is None


def test_the_back_off_spreads_the_attempts_over_about_a_day():
    waits = [engine.RETRY.retry_in(n, rng=lambda: 0.5) or timedelta()
             for n in range(1, engine.RETRY.attempts)]
    minutes = [1, 5, 30, 2 * 60, 5 * 60, 10 * 60, 14 * 60]
    assert waits == [timedelta(minutes=m) for m in minutes]
    assert engine.RETRY.retry_in(engine.RETRY.attempts) is None
    assert timedelta(hours=24) < sum(waits, timedelta()) < timedelta(hours=36)
    assert engine.RETRY.wait(1, rng=lambda: 0.0) == timedelta(seconds=48)
    assert engine.RETRY.wait(1, rng=lambda: 1.0) == timedelta(seconds=72)


def test_the_last_attempt_fails_for_good(app, receiver):
    receiver.answer("/in", 500)
    with app.app_context():
        endpoint_id, _ = add_webhook(receiver.url("/in"))
        delivery_id = queue_test(endpoint_id)
        db.session.execute(sa.update(Delivery).values(attempts=engine.RETRY.attempts - 1))
        db.session.commit()
    deliver(app)
    with app.app_context():
        row = delivery(delivery_id)
        assert (row.state, row.attempts, row.next_attempt_at) == (
            "failed", engine.RETRY.attempts, None)


def test_a_410_disables_the_endpoint_and_tells_its_owner_in_app(app, receiver):
    receiver.answer("/in", 410)
    with app.app_context():
        endpoint_id, _ = add_webhook(receiver.url("/in"))
        delivery_id = queue_test(endpoint_id)
        waiting_id = queue_test(endpoint_id, "second")
        make_due(delivery_id)  # the first goes first
    deliver(app)  # the run also kicks the fan-out of the notice
    run_jobs(app)
    with app.app_context():
        gone = endpoint(endpoint_id)
        assert gone.state == "disabled"
        assert gone.disabled_reason == "The receiver answered 410 Gone."
        assert (delivery(delivery_id).state, delivery(delivery_id).error_class) == (
            "failed", "gone")
        assert delivery(waiting_id).state == "cancelled"
        (notice,) = entries_for("alice", category="endpointDisabled")
        assert notice.in_app and notice.email_state == "none"
    assert len(receiver.at("/in")) == 1


# -- the SSRF guard at send time, and eligibility ----------------------------------------------


@pytest.mark.parametrize(
    ("url", "state", "error_class", "error"),
    [
        # Saved when it was public, say; it resolves to the metadata address today: final.
        ("http://169.254.169.254/latest/meta-data/", "blocked", "blocked",
         "resolves to a link-local address 169.254.169.254"),
        # .invalid never resolves (RFC 6761): a DNS failure may pass, so it is tried again.
        ("http://hooks.no-such-host.invalid/in", "pending", "transient",
         "the name hooks.no-such-host.invalid does not resolve"),
    ],
    ids=["refused-address", "unresolved-name"],
)
def test_a_url_the_guard_stops_at_send_time_makes_no_request(app, url, state, error_class,
                                                             error):
    with app.app_context():
        endpoint_id, _ = add_webhook(url)
        delivery_id = queue_test(endpoint_id)
    deliver(app)
    with app.app_context():
        row = delivery(delivery_id)
        assert (row.state, row.error_class, row.response_code, row.latency_ms) == (
            state, error_class, None, None)
        assert row.error == error


def test_a_name_resolving_to_loopback_is_blocked_unless_that_address_is_allowed(
    app, receiver
):
    with app.app_context():
        app.config["WIKINOTIFY_OUTBOUND_ALLOW"] = []
        endpoint_id, _ = add_webhook(f"http://localhost:{receiver.port}/in")
        delivery_id = queue_test(endpoint_id)
        st = state(app)
        engine.run(app, db.session(), st.host, st.registry)
        row = delivery(delivery_id)
        assert row.state == "blocked" and "loopback address" in row.error
    assert receiver.requests == []


def fanned_out_to_alice(app, receiver) -> tuple[int, int]:
    """Alice watches the runbook (Ops only) with a webhook; Bob edits it; the fan-out
    writes her delivery, which is not sent yet."""
    with app.app_context():
        watch("ops/runbook", "alice")
        endpoint_id, _ = add_webhook(receiver.url("/in"))
        edit("ops/runbook", "bob", "Step 2: page the on-call.")
        from wikinotify.jobs import dispatch

        dispatch()
        (row,) = deliveries_of(endpoint_id)
        assert row.state == "pending"
        return endpoint_id, row.id


def test_a_reader_who_lost_access_since_the_fan_out_is_sent_nothing(app, receiver):
    endpoint_id, delivery_id = fanned_out_to_alice(app, receiver)
    with app.app_context():
        ops = db.session.scalar(sa.select(Group).where(Group.name == "Ops"))
        ops.members.remove(user("alice"))
        db.session.commit()
    deliver(app)
    with app.app_context():
        row = delivery(delivery_id)
        assert (row.state, row.error_class) == ("ineligible", "ineligible")
        assert row.error == "the reader can no longer see this page"
        assert row.attempts == 1 and row.response_code is None
    assert receiver.requests == []


def test_a_reader_who_turned_the_channel_off_since_the_fan_out_is_sent_nothing(app, receiver):
    endpoint_id, delivery_id = fanned_out_to_alice(app, receiver)
    with app.app_context():
        db.session.add(Preference(user_id=str(user("alice").id), category="watchedPage",
                                  channel="webhook", enabled=False))
        db.session.commit()
    deliver(app)
    with app.app_context():
        row = delivery(delivery_id)
        assert (row.state, row.error) == ("ineligible", "webhook is off for this category")
    assert receiver.requests == []


def test_a_withdrawn_announcements_entry_written_after_the_withdrawal_is_not_sent(
        app, receiver):
    """A fan-out batch chosen before the withdrawal commits its entry and its delivery
    after it: at send time the announcement is withdrawn, so nothing goes
    (docs/rules.md#announcements)."""
    with app.app_context():
        endpoint_id, _ = add_webhook(receiver.url("/in"), categories=(announcement.KEY,))
        site_id = str(main_site().id)
        event = Event(kind=announcement.KIND, origin="web", site_id=site_id, key="k",
                      data={"snapshot": {"title": "Read-only", "body": "Saturday"},
                            "audience": {"everyone": True},
                            announcement.WITHDRAWN: utcnow().isoformat()})
        db.session.add(event)
        db.session.flush()
        entry = Notification(
            user_id=str(user("alice").id), site_id=site_id, category=announcement.KEY,
            variant="published", group_key=f"{announcement.KEY}:{event.id}",
            data={"title": "Read-only", "body": "Saturday"}, last_event_id=event.id,
            in_app=True)
        db.session.add(entry)
        db.session.flush()
        row = Delivery(endpoint_id=endpoint_id, event_id=event.id, notification_id=entry.id,
                       user_id=entry.user_id, message_id=standard_webhooks.new_message_id(),
                       type=announcement.KEY, payload={}, state="pending",
                       next_attempt_at=utcnow())
        db.session.add(row)
        db.session.commit()
        delivery_id = row.id
    deliver(app)
    with app.app_context():
        row = delivery(delivery_id)
        assert (row.state, row.error) == ("ineligible", "its announcement was withdrawn")
    assert receiver.requests == []


# -- leases --------------------------------------------------------------------------------


def test_a_lapsed_lease_is_taken_over_and_a_live_one_is_not(app, receiver):
    with app.app_context():
        endpoint_id, _ = add_webhook(receiver.url("/in"))
        delivery_id = queue_test(endpoint_id)
        session = db.session()
        # A run claims it under a long lease: no other run can have it meanwhile.
        assert engine.claim(session, timedelta(minutes=5)) == (delivery_id, 1)
        assert engine.claim(session, timedelta(minutes=5)) is None
        # That run's worker died mid-request; its lease has lapsed (here: at once).
        db.session.execute(sa.update(Delivery).values(next_attempt_at=utcnow() - timedelta(
            seconds=1)))
        db.session.commit()
    deliver(app)
    with app.app_context():
        row = delivery(delivery_id)
        assert (row.state, row.attempts) == ("delivered", 2)
    assert len(receiver.at("/in")) == 1


def test_a_late_result_of_a_lapsed_attempt_does_not_overwrite_the_newer_one(app, receiver):
    with app.app_context():
        endpoint_id, _ = add_webhook(receiver.url("/in"))
        delivery_id = queue_test(endpoint_id)
        session = db.session()
        st = state(app)
        slow = engine.Run(session, st.host, st.registry)
        claimed = engine.claim(session, timedelta(seconds=-1))  # lapses at once
        newer = engine.claim(session, timedelta(minutes=5))
        assert claimed == (delivery_id, 1) and newer == (delivery_id, 2)
        slow.one(*claimed)  # the first run's answer comes in late
        assert delivery(delivery_id).state == "sending"
        assert slow.report.delivered == 0


# -- three days of failures ----------------------------------------------------------------


def failed_earlier(endpoint_id: int, ago: timedelta) -> None:
    """A delivery of the endpoint that failed for good ``ago`` (the clock, injected)."""
    delivery_id = queue_test(endpoint_id, "earlier")
    db.session.execute(sa.update(Delivery).where(Delivery.id == delivery_id).values(
        state="failed", attempts=engine.RETRY.attempts, error_class="transient",
        next_attempt_at=None, updated_at=utcnow() - ago))
    db.session.commit()


def test_three_days_of_failures_disable_the_endpoint_and_tell_its_owner(app, receiver):
    receiver.answer("/in", 500)
    with app.app_context():
        endpoint_id, _ = add_webhook(receiver.url("/in"))
        # Sparse traffic: a delivery given up 20 hours ago, the streak 3 days old; the
        # next delivery's failure is the one that disables.
        failed_earlier(endpoint_id, timedelta(hours=20))
        queue_test(endpoint_id)
        waiting_id = queue_test(endpoint_id, "later")
        db.session.execute(sa.update(Delivery).where(Delivery.id == waiting_id)
                           .values(next_attempt_at=utcnow() + timedelta(hours=1)))
        db.session.execute(sa.update(Endpoint).values(
            failing_since=utcnow() - engine.FAILING_FOR - timedelta(minutes=1)))
        db.session.commit()
    deliver(app)
    run_jobs(app)  # the notice's fan-out
    with app.app_context():
        off = endpoint(endpoint_id)
        assert off.state == "disabled"
        assert off.disabled_reason == "Every delivery failed for three days."
        assert delivery(waiting_id).state == "cancelled"
        (notice,) = entries_for("alice", category="endpointDisabled")
        assert notice.in_app


def test_an_old_failure_then_idle_days_do_not_disable_on_the_next_failure(app, receiver):
    receiver.answer("/in", 500)
    with app.app_context():
        endpoint_id, _ = add_webhook(receiver.url("/in"))
        # One failure five days ago, then nothing was sent at all until today's blip:
        # the endpoint was never tried in between, so no three days of failures.
        failed_earlier(endpoint_id, timedelta(days=5))
        delivery_id = queue_test(endpoint_id)
        db.session.execute(sa.update(Endpoint).values(
            failing_since=utcnow() - timedelta(days=5)))
        db.session.commit()
    deliver(app)
    with app.app_context():
        kept = endpoint(endpoint_id)
        assert kept.state == "active"
        # A new streak starts at today's failure.
        assert utcnow() - kept.failing_since < timedelta(minutes=1)
        assert delivery(delivery_id).state == "pending"
        assert entries_for("alice", category="endpointDisabled") == []


def test_failures_for_less_than_three_days_keep_the_endpoint(app, receiver):
    receiver.answer("/in", 500)
    with app.app_context():
        endpoint_id, _ = add_webhook(receiver.url("/in"))
        failed_earlier(endpoint_id, timedelta(hours=10))  # the streak goes on
        queue_test(endpoint_id)
        since = utcnow() - engine.FAILING_FOR + timedelta(hours=1)
        db.session.execute(sa.update(Endpoint).values(failing_since=since))
        db.session.commit()
    deliver(app)
    with app.app_context():
        kept = endpoint(endpoint_id)
        assert kept.state == "active"
        assert abs(kept.failing_since - since) < timedelta(seconds=1)
        assert entries_for("alice", category="endpointDisabled") == []


# -- site-wide endpoints ----------------------------------------------------------------------


def add_site_webhook(url: str, categories: tuple[str, ...] = ("watchedPage",)
                     ) -> tuple[int, str]:
    return add_webhook(url, owner=None, categories=categories)


def test_a_site_wide_endpoint_is_told_nothing_a_guest_cannot_read(app, receiver):
    with app.app_context():
        endpoint_id, _ = add_site_webhook(receiver.url("/site"))
        edit("home", "bob", "The demo's guests read nothing.")
    run_jobs(app)
    with app.app_context():
        assert deliveries_of(endpoint_id) == []
    assert receiver.requests == []


def guests_read(app, readable) -> None:
    """Make the app's wiki one whose guests (no group) may read the pages (as a page
    check sees them) that ``readable(page)`` accepts; the demo's own guests may read
    nothing."""
    from dataclasses import replace

    from demo.host import DemoHost

    class GuestsRead(DemoHost):
        def held_permissions(self, group_ids, permissions, pages):
            if group_ids:
                return super().held_permissions(group_ids, permissions, pages)
            public = {"read:pages", "read:comments"} & set(permissions)
            return {p["id"]: public if readable(p) else set()
                    for p in pages}

    app.extensions["wikinotify"] = replace(state(app), host=GuestsRead())


def guests_read_outside_ops(app) -> None:
    guests_read(app, lambda p: not (p.get("path") or "").startswith("ops/"))


def test_a_site_wide_endpoint_hears_once_of_what_a_guest_could_read(app, receiver):
    guests_read_outside_ops(app)
    with app.app_context():
        endpoint_id, secret = add_site_webhook(receiver.url("/site"))
        watch("home", "alice")  # alice's entry changes nothing for the site's endpoint
        edit("home", "bob", "Public news.")
        edit("ops/runbook", "bob", "Internal only.")
    run_jobs(app)
    (request,) = receiver.at("/site")
    payload = Webhook(secret).verify(request.body, headers_of(request))
    assert payload["type"] == "watchedPage"
    assert payload["data"]["text"] == "Home was edited by Bob Builder"
    assert payload["data"]["url"] == "http://localhost:5000/pages/home"
    with app.app_context():
        (row,) = deliveries_of(endpoint_id)
        assert (row.state, row.user_id, row.notification_id) == ("delivered", None, None)


def test_a_site_wide_endpoint_hears_nothing_of_an_event_whose_first_batch_failed(
    app, receiver, monkeypatch
):
    """The site-wide delivery is written by the run itself, the entries by its batch
    writer (on PostgreSQL a thread of their own, for an event of several batches): it
    commits only after the first batch has, and the retry adds it once."""
    from tests.helpers.database import entries_refused_for
    from wikinotify.jobs import dispatch
    from wikinotify.models import Event
    from wikinotify.pipeline import audience

    monkeypatch.setattr(audience, "CANDIDATE_BATCH", 1)  # a batch per watcher
    guests_read_outside_ops(app)
    with app.app_context():
        endpoint_id, _ = add_site_webhook(receiver.url("/site"))
        watch("home", "alice")
        watch("home", "carol")  # after alice: the refused batch is the first
        with entries_refused_for(str(user("alice").id)):
            edit("home", "bob", "Public news, once written.")
            dispatch()
            (event,) = db.session.scalars(sa.select(Event)).all()
            assert event.attempts == 1 and event.processed_at is None
            assert deliveries_of(endpoint_id) == []
        event.retry_after = None  # as an administrator's retry
        db.session.commit()
        dispatch()
        (row,) = deliveries_of(endpoint_id)
        assert row.state == "pending"
        assert [e.count for e in entries_for("alice")] == [1]


def suggest(path: str, by: str = "bob") -> None:
    """A suggestion to ``path``, through the wiki's own code (which emits)."""
    from demo import wiki

    wiki.suggest(page(path), user(by), f"A better {path}.")
    db.session.commit()


def test_a_site_wide_endpoint_is_told_of_no_suggestion_on_a_page_guests_cannot_read(
    app, receiver
):
    """The review's reproduction: reviewRequested asks nothing of its own readers (the
    approval rule is their grant), but a receiver outside the wiki is a guest, and the
    demo's guests cannot read handbook/onboarding."""
    with app.app_context():
        endpoint_id, _ = add_site_webhook(receiver.url("/site"), ("reviewRequested",))
        suggest("handbook/onboarding")
    run_jobs(app)
    with app.app_context():
        assert deliveries_of(endpoint_id) == []
        assert [e.category for e in entries_for("carol")] == ["reviewRequested"]  # a reviewer
    assert receiver.requests == []


def reject_a_suggestion(path: str) -> None:
    """Bob suggests a change to ``path``; Carol, its reviewer, rejects it."""
    from demo import wiki
    from demo.models import Submission

    suggest(path)
    submission = db.session.scalars(sa.select(Submission).order_by(Submission.id.desc())).first()
    wiki.review_suggestion(submission, user("carol"), approve=False)
    db.session.commit()


@pytest.mark.parametrize(
    ("category", "act", "reader"),
    [
        ("reviewRequested", suggest, "carol"),
        ("suggestionReviewed", reject_a_suggestion, "bob"),
    ],
)
def test_a_site_wide_endpoint_is_told_nothing_of_a_category_kept_to_its_readers(
    app, receiver, category, act, reader
):
    """A suggestion exists and who made it (shown only to reviewers and its author), or
    a reviewer's verdict: their readers' alone, even on a page every guest may read."""
    guests_read_outside_ops(app)
    with app.app_context():
        endpoint_id, _ = add_site_webhook(receiver.url("/site"), (category,))
        act("handbook/onboarding")
    run_jobs(app)
    with app.app_context():
        assert deliveries_of(endpoint_id) == []
        assert category in [e.category for e in entries_for(reader)]  # its reader is told
    assert receiver.requests == []


def test_a_site_wide_delivery_about_a_page_deleted_since_the_fan_out_is_judged_by_the_page_it_was(
    app, receiver
):
    """At send time the page is gone: a guest's access is checked again on the page as
    the fan-out judged it, with all the wiki's rules look at (here its locale), not only
    the id, title and path the payload names."""
    from demo import wiki
    from wikinotify.jobs import dispatch

    guests_read(app, lambda p: p.get("locale") == "en")
    with app.app_context():
        endpoint_id, secret = add_site_webhook(receiver.url("/site"))
        edit("handbook/onboarding", "bob", "Public news, then gone.")
        dispatch()
        (row,) = deliveries_of(endpoint_id)
        assert row.state == "pending"
        row_id = row.id
        wiki.delete_page(page("handbook/onboarding"), user("bob"))
        db.session.commit()
    deliver(app)
    with app.app_context():
        row = delivery(row_id)
        assert (row.state, row.error) == ("delivered", None)
    # The edit, then the deletion (which watchedPage tells of too), both of the page.
    sent = [Webhook(secret).verify(r.body, headers_of(r)) for r in receiver.at("/site")]
    assert [p["data"]["page"]["path"] for p in sent] == ["handbook/onboarding"] * 2


def test_a_site_wide_delivery_carries_no_excerpt_of_a_comment_deleted_since_the_fan_out(
    app, receiver
):
    from demo import wiki
    from wikinotify.jobs import dispatch

    guests_read_outside_ops(app)
    with app.app_context():
        endpoint_id, secret = add_site_webhook(receiver.url("/site"), ("watchedPageComment",))
        comment_id = wiki.add_comment(page("home"), user("bob"), "A remark, soon taken back.").id
        db.session.commit()
        dispatch()
        (row,) = deliveries_of(endpoint_id)
        assert row.payload["excerpt"] == "A remark, soon taken back."
        from demo.models import Comment

        wiki.delete_comment(db.session.get_one(Comment, comment_id), user("bob"))
        db.session.commit()
    deliver(app)
    (request,) = receiver.at("/site")
    payload = Webhook(secret).verify(request.body, headers_of(request))
    assert payload["type"] == "watchedPageComment"
    assert payload["data"]["excerpt"] is None
    assert "soon taken back" not in request.body.decode()


def fanned_out_site_wide(app, receiver) -> int:
    """Guests read Home; Bob edits it; the fan-out writes the site-wide endpoint's
    delivery, which is not sent yet. Its id."""
    from wikinotify.jobs import dispatch

    guests_read_outside_ops(app)
    with app.app_context():
        endpoint_id, _ = add_site_webhook(receiver.url("/site"))
        edit("home", "bob", "Public news, for now.")
        dispatch()
        (row,) = deliveries_of(endpoint_id)
        assert row.state == "pending"
        return row.id


def restrict_every_page(app) -> None:
    """The demo's own guests may read nothing."""
    from dataclasses import replace

    from demo.host import DemoHost

    app.extensions["wikinotify"] = replace(state(app), host=DemoHost())


def switch_the_site_off(app) -> None:
    from tests.helpers.wiki import main_site
    from wikinotify.instance_settings import set_site_enabled

    with app.app_context():
        set_site_enabled(db.session(), str(main_site().id), False)
        db.session.commit()


def keep_edits_to_their_readers(app) -> None:
    """The wiki is deployed again with watchedPage told to no one outside it."""
    from dataclasses import replace

    from wikinotify.categories import Registry

    st = state(app)
    kept = Registry(replace(c, told_to_anyone=False) if c.key == "watchedPage" else c
                    for c in st.registry.values())
    app.extensions["wikinotify"] = replace(st, registry=kept)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (restrict_every_page, "a guest can no longer read this page"),
        (switch_the_site_off, "notifications are off on this site"),
        (keep_edits_to_their_readers, "its category is no longer told to anyone"),
    ],
    ids=["page-restricted", "site-off", "category-kept"],
)
def test_a_site_wide_delivery_is_checked_again_at_send(app, receiver, change, error):
    row_id = fanned_out_site_wide(app, receiver)
    change(app)  # since the fan-out
    deliver(app)
    with app.app_context():
        row = delivery(row_id)
        assert (row.state, row.error, row.response_code) == ("ineligible", error, None)
    assert receiver.requests == []


def test_an_endpoint_deleted_after_the_claim_ends_nothing_but_its_delivery(app, receiver):
    with app.app_context():
        endpoint_id, _ = add_webhook(receiver.url("/in"))
        delivery_id = queue_test(endpoint_id)
        session = db.session()
        st = state(app)
        claimed = engine.claim(session, timedelta(minutes=5))
        assert claimed == (delivery_id, 1)
        db.session.execute(sa.delete(Delivery))
        db.session.execute(sa.delete(Endpoint))
        db.session.commit()
        run = engine.Run(session, st.host, st.registry)
        run.one(*claimed)
        assert run.report == engine.RunReport(started_at=run.report.started_at)
    assert receiver.requests == []


def test_a_run_stops_claiming_when_its_time_budget_is_spent(app, receiver):
    with app.app_context():
        endpoint_id, _ = add_webhook(receiver.url("/in"))
        first, second = queue_test(endpoint_id), queue_test(endpoint_id)
        st = state(app)
        report = engine.Run(db.session(), st.host, st.registry, budget=0).run(10)
        assert report.delivered == 0
        assert {delivery(first).state, delivery(second).state} == {"pending"}
        report = engine.Run(db.session(), st.host, st.registry).run(10)
        assert report.delivered == 2


def test_a_delivery_that_killed_every_run_that_took_it_is_given_up(app, receiver):
    with app.app_context():
        endpoint_id, _ = add_webhook(receiver.url("/in"))
        delivery_id = queue_test(endpoint_id)
        # Each run that claimed it died before writing a result; the lease lapsed each time.
        db.session.execute(sa.update(Delivery).values(
            state="sending", attempts=engine.RETRY.attempts,
            next_attempt_at=utcnow() - timedelta(seconds=1)))
        db.session.commit()
    deliver(app)
    with app.app_context():
        row = delivery(delivery_id)
        assert (row.state, row.attempts, row.error_class) == (
            "failed", engine.RETRY.attempts + 1, "permanent")
        assert row.error == f"given up after {engine.RETRY.attempts} attempts"
    assert receiver.requests == []


def test_a_delivery_the_wiki_cannot_present_fails_alone_and_the_run_goes_on(app, receiver):
    endpoint_id, broken_id = fanned_out_to_alice(app, receiver)
    with app.app_context():
        fine_id = queue_test(endpoint_id)
        make_due(broken_id)  # the broken one comes first

        class Broken(type(state(app).host)):
            def pages(self, page_ids):
                raise RuntimeError("the wiki's page store is down")

        from dataclasses import replace

        app.extensions["wikinotify"] = replace(state(app), host=Broken())
        st = state(app)
        report = engine.Run(db.session(), st.host, st.registry).run(10)
        broken = delivery(broken_id)
        assert (broken.state, broken.error) == ("failed", "could not be built: RuntimeError")
        assert delivery(fine_id).state == "delivered" and report.delivered == 1


def test_a_site_switched_off_since_the_fan_out_is_sent_nothing(app, receiver):
    from tests.helpers.wiki import main_site
    from wikinotify.instance_settings import set_site_enabled

    endpoint_id, delivery_id = fanned_out_to_alice(app, receiver)
    with app.app_context():
        set_site_enabled(db.session(), str(main_site().id), False)
        db.session.commit()
    deliver(app)
    with app.app_context():
        row = delivery(delivery_id)
        assert (row.state, row.error) == ("ineligible", "notifications are off on this site")
    assert receiver.requests == []
