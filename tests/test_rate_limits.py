"""The write API's rate limits (docs/adopting.md#what-the-api-and-the-pages-refuse): an account that
calls the writes which make workers or third parties work (mutes, webhook and chat changes, tests,
rotations, an administrator's retries) faster than its settings allow gets a 429 with
``Retry-After``, in the API's error shape, or a readable page for a form. The count is the
account's, kept in wikinotify's Redis (every process sees it), and a Redis that is down limits
nothing rather than taking the writes down with it. Every test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import time

import pytest

from tests.helpers.app import dispose, make_app, seeded_app
from tests.helpers.web import login
from tests.helpers.wiki import user
from wikinotify import queue
from wikinotify.config import ConfigError

MUTES = "/_notifications/api/mutes"
WEBHOOKS = "/_notifications/api/webhooks"
WRITES = 3  # the write limit these tests set
SENDS = 2  # and the stricter one for sends


pytestmark = [
    # The suite's receiver listens on 127.0.0.1, which the guard refuses by default.
    pytest.mark.app_config(WIKINOTIFY_WRITE_RATE_LIMIT=f"{WRITES}/minute",
                           WIKINOTIFY_SEND_RATE_LIMIT=f"{SENDS}/minute",
                           WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"]),
]


#: The API operations the limits cover: a route that joins them or leaves them changes
#: this list.
LIMITED_API = {
    "api_mute", "api_unmute", "api_retry_event", "api_retry_mail", "api_retry_delivery",
    "create_webhook_api", "update_webhook", "delete_webhook", "rotate_webhook_secret",
    "test_webhook", "create_chat_api", "delete_chat", "test_chat",
    "subscribe_push", "delete_push_subscription",
    "create_announcement_api", "withdraw_announcement_api",
}


def user_id(app, name: str) -> str:
    with app.app_context():
        return str(user(name).id)


def mute(client, target: str):
    return client.put(MUTES, json={"kind": "user", "id": target})


def assert_rate_limited(response) -> None:
    """A 429 in the API's error shape, saying when to come back."""
    assert response.status_code == 429
    assert response.get_json()["error"]["code"] == "rate_limited"
    assert response.get_json()["error"]["message"]
    assert 1 <= int(response.headers["Retry-After"]) <= 60


def test_the_write_after_the_limit_is_a_429_with_retry_after(app, client):
    login(client, "alice")
    bob = user_id(app, "bob")
    answers = [mute(client, bob).status_code for _ in range(WRITES)]
    assert answers == [204] * WRITES
    assert_rate_limited(mute(client, bob))
    assert_rate_limited(client.delete(f"{MUTES}/user/{bob}", json={}))  # one count per account


def test_test_sends_have_the_stricter_limit(app, client, receiver):
    login(client, "alice")
    created = client.post(WEBHOOKS, json={"url": receiver.url("/hook"),
                                          "categories": ["watchedPage"]})
    assert created.status_code == 201  # a creation is a send: one of the two
    hook = created.get_json()["id"]
    assert client.post(f"{WEBHOOKS}/{hook}/test", json={}).status_code == 202
    assert_rate_limited(client.post(f"{WEBHOOKS}/{hook}/test", json={}))


def test_another_account_is_not_held_back_by_one_that_is(app, client):
    alice, bob = app.test_client(), app.test_client()
    login(alice, "alice")
    login(bob, "bob")
    carol = user_id(app, "carol")
    for _ in range(WRITES):
        mute(alice, carol)
    assert_rate_limited(mute(alice, carol))
    assert mute(bob, carol).status_code == 204


def test_reads_are_never_counted(app, client):
    login(client, "alice")
    assert all(client.get(MUTES).status_code == 200 for _ in range(WRITES * 3))
    assert mute(client, user_id(app, "bob")).status_code == 204


def test_the_count_lives_in_redis_so_every_process_shares_it(app, client, database_url):
    """Two app instances (two web processes) on one Redis: what one counted, the other
    sees."""
    other = seeded_app(database_url, **{key: app.config[key] for key in (
        "WIKINOTIFY_REDIS_URL", "WIKINOTIFY_QUEUE", "WIKINOTIFY_WRITE_RATE_LIMIT")})
    try:
        bob = user_id(app, "bob")
        login(client, "alice")
        for _ in range(WRITES):
            assert mute(client, bob).status_code == 204
        elsewhere = other.test_client()
        login(elsewhere, "alice")
        assert_rate_limited(mute(elsewhere, bob))
    finally:
        dispose(other)


@pytest.mark.parametrize("app_config", [{"WIKINOTIFY_REDIS_URL": "redis://127.0.0.1:1",
                                         "WIKINOTIFY_WRITE_RATE_LIMIT": f"{WRITES}/minute"}])
def test_with_redis_down_the_writes_are_answered_and_limited_in_memory(app, client):
    login(client, "alice")
    bob = user_id(app, "bob")
    assert [mute(client, bob).status_code for _ in range(WRITES)] == [204] * WRITES
    assert_rate_limited(mute(client, bob))


def test_a_hung_redis_costs_a_limited_write_under_a_second(database_url, hanging_relay,
                                                           queue_name):
    """A Redis that accepts and never answers: the limiter gives up as quickly as the
    kick does, then counts in memory."""
    app = seeded_app(database_url, WIKINOTIFY_QUEUE=queue_name,
                     WIKINOTIFY_REDIS_URL=f"redis://127.0.0.1:{hanging_relay.port}/0")
    try:
        client = app.test_client()
        login(client, "alice")
        bob = user_id(app, "bob")
        for _ in range(2):
            started = time.monotonic()
            assert mute(client, bob).status_code == 204
            assert time.monotonic() - started < queue.QUICK_TIMEOUT * 2 + 0.5
    finally:
        dispose(app)


def test_a_form_over_the_limit_gets_a_readable_page(app, client):
    login(client, "alice")
    form = {"kind": "user", "id": user_id(app, "bob"), "action": "mute", "next": "/"}
    for _ in range(WRITES):
        assert client.post("/_notifications/mutes", data=form).status_code == 302
    page = client.post("/_notifications/mutes", data=form)
    assert page.status_code == 429
    assert page.mimetype == "text/html"
    assert int(page.headers["Retry-After"]) >= 1
    assert "Too many changes" in page.get_data(as_text=True)


def test_the_wikis_own_routes_are_never_limited(app, client):
    """wikinotify's limiter is not the host's: only its own routes are counted."""
    login(client, "alice")
    answers = {client.post("/pages/home/watch").status_code for _ in range(WRITES * 2)}
    assert 429 not in answers


@pytest.mark.parametrize("setting", ["WIKINOTIFY_WRITE_RATE_LIMIT",
                                     "WIKINOTIFY_SEND_RATE_LIMIT"])
@pytest.mark.parametrize("value", ["often", "", 30, None])
def test_a_limit_that_is_not_a_rate_stops_start_up_naming_the_setting(database_url, setting,
                                                                       value):
    with pytest.raises(ConfigError, match=setting):
        make_app(database_url, **{setting: value})


def test_each_limited_operation_documents_its_429_and_retry_after(app, client):
    login(client, "alice")
    doc = client.get("/_notifications/api/openapi.json").get_json()
    operations = [op for path in doc["paths"].values() for op in path.values()]
    limited = {op["operationId"]: op["responses"]["429"] for op in operations
               if "Retry-After" in op["responses"].get("429", {}).get("headers", {})}
    assert set(limited) == LIMITED_API
    for answer in limited.values():
        assert answer["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/Error"}
