"""A page of the inbox API given again from Redis (docs/rules.md#kept-pages): the very
request the full path answered, from the same signed-in session, while neither her
entries nor the wiki changed, with its times said afresh; anything else goes down the
full path, which loads the account and asks the wiki again."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from demo.extensions import notify
from demo.models import Group, PageRule, db, user_groups
from tests.helpers.access import comment_told_to_carol, lock_away_move_and_retitle
from tests.helpers.app import on_sqlite
from tests.helpers.database import statements_sent
from tests.helpers.jobs import run_jobs
from tests.helpers.web import login
from tests.helpers.wiki import edit, main_site, page, user
from wikinotify import models, queue
from wikinotify.blueprint import kept_pages, reader_time
from wikinotify.inbox import live
from wikinotify.instance_settings import set_site_enabled
from wikinotify.queue import connection

LIST = "/_notifications/api/notifications"
ANNOUNCEMENTS = "/_notifications/api/admin/announcements"
# What decides a kept page is Redis's, not the database's: most tests run on SQLite alone
# (on_sqlite); those about the wiki's transaction (an emit, access told or rolled back)
# run on both.


def deny_everyone_the_handbook(permission: str = "read:pages", *, tell: bool = True) -> None:
    """A page rule, committed; told (``notify.access_changed``) unless ``tell`` is False."""
    everyone = db.session.execute(db.select(Group.id).filter_by(name="Everyone")).scalar_one()
    db.session.add(PageRule(group_id=everyone, path_prefix="handbook/",
                            permissions=[permission], deny=True))
    if tell:
        notify.access_changed()
    db.session.commit()


def _asked(app, client, path: str = LIST, **headers: str):
    """``path``'s answer, and how many statements the database was sent for it."""
    with app.app_context():
        engine = db.engine
    with statements_sent(engine) as sent:
        response = client.get(path, headers=headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json(), len(sent)


def _kept(app, client, path: str = LIST, **headers: str) -> dict:
    """The page read afresh, then the same request again: answered from Redis."""
    first, statements = _asked(app, client, path, **headers)
    assert statements > 0
    again, statements = _asked(app, client, path, **headers)
    assert statements == 0 and again == first
    return again


@on_sqlite
def test_the_same_request_again_is_the_same_page_without_the_database(app, alice):
    page_ = _kept(app, alice)
    assert [item["category"] for item in page_["items"]] == ["watchedPage"]
    assert page_["items"][0]["page"]["path"] == "handbook/onboarding"


@on_sqlite
def test_the_same_request_once_more_is_answered_before_flask_and_a_change_is_seen(
        app, dispatched, alice, monkeypatch):
    """Once the view has answered a request from its kept page, the very same request is
    answered before Flask dispatches it (the summary's shortcut,
    docs/operating.md#the-badges-unchanged-polls), by the same rules, its times said now."""
    kept = _kept(app, alice)
    dispatched.clear()
    again, statements = _asked(app, alice)
    assert statements == 0 and dispatched == [] and again == kept
    later = models.utcnow() + timedelta(minutes=5)
    monkeypatch.setattr(reader_time, "utcnow", lambda: later)
    assert _asked(app, alice)[0]["items"][0]["when"]["text"] == "5 min. ago"
    assert dispatched == []
    with app.app_context():
        edit("ops/runbook", "bob", "Another page she watches")
    run_jobs(app)
    fresh, statements = _asked(app, alice)
    assert statements > 0 and dispatched == [LIST] and len(fresh["items"]) == 2


@on_sqlite
def test_its_times_are_said_when_it_is_given_again(app, alice, monkeypatch):
    kept = _kept(app, alice)
    assert kept["items"][0]["when"]["text"] == "just now"
    later = models.utcnow() + timedelta(minutes=5)
    monkeypatch.setattr(reader_time, "utcnow", lambda: later)
    again, statements = _asked(app, alice)
    assert statements == 0
    assert again["items"][0]["when"]["text"] == "5 min. ago"
    assert again["items"][0]["when"]["exact"] == kept["items"][0]["when"]["exact"]
    live.changed(app, [str(_alice_id(app))])  # the full path says the same
    assert _asked(app, alice)[0] == again


@on_sqlite
def test_her_entries_changing_is_seen_by_the_very_next_request(app, alice):
    kept = _kept(app, alice)
    with app.app_context():
        edit("ops/runbook", "bob", "Another page she watches")
    run_jobs(app)
    fresh, statements = _asked(app, alice)
    assert statements > 0 and len(fresh["items"]) == len(kept["items"]) + 1
    assert alice.put(f"{LIST}/read", json={}).status_code == 200
    read, statements = _asked(app, alice)
    assert statements > 0 and all(item["readAt"] for item in read["items"])


def test_any_event_the_wiki_emits_forgets_every_kept_page(app, alice):
    """An event may rename, move or delete a page or a comment: whoever it reaches."""
    _kept(app, alice)
    with app.app_context():
        edit("handbook/onboarding", "bob", "Renamed", title="Onboarding, renamed")
        db.session.commit()
    # Before any worker ran: the emit's own kick forgot the wiki's version.
    renamed, statements = _asked(app, alice)
    assert statements > 0 and renamed["items"][0]["page"]["title"] == "Onboarding, renamed"


def test_access_taken_away_is_seen_once_the_wiki_says_so(app, alice):
    """What the wiki changes without an event (a page rule here) it tells wikinotify of in
    the same transaction (``notify.access_changed``). Told, the very next request is
    the full path's, which no longer shows the page; untold, the kept page is given
    again, which is why kept pages are only for a wiki that tells (off by default)."""
    _kept(app, alice)

    with app.app_context():
        deny_everyone_the_handbook(tell=False)
    untold, statements = _asked(app, alice)
    assert statements == 0 and untold["items"][0]["available"] is True
    with app.app_context():
        deny_everyone_the_handbook("read:comments")
    told, statements = _asked(app, alice)
    assert statements > 0
    assert told["items"][0]["available"] is False and told["items"][0]["url"] is None
    assert told["items"][0]["page"]["path"] is None


def test_a_withdrawn_announcement_she_had_read_goes_from_her_kept_page(app, alice):
    """Withdrawing deletes the unread entries (their readers told) and hides the read ones
    from every list: pages kept with them, anyone's, go."""
    admin = app.test_client()
    login(admin, "admin")
    created = admin.post(ANNOUNCEMENTS, json={"title": "Read-only on Saturday",
                                              "body": "Maintenance.",
                                              "audience": {"everyone": True}})
    assert created.status_code == 201, created.get_json()
    run_jobs(app)
    assert alice.put(f"{LIST}/read", json={}).status_code == 200  # she has read it
    kept = _kept(app, alice)
    assert "announcement" in [item["category"] for item in kept["items"]]
    withdrawn = admin.delete(f"{ANNOUNCEMENTS}/{created.get_json()['id']}", json={})
    assert withdrawn.status_code == 204
    fresh, statements = _asked(app, alice)
    assert statements > 0
    assert "announcement" not in [item["category"] for item in fresh["items"]]


def test_a_version_read_before_the_account_loads_keeps_no_page_of_a_change_meanwhile(
        app, client, monkeypatch):
    """The versions are read before anything the page is made of, the wiki's sign-in load
    included (the demo reads her groups with her account): a change committed after them
    (she leaves Ops, told, between her account's load and her page's read) leaves that
    page kept at a version already forgotten, so the next request reads afresh and no
    longer shows the Ops page."""
    with app.app_context():
        comment_told_to_carol()
        lock_away_move_and_retitle()  # her entry's page is now Ops only
        alice_id = user("alice").id
    login(client, "alice")
    assert _kept(app, client)["items"][0]["available"] is True
    live.changed(app, [str(alice_id)])  # her next request: the full path
    from wikinotify.blueprint import inbox_routes
    checked = inbox_routes._absent_where_switched_off

    def meanwhile(*args) -> None:  # after the account is loaded, before the page is read
        checked(*args)
        with Session(db.engine) as other:  # another request's transaction
            ops = other.scalar(sa.select(Group.id).where(Group.name == "Ops"))
            other.execute(sa.delete(user_groups).where(user_groups.c.user_id == alice_id,
                                                       user_groups.c.group_id == ops))
            other.commit()
        live.wiki_changed(app)  # its access_changed, at its commit

    monkeypatch.setattr(inbox_routes, "_absent_where_switched_off", meanwhile)
    built, statements = _asked(app, client)
    assert statements > 0 and built["items"][0]["available"] is True  # her groups before
    monkeypatch.setattr(inbox_routes, "_absent_where_switched_off", checked)
    after, statements = _asked(app, client)
    assert statements > 0 and after["items"][0]["available"] is False


@on_sqlite
def test_the_wiki_told_is_heard_though_this_processs_redis_breaker_is_open(app, alice):
    """The request path's breaker, which one slow call opens for this process alone, does
    not keep the wiki's change from forgetting the pages kept in every process."""
    _kept(app, alice)
    url = queue.redis_url(app)
    queue._breaker_open_until[url] = time.monotonic() + 60  # a slow call moments ago
    try:
        with app.app_context():
            deny_everyone_the_handbook()
    finally:
        queue._breaker_open_until[url] = 0.0  # later, or another process
    told, statements = _asked(app, alice)
    assert statements > 0 and told["items"][0]["available"] is False


def test_access_changed_in_a_transaction_rolled_back_forgets_nothing(app, alice):
    _kept(app, alice)
    with app.app_context():
        page("handbook/onboarding")
        notify.access_changed()
        db.session.rollback()
    assert _asked(app, alice)[1] == 0


@on_sqlite
def test_another_query_language_or_zone_is_another_page(app, alice):
    _kept(app, alice)
    for path, headers in ((f"{LIST}?unread=true", {}), (LIST, {"Accept-Language": "fr"})):
        assert _asked(app, alice, path, **headers)[1] > 0, (path, headers)
        assert _asked(app, alice, path, **headers)[1] == 0, (path, headers)
    alice.set_cookie("wikinotify_tz", "Asia/Tokyo", domain="localhost")  # the browser's
    assert _asked(app, alice)[1] > 0
    assert _asked(app, alice)[1] == 0
    alice.delete_cookie("wikinotify_tz", domain="localhost")
    assert _asked(app, alice)[1] == 0  # the first is still kept


@on_sqlite
def test_her_chosen_zone_changing_is_seen_by_the_very_next_request(app, alice):
    _kept(app, alice)
    # The page's schedule form (the API's PUT saves her categories too, which tells).
    saved = alice.post("/_notifications/preferences/schedule",
                       data={"cadence": "immediate", "hour": "9", "weekday": "0",
                             "timezone": "Asia/Tokyo"})
    assert saved.status_code == 302, saved.get_data(as_text=True)
    fresh, statements = _asked(app, alice)
    assert statements > 0 and fresh["items"][0]["when"]["exact"].endswith("+0900")


@on_sqlite
def test_an_account_keeps_a_few_pages_and_each_is_given_only_for_its_own_request(
        app, alice):
    """One account cannot fill Redis by asking for pages of every shape: a few slots a
    site; a page of another shape in a slot takes its place, and is never given for the
    page it replaced, which is read afresh."""
    queries = [f"{LIST}?pageId=nowhere-{n}" for n in range(12)]
    for query in queries:
        _asked(app, alice, query)
    with app.app_context():
        pattern = live.page_key(app, str(_alice_id(app)), "*", "*")
    assert 1 <= len(connection(app).keys(pattern)) <= kept_pages.SLOTS
    slots: dict[str, list[str]] = {}
    for query in queries:
        with app.test_request_context(query):
            slots.setdefault(kept_pages.slot(kept_pages._shape()), []).append(query)
    first, *_, last = next(shared for shared in slots.values() if len(shared) > 1)
    assert _asked(app, alice, last)[1] == 0  # the last asked holds the slot
    assert _asked(app, alice, first)[1] > 0  # not the other's page: read afresh
    assert _asked(app, alice, first)[1] == 0
    assert _asked(app, alice, last)[1] > 0


@on_sqlite
def test_a_kept_record_that_cannot_be_read_is_read_afresh(app, alice):
    """A record no release of this code wrote (a half-written one, another format) is a
    miss, never an error."""
    _kept(app, alice)
    redis = connection(app)
    with app.app_context():
        [key] = redis.keys(live.page_key(app, str(_alice_id(app)), "*", "*"))
    version, _, rest = redis.get(key).partition(b"|")
    shape, _, _ = rest.partition(b"|")
    redis.set(key, version + b"|" + shape + b"|not zlib", ex=60)
    fresh, statements = _asked(app, alice)
    assert statements > 0 and fresh["items"]


@on_sqlite
def test_a_redis_that_forgot_the_looks_script_is_sent_it_again(app, alice):
    """The look is one script (the versions made where missing, the page read): a Redis
    restarted since, which no longer has it, is sent it in full."""
    kept = _kept(app, alice)
    connection(app).script_flush()
    assert _asked(app, alice) == (kept, 0)
    live.changed(app, [str(_alice_id(app))])
    connection(app).script_flush()
    assert _asked(app, alice)[1] > 0


@on_sqlite
def test_another_account_never_gets_her_page(app, alice):
    _kept(app, alice)
    bob = app.test_client()
    login(bob, "bob")
    his, statements = _asked(app, bob)
    assert statements > 0 and his["items"] == []


@on_sqlite
def test_an_account_whose_trust_lapsed_goes_down_the_full_path(app, alice):
    _kept(app, alice)
    live.forget_account(app, str(_alice_id(app)))
    assert _asked(app, alice)[1] > 0  # the account loaded again: trusted anew
    assert _asked(app, alice)[1] == 0


@on_sqlite
def test_a_signed_out_session_gets_no_kept_page(app, alice):
    _kept(app, alice)
    assert alice.post("/logout").status_code == 302
    response = alice.get(LIST)
    assert response.status_code == 401


def _the_wikis(app, client) -> tuple[dict, list[str]]:
    """The page read afresh, and which of the wiki's tables its statements read
    (the demo's pages and page rules: the access re-check's questions)."""
    with app.app_context():
        engine = db.engine
    with statements_sent(engine) as sent:
        response = client.get(LIST)
    assert response.status_code == 200, response.get_data(as_text=True)
    asked = sorted({table for table in ("demo_pages", "demo_page_rules")
                    for statement, _ in sent if table in statement})
    return response.get_json(), asked


def test_a_page_read_afresh_at_the_same_wiki_asks_the_wiki_nothing_it_answered(app, alice):
    """Her entries changed (here one read), the wiki did not: the page is read afresh,
    her account loaded and access checked again, from what the wiki answered at its
    version (docs/rules.md#kept-pages); a change the wiki tells of is asked again."""
    first, asked = _the_wikis(app, alice)
    assert asked == ["demo_page_rules", "demo_pages"]
    entry = first["items"][0]["id"]
    assert alice.put(f"{LIST}/{entry}/read", json={}).status_code == 204
    read, asked = _the_wikis(app, alice)
    assert asked == [] and read["items"][0]["readAt"] is not None
    assert read["items"][0]["page"] == first["items"][0]["page"]
    with app.app_context():
        deny_everyone_the_handbook()
    told, asked = _the_wikis(app, alice)
    assert asked == ["demo_page_rules", "demo_pages"]
    assert told["items"][0]["available"] is False and told["items"][0]["url"] is None


def test_the_site_switched_off_is_seen_by_a_page_read_afresh(app, alice):
    """The switch read for a page is kept at everyone's version, which the switch
    forgets: switched off, her very next page is a 404, whatever she read before."""
    _kept(app, alice)
    live.changed(app, [str(_alice_id(app))])  # her entries changed: read afresh
    assert _asked(app, alice)[1] > 0
    with app.app_context():
        site = str(main_site().id)
        set_site_enabled(db.session, site, False)
        db.session.commit()
        live.changed_everyone(app)  # as Admin's save does
    assert alice.get(LIST).status_code == 404
    with app.app_context():
        set_site_enabled(db.session, site, True)
        db.session.commit()
        live.changed_everyone(app)
    assert alice.get(LIST).status_code == 200


@pytest.mark.app_config(WIKINOTIFY_KEPT_PAGES=False)
@on_sqlite
def test_off_every_page_asks_the_wiki(app, alice):
    """A wiki that does not tell of its changes is asked every time."""
    assert _the_wikis(app, alice)[1] == ["demo_page_rules", "demo_pages"]
    assert _the_wikis(app, alice)[1] == ["demo_page_rules", "demo_pages"]


@pytest.mark.app_config(WIKINOTIFY_KEPT_PAGES=False)
@on_sqlite
def test_off_every_request_is_the_full_paths(app, alice):
    first, statements = _asked(app, alice)
    again, statements_again = _asked(app, alice)
    assert statements > 0 and statements_again > 0 and again == first


def _alice_id(app) -> int:
    with app.app_context():
        return user("alice").id
