"""Bad input gets a clear error and loses nothing (docs/rules.md#lessons-learned): a malformed body
is never read as a default, ids and cursors out of range are a 404 and a 400 rather than a database
error, bodies are bounded, and API writes must be JSON or carry the CSRF header. SQLite and
PostgreSQL."""

from __future__ import annotations

import base64
import http.client
import json
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa

from demo.models import db
from tests.helpers.app import make_app
from tests.helpers.jobs import run_jobs
from tests.helpers.web import csrf_token, login, login_with_csrf
from tests.helpers.wiki import edit, entries_for, user, watch
from wikinotify.inbox import Filters, read_marks
from wikinotify.models import Notification

API = "/_notifications/api/notifications"
INBOX = "/_notifications/inbox"


pytestmark = pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True)


@pytest.fixture
def alice_has_mail_pending(app):
    """bob edits two pages alice watches: two unread entries, each with its mail pending,
    for a "mark all read" to wrongly mark."""
    with app.app_context():
        watch("home", "alice")
        edit("handbook/onboarding", "bob", "One")
        edit("home", "bob", "Two")
    run_jobs(app)
    with app.app_context():
        assert [e.email_state for e in entries_for("alice")] == ["pending", "pending"]


def unread_and_pending(app) -> list[tuple[bool, str]]:
    """Alice's entries, unread as the inbox reads it (a "mark all read" is a read mark
    until its job has run, docs/rules.md#read-marks), and their mail states."""
    with app.app_context():
        me = str(user("alice").id)
        rows = db.session.execute(
            sa.select(read_marks.unread(Notification, me), Notification.email_state)
            .where(Notification.user_id == me).order_by(Notification.id))
        return [(bool(unread), state) for unread, state in rows]


MALFORMED = [
    ('{"ids": "x"', "application/json"),
    ("hello", "application/json"),
    ("[]", "application/json"),
    ("null", "application/json"),
    ("0", "application/json"),
    ("\x00", "application/json"),
    ('{"pageId": 5}', "application/json"),
]


@pytest.mark.parametrize(("body", "content_type"), MALFORMED,
                         ids=["unclosed", "not-json", "list", "null", "zero", "nul", "int-id"])
def test_a_malformed_mark_all_read_changes_nothing(app, alice_has_mail_pending, client, body,
                                                   content_type):
    login(client, "alice")
    response = client.put(f"{API}/read", data=body, content_type=content_type)
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error["code"] == "invalid" and error["fields"], error
    assert unread_and_pending(app) == [(True, "pending"), (True, "pending")]


def test_a_text_plain_mark_all_read_is_refused_and_changes_nothing(app, alice_has_mail_pending,
                                                                   client):
    login(client, "alice")
    response = client.put(f"{API}/read", data="hello", content_type="text/plain")
    assert response.status_code == 415
    assert unread_and_pending(app) == [(True, "pending"), (True, "pending")]


@pytest.mark.parametrize("body", [None, "{}"], ids=["absent", "empty-object"])
def test_only_an_absent_or_empty_body_means_everything(app, alice_has_mail_pending, client,
                                                       body):
    login(client, "alice")
    response = client.put(f"{API}/read", data=body, content_type="application/json")
    assert response.get_json()["marked"] == 2
    assert unread_and_pending(app) == [(False, "skipped"), (False, "skipped")]


def cursor_of(value) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")


#: The unfiltered list's digest, so each cursor below is refused for what it names.
LIST = Filters().fingerprint()
BAD_CURSORS = {
    "huge-float": cursor_of(f'["2026-01-01T00:00:00+00:00", 1e400, "{LIST}"]'),
    "past-64-bits": cursor_of(f'["2026-01-01T00:00:00+00:00", {2**70}, "{LIST}"]'),
    "deep": cursor_of("[" * 5000 + "]" * 5000),
    "deep-short": cursor_of("[" * 140),
    "naive-time": cursor_of(f'["2026-01-01T00:00:00", 5, "{LIST}"]'),
    "year-one-east": cursor_of(f'["0001-01-01T00:00:00+01:00", 5, "{LIST}"]'),
    "bool-id": cursor_of(f'["2026-01-01T00:00:00+00:00", true, "{LIST}"]'),
    "another-list": cursor_of('["2026-01-01T00:00:00+00:00", 5, "0000000000000000"]'),
    "garbage": "!!not-a-cursor!!",
    "not-a-list": cursor_of('{"a": 1}'),
}


