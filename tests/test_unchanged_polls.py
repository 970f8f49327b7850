"""The badge's unchanged polls answered before Flask dispatches them
(docs/operating.md#the-badges-unchanged-polls): only the very request the full path
answered with a 304, only while the account is trusted and the summary unchanged; a
change, another session, a lapsed cookie or trust all go down the full path at once."""

from __future__ import annotations

import time

import pytest

from demo.models import db
from tests.helpers.jobs import run_jobs
from tests.helpers.web import login
from tests.helpers.wiki import edit, user
from wikinotify.inbox import live
from wikinotify.queue import connection

SUMMARY = "/_notifications/api/notifications/summary"


def _poll(client, etag: str, **headers: str):
    return client.get(SUMMARY, headers={"If-None-Match": etag, **headers})


def _remembered_poll(client, dispatched: list[str]) -> str:
    """Alice's tag, after the full path answered her poll with a 304 (so remembered)."""
    etag = client.get(SUMMARY).headers["ETag"]
    assert _poll(client, etag).status_code == 304
    dispatched.clear()
    return etag


def test_the_same_unchanged_poll_again_is_the_same_304_without_flask(
        app, dispatched, alice):
    etag = alice.get(SUMMARY).headers["ETag"]
    full = _poll(alice, etag)
    assert full.status_code == 304 and dispatched[-1] == SUMMARY
    dispatched.clear()
    again = _poll(alice, etag)
    assert again.status_code == 304 and dispatched == []
    assert again.headers["ETag"] == etag
    replayed = {name: value for name, value in full.headers.items() if name != "Date"}
    assert {name: value for name, value in again.headers.items() if name != "Date"} == replayed
    assert again.headers["Cache-Control"] == "private, no-cache"


def test_a_change_is_seen_by_the_very_next_poll(app, dispatched, alice):
    before = alice.get(SUMMARY).get_json()
    etag = _remembered_poll(alice, dispatched)
    assert _poll(alice, etag).status_code == 304 and dispatched == []
    with app.app_context():
        edit("handbook/onboarding", "carol", "Another edit")
    run_jobs(app)  # her entry coalesces the edit: her version is forgotten
    after = _poll(alice, etag)
    assert after.status_code == 200 and after.get_json()["latestAt"] != before["latestAt"]
    assert after.headers["ETag"] != etag and dispatched == [SUMMARY]


def test_reading_elsewhere_is_seen_by_the_very_next_poll(app, dispatched, alice):
    etag = _remembered_poll(alice, dispatched)
    assert _poll(alice, etag).status_code == 304 and dispatched == []
    other = app.test_client()
    login(other, "alice")  # another device
    assert other.put("/_notifications/api/notifications/read", json={}).status_code == 200
    # ...whose own poll makes the summary's next version before hers asks.
    assert other.get(SUMMARY).get_json()["unread"] == 0
    after = _poll(alice, etag)
    assert after.status_code == 200 and after.get_json()["unread"] == 0


def test_another_session_holding_the_tag_is_not_answered_for_it(
        app, dispatched, alice):
    etag = _remembered_poll(alice, dispatched)
    bob = app.test_client()
    login(bob, "bob")
    dispatched.clear()
    answer = _poll(bob, etag)
    assert answer.status_code == 200 and answer.get_json()["unread"] == 0
    assert dispatched == [SUMMARY]


def test_any_other_header_goes_through_flask(app, dispatched, alice):
    etag = _remembered_poll(alice, dispatched)
    assert _poll(alice, etag, **{"X-Forwarded-Host": "elsewhere.example"}
                 ).status_code == 304
    assert dispatched == [SUMMARY]


def test_an_account_whose_trust_is_gone_is_refused_by_the_wiki(
        app, dispatched, alice):
    etag = _remembered_poll(alice, dispatched)
    assert _poll(alice, etag).status_code == 304 and dispatched == []
    with app.app_context():
        account = user("alice")
        account.active = False
        db.session.commit()
        alice_id = str(account.id)
    connection(app).delete(live.account_key(app, alice_id))  # as its recheck falls due
    refused = _poll(alice, etag)
    assert refused.status_code == 401 and dispatched == [SUMMARY]


