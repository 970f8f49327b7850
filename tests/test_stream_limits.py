"""What ``GET /stream`` lets one account and one web process hold open, and when a stream
ends before its maximum age: its session signed out, its account deactivated, its site
switched off. Over real sockets, real Redis and, where a thread matters, a server with a
fixed number of threads, as gunicorn's ``gthread`` worker has."""

from __future__ import annotations

import json
import time
from collections import Counter

import flask
import flask_login
import pytest

from demo.models import db
from tests.helpers.app import make_app
from tests.helpers.browser import serving
from tests.helpers.sse import STREAM, WAIT, EventStream, request, session_cookie
from tests.helpers.wiki import main_site, user
from wikinotify import WikiNotify, login
from wikinotify.blueprint import stream_life
from wikinotify.config import ConfigError
from wikinotify.inbox import live, stream_places
from wikinotify.instance_settings import set_site_enabled
from wikinotify.queue import connection

SUMMARY = "/_notifications/api/notifications/summary"
#: The server's threads, and what the tests let streams take of them: the rest is the
#: headroom that keeps ordinary requests answered (docs/operating.md#serving-many-open-streams).
THREADS, PER_PROCESS = 16, 12
LIMITS = {"WIKINOTIFY_STREAM_PER_ACCOUNT": 5, "WIKINOTIFY_STREAM_PER_PROCESS": PER_PROCESS}


def _statuses(opened: list[EventStream]) -> Counter[int]:
    return Counter(one.response.status for one in opened)


# -- what one account and one process may hold -------------------------------------------


def _places(app, name: str) -> int:
    """How many stream places the account holds in Redis."""
    with app.app_context():
        key = stream_places.places_key(app, str(user(name).id))
    return connection(app).zcard(key)


def _ended(stream: EventStream) -> bool:
    """Whether the stream ends without another summary (a read past WAIT raises)."""
    return [block for block in stream.rest() if "event: summary" in block] == []


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
        # Each new stream ended an older one: she never holds more than her five.
        assert set(_statuses(tries)) <= {200, 503}
        assert _places(app, "alice") <= 5
        first = next(one for one in tries[:100] if one.response.status == 200)
        assert "event: end" in "".join(first.rest())  # ended by a later one
        deadline = time.monotonic() + WAIT
        while live.hub(app).streams() > 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert live.hub(app).streams() <= 5


@pytest.mark.parametrize("app_config", [LIMITS])
def test_going_from_page_to_page_past_the_bound_is_never_refused(app, live_url):
    """A page left closes its stream, which the server notices only at its next write:
    the next page's stream must not wait for that."""
    cookie = session_cookie(live_url, "alice")
    statuses = []
    for _ in range(LIMITS["WIKINOTIFY_STREAM_PER_ACCOUNT"] + 1):
        page = EventStream(live_url, cookie)
        statuses.append(page.response.status)
        page.next_summary()
        page.close()
    assert statuses == [200] * (LIMITS["WIKINOTIFY_STREAM_PER_ACCOUNT"] + 1)
    assert _places(app, "alice") <= LIMITS["WIKINOTIFY_STREAM_PER_ACCOUNT"]


@pytest.mark.parametrize("app_config", [{"WIKINOTIFY_STREAM_PER_PROCESS": 3}])
def test_a_head_of_the_stream_takes_no_place(app, live_url):
    cookie = session_cookie(live_url, "alice")
    for _ in range(5):
        answer = request(live_url, "HEAD", STREAM, Cookie=cookie)
        assert answer.status in (200, 405) and answer.body == b""
    assert live.hub(app).streams() == 0 and _places(app, "alice") == 0
    bob = EventStream(live_url, session_cookie(live_url, "bob"))
    assert bob.response.status == 200 and bob.next_summary()
    bob.close()


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


@pytest.mark.parametrize("app_config", [{"WIKINOTIFY_STREAM_PER_ACCOUNT": 1}])
def test_a_stream_past_the_accounts_bound_ends_its_oldest(app, live_url, streams):
    cookie = session_cookie(live_url, "alice")
    first = streams(live_url, cookie)
    first.next_summary()
    again = streams(live_url, cookie)
    assert again.response.status == 200 and again.next_summary()
    assert _ended(first)
    assert any("event: end" in block for block in first.blocks)  # the badge polls
    assert _places(app, "alice") == 1


@pytest.mark.parametrize("app_config", [{"WIKINOTIFY_STREAM_PER_ACCOUNT": 1}])
def test_a_process_ends_an_accounts_oldest_stream_even_when_its_place_lapsed(
        app, live_url, streams):
    """A stream whose place lapsed in Redis (a stalled renewal) still counts here."""
    cookie = session_cookie(live_url, "alice")
    first = streams(live_url, cookie)
    first.next_summary()
    with app.app_context():
        connection(app).delete(stream_places.places_key(app, str(user("alice").id)))
    again = streams(live_url, cookie)
    assert again.response.status == 200 and again.next_summary()
    assert _ended(first)


@pytest.mark.parametrize("app_config", [{"WIKINOTIFY_STREAM_PER_ACCOUNT": 1}])
def test_the_hub_renews_its_streams_places_whatever_their_threads_do(
        app, live_url, streams, monkeypatch):
    monkeypatch.setattr(stream_places, "RENEW_SECONDS", 0.2, raising=False)
    alice = streams(live_url, session_cookie(live_url, "alice"))
    alice.next_summary()
    with app.app_context():
        key = stream_places.places_key(app, str(user("alice").id))
    place = connection(app).zrange(key, 0, -1)[0].decode()
    with app.app_context():  # as if it had been renewed long ago: it lapses in 1 s
        stream_places.take(app, str(user("alice").id), place, limit=0, lease=1)
    time.sleep(2)
    assert _places(app, "alice") == 1


