"""What ``GET /stream`` lets one account and one web process hold open, and when a stream
ends before its maximum age: its session signed out, its account deactivated, its site
switched off. Over real sockets, real Redis and, where a thread matters, a server with a
fixed number of threads, as gunicorn's ``gthread`` worker has."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from demo.models import db
from tests.browser import serving
from tests.conftest import make_app
from tests.pipeline import main_site, user
from tests.sse import WAIT, EventStream, request, session_cookie
from wikinotify import live, stream_places
from wikinotify.blueprint import stream as stream_module
from wikinotify.config import ConfigError
from wikinotify.instance_settings import set_site_enabled

SUMMARY = "/_notifications/api/notifications/summary"
#: The server's threads, and what the tests let streams take of them: the rest is the
#: headroom that keeps ordinary requests answered (README, "Serving many open streams").
THREADS, PER_PROCESS = 16, 12
LIMITS = {"WIKINOTIFY_STREAM_PER_ACCOUNT": 5, "WIKINOTIFY_STREAM_PER_PROCESS": PER_PROCESS}


def _statuses(opened: list[EventStream]) -> Counter[int]:
    return Counter(one.response.status for one in opened)


# -- what one account and one process may hold -------------------------------------------


@pytest.mark.parametrize("app_config", [LIMITS])
def test_one_account_trying_to_hold_hundreds_of_streams_starves_no_one(app, streams):
    with serving(app, THREADS) as url:
        alice, bob = session_cookie(url, "alice"), session_cookie(url, "bob")
        tries = [streams(url, alice, answered=False) for _ in range(200)]
        # Asked after all of alice's: answered only if her streams left threads free.
        started = time.monotonic()
        answer = request(url, "GET", SUMMARY, Cookie=bob)
        assert answer.status == 200 and time.monotonic() - started < WAIT
        assert request(url, "GET", "/_notifications/inbox", Cookie=bob).status == 200
        assert _statuses(tries) == {200: 5, 429: 195}
        refused = next(one.response for one in tries if one.response.status == 429)
        assert int(refused.getheader("Retry-After")) > 0
        error = json.loads(refused.read())["error"]
        assert error["code"] == "too_many_streams" and error["message"]
        assert live.hub(app).streams() == 5


@pytest.mark.parametrize("app_config", [{**LIMITS, "WIKINOTIFY_STREAM_PER_PROCESS": 2}])
def test_a_process_past_its_bound_of_streams_answers_503(app, streams):
    with serving(app, THREADS) as url:
        for name in ("alice", "bob"):
            assert streams(url, session_cookie(url, name)).response.status == 200
        refused = streams(url, session_cookie(url, "carol")).response
        assert refused.status == 503
        assert int(refused.getheader("Retry-After")) > 0
        assert json.loads(refused.read())["error"]["code"] == "unavailable"
        # The badge then polls, and the poll is answered.
        assert request(url, "GET", SUMMARY, Cookie=session_cookie(url, "carol")).status == 200


@pytest.mark.parametrize("app_config", [{"WIKINOTIFY_STREAM_PER_ACCOUNT": 1,
                                         "WIKINOTIFY_STREAM_MAX_AGE": 1}])
def test_a_stream_that_ended_gives_its_place_back(app, live_url, streams):
    cookie = session_cookie(live_url, "alice")
    first = streams(live_url, cookie)
    assert streams(live_url, cookie).response.status == 429
    first.rest()  # its maximum age
    again = streams(live_url, cookie)
    assert again.response.status == 200 and again.next_summary()


@pytest.fixture
def second_process_settings() -> dict[str, str]:
    return {"FLASK_WIKINOTIFY_STREAM_PER_ACCOUNT": "1"}


@pytest.mark.parametrize("app_config", [{"WIKINOTIFY_STREAM_PER_ACCOUNT": 1}])
def test_an_accounts_streams_are_counted_across_web_processes(
        app, live_url, second_web_process, streams):
    here = streams(live_url, session_cookie(live_url, "alice"))
    assert here.response.status == 200 and here.next_summary()
    there = streams(second_web_process, session_cookie(second_web_process, "alice"))
    assert there.response.status == 429
    bob = streams(second_web_process, session_cookie(second_web_process, "bob"))
    assert bob.response.status == 200


def test_a_dead_processs_places_free_themselves_after_their_lease(app):
    """A process that dies never gives its streams' places back: each lapses unless its
    stream renews it."""
    assert stream_places.take(app, "alice", "one", limit=1, lease=1)
    assert not stream_places.take(app, "alice", "two", limit=1, lease=1)
    time.sleep(1.5)
    assert stream_places.take(app, "alice", "two", limit=1, lease=1)


@pytest.mark.parametrize("name", ["WIKINOTIFY_STREAM_PER_ACCOUNT",
                                  "WIKINOTIFY_STREAM_PER_PROCESS"])
@pytest.mark.parametrize("value", [0, -1, "5", 2.5, True])
def test_the_stream_bounds_are_checked_at_start_up(database_url, name, value):
    with pytest.raises(ConfigError, match=name):
        make_app(database_url, **{name: value})


# -- when a stream ends ------------------------------------------------------------------


def test_a_signed_out_sessions_stream_ends_and_another_sessions_goes_on(
        app, live_url, streams):
    signing_out, other_device = (session_cookie(live_url, "alice") for _ in range(2))
    ending, going_on = streams(live_url, signing_out), streams(live_url, other_device)
    ending.next_summary()
    going_on.next_summary()
    assert request(live_url, "POST", "/logout", Cookie=signing_out).status == 302
    started = time.monotonic()
    assert [block for block in ending.rest() if "event: summary" in block] == []
    assert time.monotonic() - started < WAIT
    with app.app_context():
        live.changed(app, [str(user("alice").id)])
    going_on.next_summary()


def _deactivate(app, name: str) -> str:
    with app.app_context():
        account = user(name)
        account.active = False
        db.session.commit()
        return str(account.id)


def test_a_deactivated_accounts_stream_ends_at_its_next_wake(app, live_url, streams):
    alice = streams(live_url, session_cookie(live_url, "alice"))
    alice.next_summary()
    alice_id = _deactivate(app, "alice")
    live.changed(app, [alice_id])  # a fan-out told her of something
    assert [block for block in alice.rest() if "event: summary" in block] == []


def test_a_deactivated_accounts_quiet_stream_ends_at_its_next_check(
        app, live_url, streams, monkeypatch):
    monkeypatch.setattr(stream_module, "KEEPALIVE_SECONDS", 0.5)
    alice = streams(live_url, session_cookie(live_url, "alice"))
    alice.next_summary()
    _deactivate(app, "alice")
    assert [block for block in alice.rest() if "event: summary" in block] == []


def test_a_switched_off_sites_stream_says_so_and_ends(app, live_url, streams):
    cookie = session_cookie(live_url, "alice")
    alice = streams(live_url, cookie)
    alice.next_summary()
    with app.app_context():
        set_site_enabled(db.session, str(main_site().id), False)
        db.session.commit()
    live.changed_everyone(app)
    assert alice.next_summary()[1]["enabled"] is False
    assert alice.rest() == []
    assert streams(live_url, cookie).response.status == 404