@pytest.mark.parametrize("app_config", [{"PERMANENT_SESSION_LIFETIME": 2}])
def test_a_session_cookie_past_its_lifetime_is_not_answered(
        app, dispatched, alice):
    etag = _remembered_poll(alice, dispatched)
    assert _poll(alice, etag).status_code == 304 and dispatched == []
    time.sleep(3.1)  # Flask now refuses the cookie's signature: a guest
    assert _poll(alice, etag).status_code == 401


def test_an_answer_that_sets_a_cookie_is_not_remembered(app, dispatched, alice):
    etag = alice.get(SUMMARY).headers["ETag"]
    # The session as one signed in before wikinotify gave sessions an id: every answer
    # gives it one (a cookie set), so no answer of it is the same request's again.
    with alice.session_transaction() as session:
        del session["_wikinotify_session"]
    cookie = alice.get_cookie("session").value
    bare = app.test_client(use_cookies=False)
    dispatched.clear()
    for _ in range(2):
        answer = _poll(bare, etag, Cookie=f"session={cookie}")
        assert answer.status_code == 304 and "Set-Cookie" in answer.headers
    assert dispatched == [SUMMARY, SUMMARY]


@pytest.mark.parametrize("app_config", [{"WIKINOTIFY_SUMMARY_SHORTCUT": False}])
def test_switched_off_every_poll_goes_through_flask(app, dispatched, alice):
    etag = alice.get(SUMMARY).headers["ETag"]
    dispatched.clear()
    for _ in range(3):
        assert _poll(alice, etag).status_code == 304
    assert dispatched == [SUMMARY] * 3


def _without_date(response) -> dict[str, str]:
    return {name: value for name, value in response.headers.items() if name != "Date"}


def test_the_same_poll_for_the_kept_body_again_is_the_same_200_without_flask(
        app, dispatched, alice):
    alice.get(SUMMARY)  # the full path reads the database and keeps the body in Redis
    dispatched.clear()
    full = alice.get(SUMMARY)  # the kept body, given by the view
    assert full.status_code == 200 and dispatched == [SUMMARY]
    dispatched.clear()
    again = alice.get(SUMMARY)
    assert again.status_code == 200 and dispatched == []
    assert again.data == full.data and _without_date(again) == _without_date(full)
    # The same request holding the tag: the full path's 304, from the same remembered
    # answer (a 200's headers without those of its body, as werkzeug's 304 has them).
    unchanged = _poll(alice, full.headers["ETag"])
    assert unchanged.status_code == 304 and dispatched == []
    elsewhere = _poll(alice, full.headers["ETag"], **{"X-Forwarded-Host": "localhost"})
    assert elsewhere.status_code == 304 and dispatched == [SUMMARY]  # another request
    assert _without_date(unchanged) == _without_date(elsewhere)


def test_a_poll_holding_an_old_tag_gets_the_body_kept_since_without_flask(
        app, dispatched, alice):
    old = alice.get(SUMMARY)
    alice.get(SUMMARY)  # a 200 of this request remembered
    with app.app_context():
        edit("handbook/onboarding", "carol", "Another edit")
    run_jobs(app)  # her entry coalesces the edit: her version is forgotten
    other = app.test_client()
    login(other, "alice")  # another device, whose poll reads and keeps the new summary
    new = other.get(SUMMARY)
    assert new.get_json()["latestAt"] != old.get_json()["latestAt"]
    dispatched.clear()
    after = _poll(alice, old.headers["ETag"])
    assert after.status_code == 200 and dispatched == []
    assert after.data == new.data and after.headers["ETag"] == new.headers["ETag"]
    assert after.headers["Content-Length"] == str(len(new.data))


def test_a_remembered_304_gives_no_body_before_flask_has_given_one(app, dispatched, alice):
    """A 200's headers are not a 304's: the first body for a request remembered by its 304
    comes from Flask, which then remembers a 200 of it too."""
    etag = _remembered_poll(alice, dispatched)
    for _ in range(2):
        assert alice.get(SUMMARY).status_code == 200
    assert dispatched == [SUMMARY]
    assert _poll(alice, etag).status_code == 304 and dispatched == [SUMMARY]
