"""An administrator retries a failed mail and a failed webhook or chat delivery, as she
retries a failed event (tests/test_outbox.py): through the API and the page's button,
audited, kicking the run that takes it, and a 404 alike for anything that is not a failed
one. Real SMTP and HTTP receivers on 127.0.0.1, real Redis and RQ; SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from demo.models import AuditLog, db
from tests.helpers.failures import failed_delivery, failed_mail
from tests.helpers.jobs import run_jobs
from tests.helpers.receiver import Receiver
from tests.helpers.web import csrf_token, login, login_with_csrf
from tests.helpers.wiki import entries_for, user
from wikinotify.mail import claim as mail_claim
from wikinotify.models import Delivery, Endpoint, Notification, utcnow
from wikinotify.outbound import endpoints, verification

pytestmark = pytest.mark.app_config(smtp=True, WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"])

API = "/_notifications/api/admin"
PAGE = "/_notifications/admin"
NOT_IDS = (999_999, "abc", "1_0", 2**63, -1, "0")


@pytest.fixture
def receiver():
    receiver = Receiver()
    yield receiver
    receiver.close()


def audits() -> list[tuple]:
    return [(a.action, a.details) for a in db.session.scalars(sa.select(AuditLog))]


# -- mails ----------------------------------------------------------------------------------


def retry_mail_url(row_id) -> str:
    return f"{API}/mails/{row_id}/retry"


def test_the_page_offers_a_retry_for_each_failed_mail(ctx, client):
    first, second = failed_mail(ctx)
    login(client, "admin")
    failures = client.get(f"{API}/settings").get_json()["status"]["failures"]
    assert sorted(f["id"] for f in failures) == [first, second]
    html = client.get(PAGE).get_data(as_text=True)
    assert f"/_notifications/admin/mails/{first}/retry" in html
    assert f"/_notifications/admin/mails/{second}/retry" in html


def test_an_administrator_retries_a_failed_mail_and_it_goes(ctx, client, smtp):
    first, second = failed_mail(ctx)
    login(client, "admin")
    assert client.post(retry_mail_url(first), json={}).status_code == 204
    db.session.expire_all()
    rows = entries_for("alice")
    assert {(r.email_state, r.email_attempts, r.email_error, r.email_error_class,
             r.emailed_at) for r in rows} == {("pending", 0, None, None, None)}
    assert audits() == [("retryNotificationMail", {"mail": first})]
    run_jobs(ctx)  # the retry kicked a mail run; the rows are due at once
    [mail] = smtp.inbox.messages
    assert mail["To"] == "alice@example.com" and "2 notifications" in mail["Subject"]
    db.session.expire_all()
    assert {r.email_state for r in entries_for("alice")} == {"sent"}
    # The mail is no longer failed: retrying it again is a 404.
    assert client.post(retry_mail_url(second), json={}).status_code == 404


def test_a_row_read_since_is_not_mailed_again(ctx, client, smtp):
    first, second = failed_mail(ctx)
    db.session.execute(sa.update(Notification).where(Notification.id == second)
                       .values(read_at=utcnow()))
    db.session.commit()
    login(client, "admin")
    assert client.post(retry_mail_url(second), json={}).status_code == 204
    db.session.expire_all()
    states = {r.id: r.email_state for r in entries_for("alice")}
    assert states == {first: "pending", second: "skipped"}
    run_jobs(ctx)
    [mail] = smtp.inbox.messages
    assert "2 notifications" not in mail["Subject"]


def test_another_mail_of_the_reader_is_left_alone(ctx, client):
    """A mail is the reader's rows given up at one time: an older failure stays failed."""
    first, second = failed_mail(ctx)
    db.session.execute(sa.update(Notification).where(Notification.id == second)
                       .values(emailed_at=datetime.now(UTC) - timedelta(days=1)))
    db.session.commit()
    login(client, "admin")
    assert client.post(retry_mail_url(first), json={}).status_code == 204
    db.session.expire_all()
    states = {r.id: r.email_state for r in entries_for("alice")}
    assert states == {first: "pending", second: "failed"}


