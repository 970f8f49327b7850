"""Every change to a webhook or a chat target, an administrator's site-wide ones included,
is recorded through ``Host.audit`` (docs/channels.md#webhooks): made, changed (enabled, disabled),
secret rotated, deleted; from the API and from the pages alike. A record names the
endpoint, never a secret, a chat target's URL or a webhook URL's path."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from demo.models import AuditLog, db
from tests.helpers.web import login
from tests.helpers.wiki import user
from wikinotify.models import Endpoint
from wikinotify.outbound import engine
from wikinotify.state import state

API = "/_notifications/api/webhooks"
CHAT = "/_notifications/api/chat"
HOOK = "http://127.0.0.1:9/hooks/T0KEN-IN-PATH"
CHAT_URL = "ntfy://127.0.0.1:9/s3cr3t-topic"


pytestmark = pytest.mark.app_config(WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"])


def audits(app) -> list[AuditLog]:
    with app.app_context():
        rows = list(db.session.scalars(sa.select(AuditLog).order_by(AuditLog.id)))
        db.session.expunge_all()
        return rows


def id_of(app, name: str) -> str:
    with app.app_context():
        return str(user(name).id)


def assert_no_secret(records: list[AuditLog], *secrets: str) -> None:
    text = json.dumps([r.details for r in records])
    for secret in ("whsec_", "T0KEN-IN-PATH", "s3cr3t-topic", *secrets):
        assert secret not in text, secret


def test_each_change_to_a_webhook_is_audited_without_its_secret(app, client):
    login(client, "alice")
    made = client.post(API, json={"url": HOOK, "categories": ["watchedPage"]}).get_json()
    hook = made["id"]
    client.patch(f"{API}/{hook}", json={"description": "ci", "enabled": False})
    client.patch(f"{API}/{hook}", json={"description": "ci"})  # changes nothing: no record
    rotated = client.post(f"{API}/{hook}/rotate-secret", json={}).get_json()
    assert client.delete(f"{API}/{hook}", json={}).status_code == 204
    records = audits(app)
    assert [(r.action, r.kind, r.actor_id) for r in records] == [
        ("createNotificationEndpoint", "profile", id_of(app, "alice")),
        ("updateNotificationEndpoint", "profile", id_of(app, "alice")),
        ("rotateNotificationEndpointSecret", "profile", id_of(app, "alice")),
        ("deleteNotificationEndpoint", "profile", id_of(app, "alice")),
    ]
    assert records[0].details == {"endpoint": hook, "channel": "webhook", "scope": "user",
                                  "target": "127.0.0.1", "state": "unverified",
                                  "categories": ["watchedPage"]}
    assert records[1].details["fields"] == ["description", "enabled"]
    assert records[1].details["state"] == "disabled"
    assert_no_secret(records, made["secret"], rotated["secret"])


def test_a_chat_target_is_audited_masked(app, client):
    login(client, "alice")
    target = client.post(CHAT, json={"url": CHAT_URL}).get_json()["id"]
    assert client.delete(f"{CHAT}/{target}", json={}).status_code == 204
    records = audits(app)
    assert [(r.action, r.details["channel"], r.details["endpoint"]) for r in records] == [
        ("createNotificationEndpoint", "chat", target),
        ("deleteNotificationEndpoint", "chat", target),
    ]
    assert records[0].details["target"].startswith("ntfy://")
    assert_no_secret(records)


def test_an_administrators_site_wide_changes_are_audited_as_hers(app, client):
    login(client, "admin")
    site = client.post(API, json={"url": HOOK, "categories": ["pageCreated"],
                                  "scope": "site"}).get_json()["id"]
    client.patch(f"{API}/{site}", json={"categories": ["pageCreated", "pageDeleted"]})
    records = audits(app)
    assert [(r.action, r.kind, r.actor_id, r.details["scope"]) for r in records] == [
        ("createNotificationEndpoint", "admin", id_of(app, "admin"), "site"),
        ("updateNotificationEndpoint", "admin", id_of(app, "admin"), "site"),
    ]
    assert records[1].details["fields"] == ["categories"]
    assert_no_secret(records)


def test_the_pages_buttons_are_audited_as_the_api_is(app, client):
    login(client, "alice")
    hook = client.post(API, json={"url": HOOK, "categories": ["watchedPage"]}).get_json()["id"]
    for action in ("disable", "enable", "rotate", "delete"):
        assert client.post(f"/_notifications/webhooks/{hook}/{action}").status_code in (200, 302)
    assert [r.action for r in audits(app)] == [
        "createNotificationEndpoint",
        "updateNotificationEndpoint",
        "updateNotificationEndpoint",
        "rotateNotificationEndpointSecret",
        "deleteNotificationEndpoint",
    ]
    assert [r.details["state"] for r in audits(app)[1:3]] == ["disabled", "unverified"]


@pytest.mark.parametrize(("url", "secrets", "shown"), [
    # ntfy's short form is a topic on ntfy.sh: what stands where a host would is the topic.
    ("ntfy://my-secret-topic-8f3a", ["my-secret-topic-8f3a"], "ntfys://…"),
    ("ntfy://127.0.0.1:9/my-secret-topic-8f3a", ["my-secret-topic-8f3a"], "ntfy://127.0.0.1/…"),
    ("tgram://123456789:ABCdefGhIJKlmnOPQrstUVwxyz/12345",
     ["123456789", "ABCdefGhIJKlmnOPQrstUVwxyz", "1...z"], "tgram://…"),
    ("discord://1234567/abcdefghijk", ["1234567", "abcdefghijk", "1...7"], "discord://…"),
    ("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ",
     ["T1JJ3T3L2", "A1BRTD4JD", "TIiajkdnlazkcOXrIdevi7FQ", "T...2"], "slack://…"),
])
def test_a_chat_targets_secret_is_in_no_record_answer_or_page(app, client, url, secrets, shown):
    login(client, "alice")
    made = client.post(CHAT, json={"url": url})
    assert made.status_code == 201, made.get_data(as_text=True)
    listed = client.get(CHAT).get_data(as_text=True)
    page = client.get("/_notifications/preferences/webhooks").get_data(as_text=True)
    records = audits(app)
    assert records[0].details["target"] == shown
    assert made.get_json()["target"] == shown and shown in page
    for secret in secrets:
        assert secret not in made.get_data(as_text=True), secret
        assert secret not in listed, secret
        assert secret not in page, secret
    assert_no_secret(records, *secrets)


def one_delivery_run(app) -> None:
    """A run of the delivery engine as the worker's job makes it: no request, no one
    signed in."""
    with app.app_context():
        st = state(app)
        engine.run(app, db.session(), st.host, st.registry)


def test_the_engine_activating_or_disabling_an_endpoint_is_audited_with_no_actor(
    app, client, receiver
):
    login(client, "alice")
    path = "/hooks/T0KEN-IN-PATH"
    made = client.post(API, json={"url": receiver.url(path), "categories": ["watchedPage"]})
    hook = made.get_json()["id"]
    with app.app_context():
        challenge = db.session.get_one(Endpoint, hook).challenge
    receiver.answer(path, 200, body=json.dumps({"challenge": challenge}).encode())
    one_delivery_run(app)  # the verification echoed: active
    receiver.answer(path, 410)
    assert client.post(f"{API}/{hook}/test", json={}).status_code == 202
    one_delivery_run(app)  # gone: disabled
    records = audits(app)[1:]
    assert [(r.action, r.kind, r.actor_id, r.details["endpoint"], r.details["fields"],
             r.details["state"]) for r in records] == [
        ("updateNotificationEndpoint", "profile", None, hook, ["verified"], "active"),
        ("updateNotificationEndpoint", "profile", None, hook, ["enabled"], "disabled"),
    ]
    assert records[1].details["reason"] == "The receiver answered 410 Gone."
    assert_no_secret(records, made.get_json()["secret"], challenge)