@pytest.mark.parametrize("cursor", BAD_CURSORS.values(), ids=BAD_CURSORS.keys())
def test_a_bad_cursor_is_a_400_on_the_api_and_the_page(app, client, cursor):
    login(client, "alice")
    response = client.get(API, query_string={"cursor": cursor})
    assert response.status_code == 400
    assert response.get_json()["error"]["fields"] == {
        "cursor": ["Not a cursor this API gave out for this list."]}
    assert client.get(INBOX, query_string={"cursor": cursor}).status_code == 400


@pytest.mark.parametrize("raw_id", [str(2**63), str(2**64), "1_0", "+1", "-1", "0", "9" * 40])
def test_an_id_out_of_range_is_a_404_on_the_api_and_the_page(app, client, raw_id):
    login(client, "alice")
    for response in (client.put(f"{API}/{raw_id}/read", json={}),
                     client.delete(f"{API}/{raw_id}", json={}),
                     client.post(f"{INBOX}/{raw_id}/read"),
                     client.post(f"{INBOX}/{raw_id}/dismiss")):
        assert response.status_code == 404, response.request.path


# -- numbers out of range: a 400 naming the field, wherever a number is read ----------------

#: More digits than Python's int() reads (4,300), and more than any column holds.
HUGE = "9" * 5000
PREFERENCES_API = "/_notifications/api/preferences"
SETTINGS_API = "/_notifications/api/admin/settings"


def schedule_body(**numbers: str) -> str:
    """A preferences body whose schedule holds ``numbers`` as written (json.dumps cannot
    write a number Python cannot hold)."""
    schedule = ", ".join(f'"{name}": {value}' for name, value in numbers.items())
    return f'{{"categories": {{}}, "emailSchedule": {{"cadence": "weekly", {schedule}}}}}'


def settings_body(name: str, value: str) -> str:
    numbers = {"retentionDays": "30", "emailDelaySeconds": "60", "mailBatchSize": "500",
               name: value}
    return "{" + ", ".join(f'"{key}": {number}' for key, number in numbers.items()) + "}"


JSON_NUMBERS = {
    "hour-huge": ("alice", PREFERENCES_API, schedule_body(hour=HUGE), "emailSchedule.hour"),
    "hour-past-64-bits": ("alice", PREFERENCES_API, schedule_body(hour=str(2**64)),
                          "emailSchedule.hour"),
    "hour-negative-huge": ("alice", PREFERENCES_API, schedule_body(hour="-" + HUGE),
                           "emailSchedule.hour"),
    "weekday-huge": ("alice", PREFERENCES_API, schedule_body(weekday=HUGE),
                     "emailSchedule.weekday"),
    "weekday-float": ("alice", PREFERENCES_API, schedule_body(weekday="1e400"),
                      "emailSchedule.weekday"),
    "retention-huge": ("admin", SETTINGS_API, settings_body("retentionDays", HUGE),
                       "retentionDays"),
    "delay-past-64-bits": ("admin", SETTINGS_API, settings_body("emailDelaySeconds",
                                                                str(2**70)), "emailDelaySeconds"),
    "batch-huge": ("admin", SETTINGS_API, settings_body("mailBatchSize", HUGE), "mailBatchSize"),
}


@pytest.mark.parametrize(("who", "url", "body", "field"), JSON_NUMBERS.values(),
                         ids=JSON_NUMBERS.keys())
def test_a_json_number_out_of_range_is_a_400_naming_its_field(app, client, who, url, body,
                                                              field):
    login(client, who)
    response = client.put(url, data=body, content_type="application/json")
    assert response.status_code == 400
    assert field in response.get_json()["error"]["fields"], response.get_json()


FORM_NUMBERS = {
    "hour-huge": ("alice", "/_notifications/preferences/schedule",
                  {"cadence": "daily", "hour": HUGE, "weekday": "0"}, "hour"),
    "hour-past-64-bits": ("alice", "/_notifications/preferences/schedule",
                          {"cadence": "daily", "hour": str(2**64), "weekday": "0"}, "hour"),
    "weekday-huge": ("alice", "/_notifications/preferences/schedule",
                     {"cadence": "weekly", "hour": "9", "weekday": HUGE}, "weekday"),
    "retention-huge": ("admin", "/_notifications/admin",
                       {"retentionDays": HUGE, "emailDelaySeconds": "60",
                        "mailBatchSize": "100"}, "retentionDays"),
}