def test_mail_retry_answers_404_alike_for_anything_but_a_failed_mail(ctx, client):
    failed_mail(ctx)
    db.session.execute(sa.update(Notification).values(email_state="sent"))
    db.session.commit()
    [sent, _] = [r.id for r in entries_for("alice")]
    login(client, "admin")
    answers = [client.post(retry_mail_url(raw), json={}) for raw in (sent, *NOT_IDS)]
    assert {r.status_code for r in answers} == {404}
    assert {r.get_data(as_text=True) for r in answers} == {answers[1].get_data(as_text=True)}
    assert answers[0].get_json()["error"]["code"] == "not_found"
    assert audits() == []


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_two_retries_of_one_mail_at_once_change_it_once(ctx):
    """The second, having read the mail as failed before the first committed, finds
    nothing left to revive once it may write: it says so, so nothing is audited twice."""
    [row_id, _] = failed_mail(ctx)
    first, second = Session(db.engine), Session(db.engine)
    try:
        assert mail_claim.retry_failed(first, row_id)  # holds the rows until it commits
        answers: list[bool] = []
        racing = threading.Thread(
            target=lambda: answers.append(mail_claim.retry_failed(second, row_id)))
        racing.start()
        racing.join(1)  # it has read the failed row and waits on the first's locks
        assert racing.is_alive()
        first.commit()
        racing.join(10)
        assert answers == [False]
    finally:
        first.close()
        second.close()


def test_only_administrators_retry_a_mail(ctx, client):
    first, _ = failed_mail(ctx)
    assert client.post(retry_mail_url(first), json={}).status_code == 401
    login(client, "alice")
    assert client.post(retry_mail_url(first), json={}).status_code == 403
    assert client.post(f"/_notifications/admin/mails/{first}/retry").status_code == 403
    db.session.expire_all()
    assert {r.email_state for r in entries_for("alice")} == {"failed"} and audits() == []


# -- deliveries -------------------------------------------------------------------------------


def retry_delivery_url(delivery_id) -> str:
    return f"{API}/deliveries/{delivery_id}/retry"


def delivery(delivery_id: int) -> Delivery:
    db.session.expire_all()
    return db.session.get_one(Delivery, delivery_id)


def test_the_page_lists_failed_deliveries_with_a_retry(ctx, client, receiver):
    mine = failed_delivery(receiver.url("/in"))
    site = failed_delivery(receiver.url("/site"), owner=None)
    login(client, "admin")
    listed = client.get(f"{API}/settings").get_json()["status"]["failedDeliveries"]
    assert [(d["id"], d["ownerId"], d["channel"], d["attempts"], d["errorClass"])
            for d in listed] == [(site, None, "webhook", 8, "transient"),
                                 (mine, str(user("alice").id), "webhook", 8, "transient")]
    html = client.get(PAGE).get_data(as_text=True)
    assert f'data-delivery-id="{mine}"' in html and "the receiver answered 500" in html
    assert f"/_notifications/admin/deliveries/{mine}/retry" in html
    assert f"/_notifications/admin/deliveries/{site}/retry" in html


def test_an_administrator_retries_a_failed_delivery_and_it_is_made(ctx, client, receiver):
    delivery_id = failed_delivery(receiver.url("/in"))
    endpoint_id = delivery(delivery_id).endpoint_id
    login(client, "admin")
    assert client.post(retry_delivery_url(delivery_id), json={}).status_code == 204
    row = delivery(delivery_id)
    assert (row.state, row.attempts, row.response_code, row.error_class, row.error) == (
        "pending", 0, None, None, None)
    assert audits() == [("retryNotificationDelivery", {
        "endpoint": endpoint_id, "channel": "webhook", "scope": "user", "target": "127.0.0.1",
        "state": "active", "delivery": delivery_id})]
    run_jobs(ctx)  # the retry kicked a delivery run
    row = delivery(delivery_id)
    assert (row.state, row.attempts) == ("delivered", 1)
    [request] = receiver.requests
    headers = {k.lower(): v for k, v in request.headers.items()}
    assert headers["webhook-id"] == row.message_id  # the same id as before
    assert client.post(retry_delivery_url(delivery_id), json={}).status_code == 404


