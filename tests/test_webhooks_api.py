"""``/api/webhooks`` and ``/api/chat``: endpoints as their owners manage them
(docs/channels.md#webhooks).

The secret is shown once; someone else's endpoint answers as a missing one; a URL the SSRF
guard refuses is a 400 naming the field and the reason; a rotation keeps the old secret
signing for 24 hours; a test event reaches a real receiver on 127.0.0.1, signed; the
deliveries page is keyset-paginated; site-wide endpoints are for administrators.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa
from standardwebhooks import Webhook, WebhookVerificationError

from demo.models import db
from tests.helpers.jobs import run_jobs
from tests.helpers.web import login
from tests.helpers.wiki import user
from wikinotify.models import Delivery, Endpoint, utcnow
from wikinotify.outbound import secrets_box, standard_webhooks

API = "/_notifications/api/webhooks"
CHAT = "/_notifications/api/chat"


pytestmark = [
    # The suite's receiver listens on 127.0.0.1, which the guard refuses by default.
    pytest.mark.app_config(WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"]),
]


def create(client, url, categories=("watchedPage",), **extra):
    return client.post(API, json={"url": url, "categories": list(categories), **extra})


def endpoint_row(app, endpoint_id) -> Endpoint:
    with app.app_context():
        db.session.expire_all()
        row = db.session.get(Endpoint, endpoint_id)
        db.session.expunge(row)
        return row


def deliveries_of(app, endpoint_id) -> list[Delivery]:
    with app.app_context():
        query = sa.select(Delivery).where(Delivery.endpoint_id == endpoint_id)
        rows = list(db.session.scalars(query.order_by(Delivery.id)))
        db.session.expunge_all()
        return rows


def verified(app, client, receiver, path="/hook") -> dict:
    """A webhook that answered its verification: the receiver echoes the challenge."""
    body = create(client, receiver.url(path)).get_json()
    challenge = endpoint_row(app, body["id"]).challenge
    receiver.answer(path, 200, body=json.dumps({"challenge": challenge}).encode(),
                    headers={"Content-Type": "application/json"})
    run_jobs(app)
    assert endpoint_row(app, body["id"]).state == "active"
    return body


def verify(secret: str, request) -> dict:
    """What a receiver does: check the signature over the raw body, then read it."""
    return Webhook(secret).verify(request.body, request.headers)


# -- who may do what ------------------------------------------------------------------------


def test_a_guest_gets_401_on_every_route(client):
    for method, path in [("get", API), ("post", API), ("patch", f"{API}/1"),
                         ("delete", f"{API}/1"), ("post", f"{API}/1/rotate-secret"),
                         ("post", f"{API}/1/test"), ("get", f"{API}/1/deliveries"),
                         ("get", CHAT), ("post", CHAT), ("delete", f"{CHAT}/1"),
                         ("post", f"{CHAT}/1/test")]:
        response = getattr(client, method)(path, json={})
        assert response.status_code == 401, (method, path)
        assert response.get_json()["error"]["code"] == "unauthorized"


def test_someone_elses_endpoint_answers_as_a_missing_one(app, client, receiver):
    login(client, "bob")
    bobs = create(client, receiver.url()).get_json()["id"]
    login(client, "alice")
    for method, path in [("patch", f"{API}/{bobs}"), ("delete", f"{API}/{bobs}"),
                         ("post", f"{API}/{bobs}/rotate-secret"), ("post", f"{API}/{bobs}/test"),
                         ("get", f"{API}/{bobs}/deliveries"), ("get", f"{API}/999999/deliveries"),
                         ("delete", f"{API}/not-an-id"), ("delete", f"{CHAT}/{bobs}")]:
        response = getattr(client, method)(path, json={"description": "mine now"})
        assert response.status_code == 404, (method, path)
        assert response.get_json()["error"]["code"] == "not_found"
    assert client.get(API).get_json()["items"] == []
    row = endpoint_row(app, bobs)
    assert row.description == "" and row.state == "unverified"


def test_site_wide_webhooks_are_for_administrators(app, client, receiver):
    login(client, "alice")
    refused = create(client, receiver.url(), scope="site")
    assert refused.status_code == 403
    assert refused.get_json()["error"]["code"] == "forbidden"
    assert client.get(API, query_string={"scope": "site"}).status_code == 403

    login(client, "admin")
    # wikinotify's own notice to a person is no category a site-wide endpoint takes.
    notice = create(client, receiver.url(), categories=["endpointDisabled"], scope="site")
    assert list(notice.get_json()["error"]["fields"]) == ["categories.0"]
    made = create(client, receiver.url(), categories=["pageCreated"], scope="site")
    assert made.status_code == 201
    site_wide = made.get_json()
    assert site_wide["scope"] == "site" and site_wide["siteId"] is None
    assert endpoint_row(app, site_wide["id"]).owner_id is None
    assert client.get(API).get_json()["items"] == []  # the admin's own: none
    listed = client.get(API, query_string={"scope": "site"}).get_json()["items"]
    assert [e["id"] for e in listed] == [site_wide["id"]]
    assert client.patch(f"{API}/{site_wide['id']}", json={"description": "feed"}).status_code \
        == 200

    login(client, "alice")
    assert client.delete(f"{API}/{site_wide['id']}", json={}).status_code == 404


def test_a_site_wide_webhook_refuses_a_category_never_told_to_anyone(app, client, receiver):
    """A suggestion waiting for review is its reviewers' alone: a site-wide endpoint
    asking for it is refused, naming the field, rather than saved to hear nothing."""
    login(client, "admin")
    refused = create(client, receiver.url(), categories=["pageCreated", "reviewRequested"],
                     scope="site")
    assert refused.status_code == 400
    assert list(refused.get_json()["error"]["fields"]) == ["categories.1"]
    made = create(client, receiver.url(), categories=["pageCreated"], scope="site")
    changed = client.patch(f"{API}/{made.get_json()['id']}",
                           json={"categories": ["suggestionReviewed"]})
    assert list(changed.get_json()["error"]["fields"]) == ["categories.0"]
    assert endpoint_row(app, made.get_json()["id"]).categories == ["pageCreated"]
    # A reader's own endpoint may take it: she is its reader.
    assert create(client, receiver.url(), categories=["reviewRequested"]).status_code == 201


def test_a_site_wide_webhook_may_name_one_of_the_wikis_sites(app, client, receiver):
    login(client, "admin")
    unknown = create(client, receiver.url(), scope="site", siteId="no-such-site")
    assert unknown.status_code == 400
    assert "siteId" in unknown.get_json()["error"]["fields"]
    mine = create(client, receiver.url(), siteId="no-such-site")  # a user's own: no site
    assert mine.status_code == 400
    assert "siteId" in mine.get_json()["error"]["fields"]


def test_writes_need_json_or_the_csrf_header(make_app_with_csrf, receiver):
    client = make_app_with_csrf.test_client()
    from tests.helpers.web import login_with_csrf

    login_with_csrf(client, "alice")
    form = client.post(API, data={"url": receiver.url(), "categories": "watchedPage"})
    assert form.status_code in (400, 415)
    with make_app_with_csrf.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(Endpoint)) == 0


@pytest.fixture
def make_app_with_csrf(database_url, redis_url, queue_name):
    from tests.helpers.app import dispose, seeded_app

    app = seeded_app(database_url, WTF_CSRF_ENABLED=True, WIKINOTIFY_REDIS_URL=redis_url,
                     WIKINOTIFY_QUEUE=queue_name, WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"])
    yield app
    dispose(app)


# -- creating: the secret once, the checks ------------------------------------------------


def test_the_secret_is_shown_once_and_stored_sealed(app, client, receiver):
    login(client, "alice")
    response = create(client, receiver.url("/hook"), description="CI bot")
    assert response.status_code == 201
    body = response.get_json()
    secret = body["secret"]
    assert secret.startswith("whsec_")
    assert body | {"id": None, "createdAt": None, "secret": None} == {
        "id": None, "scope": "user", "siteId": None, "url": receiver.url("/hook"),
        "description": "CI bot", "categories": ["watchedPage"], "state": "unverified",
        "disabledReason": None, "verifiedAt": None, "previousSecretUntil": None,
        "createdAt": None, "secret": None,
    }
    listed = client.get(API)
    assert "secret" not in listed.get_json()["items"][0]
    assert secret not in listed.get_data(as_text=True)
    patched = client.patch(f"{API}/{body['id']}", json={"description": "x"})
    assert secret not in patched.get_data(as_text=True)
    row = endpoint_row(app, body["id"])
    assert secret.encode() not in row.secret_encrypted
    with app.app_context():
        assert secrets_box.unseal(row.secret_encrypted) == secret
        assert row.owner_id == str(user("alice").id)


@pytest.mark.parametrize(("url", "reason"), [
    ("ftp://example.org/hook", "scheme ftp is not allowed"),
    ("http://10.0.0.5/hook", "private address 10.0.0.5"),
    ("http://169.254.169.254/latest/meta-data", "link-local address 169.254.169.254"),
    ("http://[::ffff:10.0.0.1]/", "private address 10.0.0.1"),
    ("http://127.0.0.2:8000/", "loopback address 127.0.0.2"),
    ("http://user:password@example.org/", "credentials in the URL are not allowed"),
    ("not a url", "scheme (none) is not allowed"),
])
def test_a_url_the_guard_refuses_is_a_400_naming_the_field_and_the_reason(
    app, client, url, reason
):
    login(client, "alice")
    response = create(client, url)
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error["code"] == "invalid"
    assert list(error["fields"]) == ["url"]
    assert reason in error["message"], error["message"]
    assert client.get(API).get_json()["items"] == []


def test_categories_must_be_ones_the_owner_may_choose(client, receiver):
    login(client, "alice")
    unknown = create(client, receiver.url(), categories=["watchedPage", "noSuchThing"])
    assert unknown.status_code == 400
    assert list(unknown.get_json()["error"]["fields"]) == ["categories.1"]
    missing = client.post(API, json={"url": receiver.url()})
    assert list(missing.get_json()["error"]["fields"]) == ["categories"]
    empty = create(client, receiver.url(), categories=[])
    assert list(empty.get_json()["error"]["fields"]) == ["categories"]
    repeated = create(client, receiver.url(), categories=["mention", "mention"])
    assert repeated.get_json()["categories"] == ["mention"]


# -- verification, test, rotation -------------------------------------------------------------


def test_a_new_webhook_is_sent_its_verification_and_nothing_else(app, client, receiver):
    login(client, "alice")
    body = create(client, receiver.url("/hook")).get_json()
    run_jobs(app)  # the receiver answers 200 without the challenge: not verified
    (request,) = receiver.at("/hook")
    event = verify(body["secret"], request)
    assert event["type"] == "webhook.verification"
    assert event["data"]["challenge"] == endpoint_row(app, body["id"]).challenge
    assert endpoint_row(app, body["id"]).state == "unverified"
    # Testing an unverified endpoint sends the verification again, not a test event.
    again = client.post(f"{API}/{body['id']}/test", json={})
    assert again.status_code == 202
    assert again.get_json()["type"] == "webhook.verification"


def test_a_test_event_reaches_the_receiver_signed(app, client, receiver):
    login(client, "alice")
    body = verified(app, client, receiver)
    receiver.requests.clear()
    receiver.answer("/hook", 204)
    response = client.post(f"{API}/{body['id']}/test", json={})
    assert response.status_code == 202
    queued = response.get_json()
    assert queued["type"] == "webhook.test" and queued["state"] == "pending"
    run_jobs(app)
    (request,) = receiver.at("/hook")
    event = verify(body["secret"], request)
    assert event["type"] == "webhook.test"
    assert request.headers["webhook-id"] == queued["messageId"]
    page = client.get(f"{API}/{body['id']}/deliveries").get_json()
    newest = page["items"][0]
    assert newest | {"latencyMs": None, "createdAt": None, "deliveredAt": None} == {
        **newest, "id": queued["id"], "state": "delivered", "attempts": 1,
        "responseCode": 204, "errorClass": None, "latencyMs": None, "createdAt": None,
        "deliveredAt": None,
    }
    assert isinstance(newest["latencyMs"], int)


def test_rotation_keeps_the_old_secret_signing_for_24_hours(app, client, receiver):
    login(client, "alice")
    body = verified(app, client, receiver)
    old = body["secret"]
    rotated = client.post(f"{API}/{body['id']}/rotate-secret", json={})
    assert rotated.status_code == 200
    new = rotated.get_json()["secret"]
    assert new.startswith("whsec_") and new != old
    assert rotated.get_json()["previousSecretUntil"] is not None
    receiver.requests.clear()
    client.post(f"{API}/{body['id']}/test", json={})
    run_jobs(app)
    (request,) = receiver.at("/hook")
    assert verify(old, request)["type"] == "webhook.test"  # a receiver not yet switched
    assert verify(new, request)["type"] == "webhook.test"

    # A day and an hour later, only the new secret signs.
    with app.app_context():
        row = db.session.get(Endpoint, body["id"])
        later = standard_webhooks.signing_secrets(row, utcnow() + timedelta(hours=25))
        headers = standard_webhooks.headers("msg_later", utcnow(), '{"type": "x"}', later)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify('{"type": "x"}', headers)
    assert Webhook(new).verify('{"type": "x"}', headers) == {"type": "x"}


def test_a_second_rotation_while_the_old_secret_signs_is_refused(app, client, receiver):
    login(client, "alice")
    body = verified(app, client, receiver)
    first = client.post(f"{API}/{body['id']}/rotate-secret", json={})
    assert first.headers["Cache-Control"] == "no-store"
    newer = first.get_json()["secret"]
    # Rotating again now would drop the original secret at once, while the receiver may
    # still verify with it: refused, naming why, and both secrets still sign.
    again = client.post(f"{API}/{body['id']}/rotate-secret", json={})
    assert again.status_code == 409
    assert again.get_json()["error"]["code"] == "rotation_pending"
    assert "The previous secret still signs until" in again.get_json()["error"]["message"]
    receiver.requests.clear()
    client.post(f"{API}/{body['id']}/test", json={})
    run_jobs(app)
    (request,) = receiver.at("/hook")
    verify(body["secret"], request)
    verify(newer, request)
    # Once the old secret's 24 hours are over, the next rotation is allowed.
    with app.app_context():
        db.session.execute(sa.update(Endpoint).values(
            previous_secret_until=utcnow() - timedelta(seconds=1)))
        db.session.commit()
    third = client.post(f"{API}/{body['id']}/rotate-secret", json={})
    assert third.status_code == 200 and third.get_json()["secret"] not in (
        body["secret"], newer)


def test_answers_that_show_a_secret_are_not_stored_and_others_never_show_it(client,
                                                                            receiver):
    login(client, "alice")
    made = create(client, receiver.url("/hook"))
    assert made.status_code == 201 and made.headers["Cache-Control"] == "no-store"
    listed = client.get(API)
    assert "secret" not in listed.get_json()["items"][0]


def test_a_second_test_while_one_waits_is_the_waiting_one(app, client, receiver):
    login(client, "alice")
    body = verified(app, client, receiver)
    first = client.post(f"{API}/{body['id']}/test", json={})
    second = client.post(f"{API}/{body['id']}/test", json={})
    assert first.status_code == second.status_code == 202
    assert second.get_json()["id"] == first.get_json()["id"]
    tests = [d for d in deliveries_of(app, body["id"]) if d.type == "webhook.test"]
    assert len(tests) == 1
    run_jobs(app)  # once it went, the next test is a new one
    third = client.post(f"{API}/{body['id']}/test", json={})
    assert third.get_json()["id"] != first.get_json()["id"]


def test_the_deliveries_query_names_the_owner(app, client, receiver):
    from wikinotify.outbound import endpoints

    login(client, "alice")
    body = create(client, receiver.url("/hook")).get_json()
    with app.app_context():
        session = db.session()
        alice = endpoints.Caller(str(user("alice").id))
        bob = endpoints.Caller(str(user("bob").id))
        assert len(endpoints.deliveries(session, alice, body["id"]).items) == 1
        # Bob, even handed Alice's endpoint id past the look-up, reads nothing.
        assert endpoints.deliveries(session, bob, body["id"]).items == []
        # An administrator reaches the site's endpoints, not Alice's.
        admin = endpoints.Caller(str(user("bob").id), admin=True)
        assert endpoints.deliveries(session, admin, body["id"]).items == []


def test_a_disabled_endpoint_is_not_tested(app, client, receiver):
    login(client, "alice")
    body = verified(app, client, receiver)
    assert client.patch(f"{API}/{body['id']}", json={"enabled": False}).get_json()["state"] \
        == "disabled"
    response = client.post(f"{API}/{body['id']}/test", json={})
    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "disabled"


# -- changing and deleting --------------------------------------------------------------------


def test_disabling_cancels_what_waits_and_enabling_does_not_replay_it(app, client, receiver):
    login(client, "alice")
    body = verified(app, client, receiver)
    queued = client.post(f"{API}/{body['id']}/test", json={}).get_json()
    disabled = client.patch(f"{API}/{body['id']}", json={"enabled": False}).get_json()
    assert disabled["state"] == "disabled"
    assert disabled["disabledReason"] == "Disabled by its owner."
    states = {d.id: d.state for d in deliveries_of(app, body["id"])}
    assert states[queued["id"]] == "cancelled"
    enabled = client.patch(f"{API}/{body['id']}", json={"enabled": True}).get_json()
    assert enabled["state"] == "active"  # verified before, at the same URL
    assert {d.id: d.state for d in deliveries_of(app, body["id"])}[queued["id"]] == "cancelled"


def test_a_new_url_must_be_verified_again(app, client, receiver):
    login(client, "alice")
    body = verified(app, client, receiver)
    queued = client.post(f"{API}/{body['id']}/test", json={}).get_json()
    moved = client.patch(f"{API}/{body['id']}", json={"url": receiver.url("/elsewhere")})
    assert moved.status_code == 200
    assert moved.get_json() | {"state": None} == {
        **moved.get_json(), "url": receiver.url("/elsewhere"), "verifiedAt": None,
        "state": None}
    assert moved.get_json()["state"] == "unverified"
    rows = deliveries_of(app, body["id"])
    assert {d.id: d.state for d in rows}[queued["id"]] == "cancelled"
    assert rows[-1].type == "webhook.verification" and rows[-1].state == "pending"
    refused = client.patch(f"{API}/{body['id']}", json={"url": "http://10.1.2.3/"})
    assert refused.status_code == 400
    assert "private address 10.1.2.3" in refused.get_json()["error"]["message"]
    assert endpoint_row(app, body["id"]).url == receiver.url("/elsewhere")


def test_a_disabled_webhook_that_moves_stays_disabled_until_enabled(app, client, receiver):
    login(client, "alice")
    body = verified(app, client, receiver)
    client.patch(f"{API}/{body['id']}", json={"enabled": False})
    moved = client.patch(f"{API}/{body['id']}", json={"url": receiver.url("/new")}).get_json()
    assert (moved["state"], moved["verifiedAt"]) == ("disabled", None)
    assert [d for d in deliveries_of(app, body["id"]) if d.state == "pending"] == []
    enabled = client.patch(f"{API}/{body['id']}", json={"enabled": True}).get_json()
    assert enabled["state"] == "unverified"  # the new URL proves itself first
    newest = deliveries_of(app, body["id"])[-1]
    assert (newest.type, newest.state) == ("webhook.verification", "pending")


def test_patch_changes_what_it_names_and_nothing_else(app, client, receiver):
    login(client, "alice")
    body = create(client, receiver.url()).get_json()
    response = client.patch(f"{API}/{body['id']}", json={"categories": ["mention"]})
    before = {key: value for key, value in body.items() if key != "secret"}
    assert response.get_json() == {**before, "categories": ["mention"]}
    bad = client.patch(f"{API}/{body['id']}", json={"categories": ["nope"]})
    assert list(bad.get_json()["error"]["fields"]) == ["categories.0"]
    unknown = client.patch(f"{API}/{body['id']}", json={"secret": "whsec_mine"})
    assert list(unknown.get_json()["error"]["fields"]) == ["secret"]


def test_delete_takes_the_deliveries_with_it(app, client, receiver):
    login(client, "alice")
    body = create(client, receiver.url()).get_json()
    assert deliveries_of(app, body["id"])  # its verification
    assert client.delete(f"{API}/{body['id']}", json={}).status_code == 204
    assert client.get(API).get_json()["items"] == []
    assert deliveries_of(app, body["id"]) == []
    assert client.delete(f"{API}/{body['id']}", json={}).status_code == 404


# -- the deliveries page ----------------------------------------------------------------------


def test_deliveries_are_keyset_paginated_newest_first(app, client, receiver):
    login(client, "alice")
    body = create(client, receiver.url()).get_json()
    with app.app_context():
        db.session.add_all(
            Delivery(endpoint_id=body["id"], message_id=f"msg_page_{n}", type="watchedPage",
                     state="delivered", attempts=1, response_code=200)
            for n in range(119)
        )
        db.session.commit()
    seen, cursor, sizes = [], None, []
    while True:
        query = {"cursor": cursor} if cursor else {}
        page = client.get(f"{API}/{body['id']}/deliveries", query_string=query).get_json()
        sizes.append(len(page["items"]))
        seen += [d["id"] for d in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert sizes == [50, 50, 20]
    assert seen == sorted(seen, reverse=True) and len(set(seen)) == 120
    for bad in ("abc", "0", "-1", "1" * 40):
        response = client.get(f"{API}/{body['id']}/deliveries", query_string={"cursor": bad})
        assert response.status_code == 400, bad
        assert list(response.get_json()["error"]["fields"]) == ["cursor"]


# -- chat -------------------------------------------------------------------------------------


def test_a_chat_target_is_write_only(app, client, receiver):
    login(client, "alice")
    url = f"ntfy://127.0.0.1:{receiver.port}/chat?token=s3cr3t-t0ken"
    response = client.post(CHAT, json={"url": url, "description": "my phone"})
    assert response.status_code == 201
    body = response.get_json()
    assert body["state"] == "active"
    assert "s3cr3t-t0ken" not in response.get_data(as_text=True)
    assert body["target"].startswith("ntfy://")
    listed = client.get(CHAT)
    assert [t["id"] for t in listed.get_json()["items"]] == [body["id"]]
    assert "s3cr3t-t0ken" not in listed.get_data(as_text=True)
    row = endpoint_row(app, body["id"])
    assert row.url is None and b"s3cr3t-t0ken" not in row.target_encrypted
    with app.app_context():
        assert secrets_box.unseal(row.target_encrypted) == url
    # Every category she may see, when she names none.
    assert "watchedPage" in body["categories"] and "mention" in body["categories"]
    assert client.delete(f"{CHAT}/{body['id']}", json={}).status_code == 204
    assert client.get(CHAT).get_json()["items"] == []


@pytest.mark.parametrize(("url", "reason"), [
    ("mmost://10.0.0.7/token", "private address 10.0.0.7"),
    ("gotify://167772167/token", "private address 10.0.0.7"),
    ("ntfy://169.254.169.254/topic", "link-local address 169.254.169.254"),
    ("nosuchservice://whatever", "not a URL Apprise can send to"),
    ("json://93.184.215.14/hook", "add a webhook instead"),
    ("ntfy://ntfy.example.org/topic?+X-Injected=yes", "+X-Injected= is not accepted"),
    ("discord://1234/abcd?template=/etc/passwd", "template= is not accepted"),
])
def test_a_chat_url_the_guard_or_apprise_refuses_is_a_400(client, url, reason):
    login(client, "alice")
    response = client.post(CHAT, json={"url": url})
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert list(error["fields"]) == ["url"]
    assert reason in error["message"], error["message"]


def test_a_chat_test_message_is_queued(app, client, receiver):
    login(client, "alice")
    target = client.post(CHAT, json={"url": f"ntfy://127.0.0.1:{receiver.port}/chat"})
    response = client.post(f"{CHAT}/{target.get_json()['id']}/test", json={})
    assert response.status_code == 202
    assert response.get_json()["type"] == "chat.test"
    login(client, "bob")
    assert client.post(f"{CHAT}/{target.get_json()['id']}/test", json={}).status_code == 404


# -- the preferences grid: a column per channel set up ------------------------------------

PREFERENCES = "/_notifications/api/preferences"


def grid(client) -> dict:
    body = client.get(PREFERENCES).get_json()
    return {"channels": body["channels"], **{c["key"]: c for c in body["categories"]}}


def stored_preferences(app, name="alice") -> dict:
    from wikinotify.models import Preference

    with app.app_context():
        rows = db.session.scalars(
            sa.select(Preference).where(Preference.user_id == str(user(name).id)))
        return {(r.category, r.channel): r.enabled for r in rows}


def test_the_grid_has_a_column_per_channel_set_up(app, client, receiver):
    login(client, "alice")
    before = grid(client)
    assert before["channels"] == ["inApp", "email"]
    assert "webhook" not in before["mention"] and "chat" not in before["mention"]

    hook = create(client, receiver.url()).get_json()  # unverified counts: she set it up
    after = grid(client)
    assert after["channels"] == ["inApp", "email", "webhook"]
    # Off by default where email is, on where email is (mail being off changes neither).
    assert after["mention"]["webhook"] is True and after["pageCreated"]["webhook"] is False
    assert after["mention"]["defaults"]["webhook"] is True

    client.post(CHAT, json={"url": f"ntfy://127.0.0.1:{receiver.port}/chat"})
    assert grid(client)["channels"] == ["inApp", "email", "webhook", "chat"]
    client.patch(f"{API}/{hook['id']}", json={"enabled": False})
    assert grid(client)["channels"] == ["inApp", "email", "chat"]


def test_the_outbound_channels_save_like_the_others(app, client, receiver):
    login(client, "alice")
    create(client, receiver.url())
    body = client.get(PREFERENCES).get_json()
    wanted = {c["key"]: {"inApp": c["inApp"], "email": c["email"], "webhook": c["webhook"]}
              for c in body["categories"]}
    wanted["mention"]["webhook"] = False
    saved = client.put(PREFERENCES, json={"categories": wanted})
    assert saved.status_code == 200, saved.get_json()
    assert stored_preferences(app) == {("mention", "webhook"): False}
    # Left out, a channel stays as it is.
    without = {key: {"inApp": c["inApp"], "email": c["email"]} for key, c in wanted.items()}
    client.put(PREFERENCES, json={"categories": without})
    assert stored_preferences(app) == {("mention", "webhook"): False}
    assert grid(client)["mention"]["webhook"] is False
    wanted["mention"]["webhook"] = "no"
    refused = client.put(PREFERENCES, json={"categories": wanted})
    assert list(refused.get_json()["error"]["fields"]) == ["categories.mention.webhook"]


def test_the_page_shows_and_saves_the_webhook_column(app, client, receiver):
    login(client, "alice")
    create(client, receiver.url())
    html = client.get("/_notifications/preferences").get_data(as_text=True)
    assert 'name="mention.webhook"' in html and 'name="mention.chat"' not in html
    # The form as a browser without JavaScript sends it: only the checked boxes.
    form = {f"{key}.inApp": "on" for key in ("mention", "commentReply")}
    form.update({"watchedPage.webhook": "on", "action": "save"})
    assert client.post("/_notifications/preferences", data=form).status_code == 302
    stored = stored_preferences(app)
    assert stored[("mention", "webhook")] is False
    assert ("watchedPage", "webhook") not in stored  # on, as its default