@pytest.mark.parametrize(("who", "url", "form", "field"), FORM_NUMBERS.values(),
                         ids=FORM_NUMBERS.keys())
def test_a_form_number_out_of_range_is_a_400_naming_its_field(app, client, who, url, form,
                                                              field):
    login(client, who)
    response = client.post(url, data=form)
    assert response.status_code == 400
    html = response.get_data(as_text=True)
    assert f"check {field}." in html or f'id="wn-{field}-error"' in html, html[-3000:]


@pytest.mark.parametrize("kind", ["page", "user"])
@pytest.mark.parametrize("raw_id", [str(2**31), str(2**63), "9" * 64])
def test_muting_an_id_past_what_the_wiki_holds_is_a_404(app, client, kind, raw_id):
    login(client, "alice")
    response = client.put("/_notifications/api/mutes", json={"kind": kind, "id": raw_id})
    assert (response.status_code, response.get_json()["error"]["code"]) == (404, "not_found")


BIG = json.dumps({"categories": {"x" * 70_000: {}}})


@pytest.mark.parametrize("url", ["/_notifications/api/preferences", f"{API}/read",
                                 "/_notifications/api/admin/settings"])
def test_a_body_over_64_kb_is_a_413_before_it_is_parsed(app, client, url):
    login(client, "admin")
    response = client.put(url, data=BIG, content_type="application/json")
    assert response.status_code == 413
    assert response.get_json()["error"]["code"] == "request_entity_too_large"


def test_a_chunked_body_over_64_kb_is_a_413_too(app, live_url):
    """No Content-Length to refuse up front: the limit stops the read instead."""
    client = app.test_client()
    login(client, "alice")
    cookie = client.get_cookie("session").value
    parts = urlsplit(live_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    connection.putrequest("PUT", "/_notifications/api/preferences")
    for header, value in (("Content-Type", "application/json"), ("Cookie", f"session={cookie}"),
                          ("Transfer-Encoding", "chunked")):
        connection.putheader(header, value)
    connection.endheaders()
    for start in range(0, len(BIG), 8192):
        chunk = BIG[start:start + 8192].encode()
        connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    connection.send(b"0\r\n\r\n")
    response = connection.getresponse()
    assert response.status == 413, response.read()
    connection.close()


# -- CSRF on API writes ---------------------------------------------------------------------


@pytest.fixture
def csrf_app(database_url, redis_url, queue_name, app):
    """The same wiki with Flask-WTF's CSRF protection on, as a real deployment runs it."""
    wiki = make_app(database_url, WTF_CSRF_ENABLED=True, WIKINOTIFY_REDIS_URL=redis_url,
                    WIKINOTIFY_QUEUE=queue_name, WIKINOTIFY_MAIL_ENABLED=True)
    yield wiki
    with wiki.app_context():
        db.session.remove()
        db.engine.dispose()


def test_an_api_write_needs_json_or_the_csrf_header(csrf_app, alice_has_mail_pending):
    client = csrf_app.test_client()
    login_with_csrf(client, "alice")
    with csrf_app.app_context():
        entry_id = entries_for("alice")[0].id
    url = f"{API}/{entry_id}"

    cross_site = client.put(f"{API}/read", data="hello", content_type="text/plain")
    assert cross_site.status_code == 415
    bare = client.delete(url)
    assert (bare.status_code, bare.get_json()["error"]["code"]) == (400, "csrf")
    forged = client.delete(url, headers={"X-CSRFToken": "forged"})
    assert forged.status_code == 400
    assert unread_and_pending(csrf_app) == [(True, "pending"), (True, "pending")]

    token = csrf_token(client.get(INBOX).get_data(as_text=True))
    assert client.delete(url, headers={"X-CSRFToken": token}).status_code == 200
    assert client.put(f"{API}/read", json={}).get_json()["marked"] == 1


def test_wikinotify_pages_cannot_be_framed(app, client):
    login(client, "admin")
    for url in (INBOX, "/_notifications/preferences", "/_notifications/admin",
                "/_notifications/unsubscribe?t=x", API):
        response = client.get(url)
        assert response.headers["X-Frame-Options"] == "DENY", url
        assert response.headers["Content-Security-Policy"] == "frame-ancestors 'none'", url