def test_delivery_retry_answers_404_alike_for_anything_but_a_failed_delivery(
        ctx, client, receiver):
    delivery_id = failed_delivery(receiver.url("/in"))
    db.session.execute(sa.update(Delivery).values(state="blocked"))
    db.session.commit()
    login(client, "admin")
    answers = [client.post(retry_delivery_url(raw), json={})
               for raw in (delivery_id, *NOT_IDS)]
    assert {r.status_code for r in answers} == {404}
    assert {r.get_data(as_text=True) for r in answers} == {answers[1].get_data(as_text=True)}
    assert answers[0].get_json()["error"]["code"] == "not_found"
    assert delivery(delivery_id).state == "blocked" and audits() == []


def test_a_delivery_made_for_an_old_url_is_never_retried_to_the_new_one(ctx, client, receiver):
    """A delivery belongs to the URL it was made for: moving the endpoint cancels its
    failed ones too, so an administrator's retry cannot send them to a receiver that has
    not answered its verification."""
    delivery_id = failed_delivery(receiver.url("/old"))
    endpoint = db.session.get_one(Endpoint, delivery(delivery_id).endpoint_id)
    endpoints.update(db.session, endpoint, {"url": receiver.url("/new")})
    db.session.commit()
    assert delivery(delivery_id).state == "cancelled"
    login(client, "admin")
    assert client.post(retry_delivery_url(delivery_id), json={}).status_code == 404
    assert audits() == []


def test_a_verification_is_never_retried(ctx, client, receiver):
    """Its challenge may be superseded: the owner asks for a new one instead."""
    delivery_id = failed_delivery(receiver.url("/in"))
    db.session.execute(sa.update(Delivery).values(type=verification.TYPE))
    db.session.commit()
    login(client, "admin")
    assert client.post(retry_delivery_url(delivery_id), json={}).status_code == 404
    assert delivery(delivery_id).state == "failed" and audits() == []


def test_an_administrators_retry_is_audited_as_hers(ctx, client, receiver):
    """Of a reader's own endpoint too: not as the reader's profile change."""
    delivery_id = failed_delivery(receiver.url("/in"))
    login(client, "admin")
    assert client.post(retry_delivery_url(delivery_id), json={}).status_code == 204
    [row] = db.session.scalars(sa.select(AuditLog)).all()
    assert (row.action, row.kind) == ("retryNotificationDelivery", "admin")


def test_only_administrators_retry_a_delivery(ctx, client, receiver):
    """Not even the endpoint's owner: the retry is the administrator's."""
    delivery_id = failed_delivery(receiver.url("/in"))
    assert client.post(retry_delivery_url(delivery_id), json={}).status_code == 401
    login(client, "alice")
    assert client.post(retry_delivery_url(delivery_id), json={}).status_code == 403
    assert client.post(
        f"/_notifications/admin/deliveries/{delivery_id}/retry").status_code == 403
    assert delivery(delivery_id).state == "failed" and audits() == []


# -- the buttons --------------------------------------------------------------------------------


@pytest.mark.app_config(smtp=True, WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"],
                        WTF_CSRF_ENABLED=True)
class TestRetryButtons:
    @pytest.mark.parametrize("what", ["mails", "deliveries"])
    def test_a_button_retries_with_its_token_and_refuses_without(
            self, app, client, receiver, what):
        # No app context held across the requests: each request gets its own ``g``, so
        # Flask-WTF's "token already checked" cannot leak from one into the next.
        def still_failed() -> bool:
            with app.app_context():
                if what == "mails":
                    return entries_for("alice", email_state="failed") != []
                return db.session.get_one(Delivery, item_id).state == "failed"

        with app.app_context():
            item_id = (failed_mail(app)[0] if what == "mails"
                       else failed_delivery(receiver.url("/in")))
        login_with_csrf(client, "admin")
        button = f"/_notifications/admin/{what}/{item_id}/retry"
        refused = client.post(button)
        assert refused.status_code == 400
        assert "session has expired" in refused.get_data(as_text=True)
        assert still_failed()
        token = csrf_token(client.get(PAGE).get_data(as_text=True))
        response = client.post(button, data={"csrf_token": token})
        assert response.status_code == 302 and response.headers["Location"].endswith(PAGE)
        assert not still_failed()
        flashed = client.get(PAGE).get_data(as_text=True)
        assert "again within a minute" in flashed
        with app.app_context():
            [(action, _)] = audits()
            assert action in ("retryNotificationMail", "retryNotificationDelivery")
        assert client.post(button, data={"csrf_token": token}).status_code == 404