@pytest.fixture
def second_process_settings() -> dict[str, str]:
    return {"FLASK_WIKINOTIFY_STREAM_PER_ACCOUNT": "1"}


@pytest.mark.parametrize("app_config", [{"WIKINOTIFY_STREAM_PER_ACCOUNT": 1}])
def test_an_accounts_streams_are_counted_across_web_processes(
        app, live_url, second_web_process, streams):
    here = streams(live_url, session_cookie(live_url, "alice"))
    assert here.response.status == 200 and here.next_summary()
    there = streams(second_web_process, session_cookie(second_web_process, "alice"))
    assert there.response.status == 200 and there.next_summary()
    assert _ended(here)
    bob = streams(second_web_process, session_cookie(second_web_process, "bob"))
    assert bob.response.status == 200


def test_a_dead_processs_places_free_themselves_after_their_lease(app):
    """A process that dies never gives its streams' places back: each lapses unless its
    stream renews it, and a lapsed one is dropped, not ended."""
    stream_places.take(app, "alice", "one", limit=1, lease=1)
    time.sleep(1.5)
    assert stream_places.take(app, "alice", "two", limit=1, lease=1) is None
    assert connection(app).zrange(stream_places.places_key(app, "alice"), 0, -1) == [b"two"]


@pytest.mark.parametrize("name", ["WIKINOTIFY_STREAM_PER_ACCOUNT",
                                  "WIKINOTIFY_STREAM_PER_PROCESS"])
@pytest.mark.parametrize("value", [0, -1, "5", 2.5, True])
def test_the_stream_bounds_are_checked_at_start_up(database_url, name, value):
    with pytest.raises(ConfigError, match=name):
        make_app(database_url, **{name: value})


# -- when a stream ends ------------------------------------------------------------------


def _log_out(app, live_url: str, cookie: str) -> None:
    """Through the wiki's sign-out route (``logout_user``)."""
    assert request(live_url, "POST", "/logout", Cookie=cookie).status == 302


def _signing_out_then_log_out(app, live_url: str, cookie: str) -> None:
    """A wiki that calls ``signing_out()`` and then ``logout_user`` all the same."""
    with app.test_request_context(headers={"Cookie": cookie}):
        assert flask_login.current_user.is_authenticated
        WikiNotify.signing_out()
        flask_login.logout_user()


@pytest.mark.parametrize("sign_out", [_log_out, _signing_out_then_log_out])
def test_a_signed_out_sessions_stream_ends_and_another_sessions_goes_on(
        app, live_url, streams, sign_out):
    signing_out, other_device = (session_cookie(live_url, "alice") for _ in range(2))
    ending, going_on = streams(live_url, signing_out), streams(live_url, other_device)
    ending.next_summary()
    going_on.next_summary()
    sign_out(app, live_url, signing_out)
    started = time.monotonic()
    assert _ended(ending)
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
    monkeypatch.setattr(stream_life, "KEEPALIVE_SECONDS", 0.5)
    monkeypatch.setattr(stream_life, "CHECK_GRID_SECONDS", 0.05)
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


def _without_session_id(app, cookie: str) -> str:
    """The same signed-in session as one signed in before wikinotify gave ids, or
    restored by a remember-me cookie: no stream session id in it."""
    serializer = app.session_interface.get_signing_serializer(app)
    name, value = cookie.split("=", 1)
    data = serializer.loads(value)
    data.pop(login.SESSION_ID_KEY, None)
    return f"{name}={serializer.dumps(data)}"


def test_two_tabs_of_a_session_without_an_id_both_end_when_it_signs_out(
        app, live_url, streams):
    old = _without_session_id(app, session_cookie(live_url, "alice"))
    tabs = [streams(live_url, old, answered=False) for _ in range(2)]
    for tab in tabs:
        tab.next_summary()
    given = [tab.response.getheader("Set-Cookie") for tab in tabs]
    # The browser keeps the last cookie it was given, and signs out with it.
    kept = next((found.split(";", 1)[0] for found in reversed(given) if found), old)
    assert request(live_url, "POST", "/logout", Cookie=kept).status == 302
    assert all(_ended(tab) for tab in tabs)


def test_an_ordinary_request_gives_a_session_without_an_id_its_id(app, live_url, streams):
    old = _without_session_id(app, session_cookie(live_url, "alice"))
    answer = request(live_url, "GET", SUMMARY, Cookie=old)
    cookie = answer.getheader("Set-Cookie").split(";", 1)[0]
    assert login.SESSION_ID_KEY in app.session_interface.get_signing_serializer(app).loads(
        cookie.split("=", 1)[1])
    signing_out, other_device = streams(live_url, cookie), streams(
        live_url, session_cookie(live_url, "alice"))
    signing_out.next_summary()
    other_device.next_summary()
    assert request(live_url, "POST", "/logout", Cookie=cookie).status == 302
    assert _ended(signing_out)
    with app.app_context():
        live.changed(app, [str(user("alice").id)])
    other_device.next_summary()


def test_a_session_restored_by_a_remember_me_cookie_gets_its_id(app):
    """Flask-Login sends no ``user_logged_in`` for a remember-me cookie, only this."""
    with app.test_request_context():
        flask_login.user_loaded_from_cookie.send(app, user=user("alice"))
        assert isinstance(flask.session.get(login.SESSION_ID_KEY), str)
