"""The push API (docs/channels.md#browser-push): the VAPID key, subscribing a browser, the
guard on its endpoint, the per-account bound, and someone else's subscription answering as
a missing one."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from demo.models import db
from tests.helpers.app import dispose, make_app
from tests.helpers.push_service import PushService, b64url, unb64url
from tests.helpers.web import login
from wikinotify.config import ConfigError
from wikinotify.models import Endpoint, InstanceSettings, PushSubscription
from wikinotify.outbound import push_keys

pytestmark = [
    pytest.mark.app_config(WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"], WIKINOTIFY_PUSH_PER_ACCOUNT=2),
]

API = "/_notifications/api/push/subscriptions"
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"


@pytest.fixture
def service():
    service = PushService()
    yield service
    service.close()


def post(client, body, user_agent: str = FIREFOX):
    return client.post(API, json=body, headers={"User-Agent": user_agent})


def delete(client, subscription_id):
    return client.delete(f"{API}/{subscription_id}", headers={"Content-Type": "application/json"})


def fields_of(answer) -> dict:
    assert answer.status_code == 400, answer.get_json()
    return answer.get_json()["error"]["fields"]


def test_the_key_is_a_p256_point_made_once_and_kept_sealed(app, as_alice):
    first = as_alice.get("/_notifications/api/push/key").get_json()["publicKey"]
    assert len(unb64url(first)) == 65 and unb64url(first)[0] == 4
    assert as_alice.get("/_notifications/api/push/key").get_json()["publicKey"] == first
    with app.app_context():
        sealed = db.session.scalar(sa.select(InstanceSettings.vapid_private_key_encrypted))
        assert sealed is not None and first.encode() not in sealed
        key = push_keys.parse(push_keys.secrets_box.unseal(sealed))
        assert push_keys.public_key(key) == first


def test_guests_are_refused(client):
    assert client.get("/_notifications/api/push/key").status_code == 401
    assert client.get(API).status_code == 401


def test_an_operators_key_is_served_and_a_malformed_one_stops_the_start(app, database_url):
    key = push_keys.raw(push_keys.ec.generate_private_key(push_keys.ec.SECP256R1()))
    with pytest.raises(ConfigError, match="WIKINOTIFY_VAPID_PRIVATE_KEY is not a usable"):
        make_app(database_url, WIKINOTIFY_VAPID_PRIVATE_KEY=key[:-4])
    given = make_app(database_url, WIKINOTIFY_VAPID_PRIVATE_KEY=key,
                     WIKINOTIFY_REDIS_URL=app.config["WIKINOTIFY_REDIS_URL"])
    client = given.test_client()
    login(client, "alice")
    served = client.get("/_notifications/api/push/key").get_json()["publicKey"]
    dispose(given)
    assert served == push_keys.public_key(push_keys.parse(key))


def test_a_browser_subscribes_once_however_often_it_asks(app, as_alice, service):
    browser = service.browser("a")
    created = post(as_alice, browser.subscription())
    assert created.status_code == 201
    again = post(as_alice, browser.subscription())
    assert again.status_code == 200 and again.get_json()["browser"] == "Firefox on Linux"
    (shown,) = as_alice.get(API).get_json()["items"]
    assert set(shown) == {"id", "browser", "service", "endpointHash", "createdAt", "lastUsedAt"}
    assert shown["service"] == "127.0.0.1" and shown["lastUsedAt"] is None
    assert "push" in as_alice.get("/_notifications/api/preferences").get_json()["channels"]


def test_a_browser_someone_else_subscribed_before_becomes_the_new_readers(app, client, service):
    browser = service.browser("shared")
    login(client, "bob")
    assert post(client, browser.subscription()).status_code == 201
    login(client, "alice")
    assert post(client, browser.subscription()).status_code == 201
    with app.app_context():
        owners = db.session.scalars(sa.select(PushSubscription.user_id)).all()
        assert len(owners) == 1 and db.session.scalar(sa.select(sa.func.count(Endpoint.id))) == 1


@pytest.mark.parametrize(("endpoint", "reason"), [
    ("https://push.example.net/send/1", "push.example.net is not a push service"),
    ("http://fcm.googleapis.com/fcm/send/1", "over https only"),
    ("ftp://fcm.googleapis.com/x", "scheme ftp is not allowed"),
    ("https://user:pw@fcm.googleapis.com/x", "credentials in the URL"),
    ("not a url", "scheme (none) is not allowed"),
])
def test_an_endpoint_off_the_push_services_is_refused_naming_why(as_alice, service, endpoint,
                                                                  reason):
    body = {**service.browser("x").subscription(), "endpoint": endpoint}
    (message,) = fields_of(post(as_alice, body))["endpoint"]
    assert reason in message


def test_an_operator_adds_a_push_service(app, as_alice, service):
    app.config["WIKINOTIFY_PUSH_SERVICES"] = ["push.example.net"]
    body = {**service.browser("x").subscription(), "endpoint": "https://push.example.net/s/1"}
    (message,) = fields_of(post(as_alice, body))["endpoint"]
    assert "not a push service" not in message  # past the list, to the guard's lookup


@pytest.mark.parametrize(("change", "field"), [
    ({"keys": {"auth": "AAAAAAAAAAAAAAAAAAAAAA"}}, "keys.p256dh"),
    ({"keys": {"p256dh": "BBBB", "auth": "AAAAAAAAAAAAAAAAAAAAAA"}}, "keys.p256dh"),
    ({"keys": {"p256dh": "B" * 87, "auth": "a+b/"}}, "keys.auth"),
    ({"endpoint": ""}, "endpoint"),
    ({"extra": 1}, "extra"),
])
def test_a_malformed_subscription_is_a_400_naming_the_field(as_alice, service, change, field):
    body = {**service.browser("x").subscription(), **change}
    assert field in fields_of(post(as_alice, body))


def test_a_p256dh_off_the_curve_is_refused_with_the_keys_reason(as_alice, service):
    # 65 bytes and the 0x04 prefix, but (0, 0) is no point of P-256: every send would fail.
    body = {**service.browser("x").subscription(),
            "keys": {"p256dh": b64url(b"\x04" + bytes(64)), "auth": "AAAAAAAAAAAAAAAAAAAAAA"}}
    assert fields_of(post(as_alice, body))["keys.p256dh"] == [
        "Not a browser's p256dh key (65 bytes)."]


def test_a_reader_holds_at_most_the_bound(as_alice, service):
    for name in ("a", "b"):
        assert post(as_alice, service.browser(name).subscription()).status_code == 201
    refused = post(as_alice, service.browser("c").subscription())
    assert refused.status_code == 409
    assert refused.get_json()["error"]["code"] == "too_many_subscriptions"
    assert len(as_alice.get(API).get_json()["items"]) == 2


def test_someone_elses_subscription_answers_as_a_missing_one(app, client, service):
    login(client, "bob")
    bobs = post(client, service.browser("bob").subscription()).get_json()["id"]
    login(client, "alice")
    missing = delete(client, bobs + 1000)
    others = delete(client, bobs)
    assert others.status_code == missing.status_code == 404
    assert others.get_json() == missing.get_json()
    assert delete(client, "abc").status_code == 404
    login(client, "bob")
    assert [s["id"] for s in client.get(API).get_json()["items"]] == [bobs]
    assert delete(client, bobs).status_code == 204
    assert client.get(API).get_json()["items"] == []


def test_the_service_worker_is_served_at_the_prefix(client):
    answer = client.get("/_notifications/sw.js")
    assert answer.status_code == 200 and answer.mimetype == "text/javascript"
    assert answer.headers["Service-Worker-Allowed"] == "/_notifications/"
    assert "notificationclick" in answer.get_data(as_text=True)


def test_the_browser_label_is_read_simply():
    from wikinotify.outbound.push_subscriptions import browser_of

    assert browser_of(FIREFOX) == "Firefox on Linux"
    assert browser_of("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
                      "(KHTML, like Gecko) Chrome/131.0 Safari/537.36 Edg/131.0") == \
        "Edge on Windows"
    assert browser_of("Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) "
                      "AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 "
                      "Safari/604.1") == "Safari on iOS"
    assert browser_of(None) == ""


@pytest.mark.app_config(WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"], WIKINOTIFY_PUSH_PER_ACCOUNT=2,
                        WIKINOTIFY_ENDPOINTS_PER_ACCOUNT=1)
def test_push_subscriptions_do_not_take_the_webhooks_places(app, as_alice, service):
    for name in ("a", "b"):
        assert post(as_alice, service.browser(name).subscription()).status_code == 201
    with app.app_context():
        from tests.helpers.wiki import user
        from wikinotify.outbound import endpoints

        alice = str(user("alice").id)
        endpoints.create_webhook(db.session, alice, url="https://hooks.example/in",
                                 categories=["watchedPage"])  # her one webhook still fits
        with pytest.raises(endpoints.TooMany):
            endpoints.create_webhook(db.session, alice, url="https://hooks.example/2",
                                     categories=["watchedPage"])
        db.session.rollback()
