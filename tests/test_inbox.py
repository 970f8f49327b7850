"""The inbox API and page (docs/rules.md#the-inbox-api, docs/rules.md#the-inbox-page), with entries
made by a real worker from the demo wiki's own actions."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa
from flask import render_template_string

from demo import wiki
from demo.extensions import notify
from demo.models import Site, db
from tests.helpers.database import statements_sent
from tests.helpers.jobs import run_jobs
from tests.helpers.web import login
from tests.helpers.wiki import edit, entries_for, main_site, many_watched_edits, page, user, watch
from wikinotify.inbox import live
from wikinotify.instance_settings import set_site_enabled
from wikinotify.models import Notification

PREFERENCES = "/_notifications/api/preferences"
API = "/_notifications/api/notifications"
INBOX = "/_notifications/inbox"


pytestmark = pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True)


@pytest.fixture
def twelve_edits(app):
    """Alice watches Onboarding (seed); Bob saves it twelve times."""
    with app.app_context():
        for n in range(12):
            edit("handbook/onboarding", "bob", f"Edit {n}")
    run_jobs(app)


def test_a_guest_gets_401_json_everywhere(client):
    for method, url in [("get", API), ("get", f"{API}/summary"), ("put", f"{API}/1/read"),
                        ("put", f"{API}/read"), ("delete", f"{API}/1")]:
        response = getattr(client, method)(url)
        assert response.status_code == 401, url
        assert response.get_json()["error"]["code"] == "unauthorized"


def test_the_list_says_edited_twelve_times_last_by_bob(app, twelve_edits, as_alice):
    body = as_alice.get(API).get_json()
    [item] = body["items"]
    assert body["nextCursor"] is None
    assert item["text"] == "Onboarding was edited 12 times, last by Bob Builder"
    assert (item["category"], item["variant"], item["variants"], item["count"]) == (
        "watchedPage", "edited", ["edited"], 12)
    assert item["actor"]["name"] == "Bob Builder"
    assert item["page"]["path"] == "handbook/onboarding"
    assert item["url"] == "/pages/handbook/onboarding"
    assert item["readAt"] is None and item["excerpt"] is None
    assert item["available"] is True
    assert set(item) == {"id", "category", "variant", "variants", "count", "text", "readAt",
                         "createdAt", "updatedAt", "actor", "page", "url", "excerpt",
                         "available", "when", "body", "pinned"}
    assert item["body"] is None and item["pinned"] is False


def test_the_list_pages_by_keyset_thirty_at_a_time(app, as_alice):
    with app.app_context():
        many_watched_edits(35)
    run_jobs(app)
    first = as_alice.get(API).get_json()
    assert len(first["items"]) == 30 and first["nextCursor"]
    second = as_alice.get(API, query_string={"cursor": first["nextCursor"]}).get_json()
    assert len(second["items"]) == 5 and second["nextCursor"] is None
    ids = [i["id"] for i in first["items"] + second["items"]]
    assert len(set(ids)) == 35
    stamps = [i["updatedAt"] for i in first["items"] + second["items"]]
    assert stamps == sorted(stamps, reverse=True)
    bad = as_alice.get(API, query_string={"cursor": "not-a-cursor"})
    assert bad.status_code == 400 and "cursor" in bad.get_json()["error"]["fields"]


def test_unread_filter_and_mark_one_read(app, twelve_edits, as_alice):
    [item] = as_alice.get(API).get_json()["items"]
    assert as_alice.put(f"{API}/{item['id']}/read", json={}).status_code == 204
    assert as_alice.get(API, query_string={"unread": "1"}).get_json()["items"] == []
    [again] = as_alice.get(API).get_json()["items"]
    assert again["readAt"] is not None


def test_someone_elses_entry_answers_exactly_like_a_missing_one(app, twelve_edits, client):
    with app.app_context():
        [entry] = entries_for("alice")
    login(client, "carol")
    pairs = [
        (client.put(f"{API}/{entry.id}/read", json={}), client.put(f"{API}/999999/read", json={})),
        (client.delete(f"{API}/{entry.id}", json={}), client.delete(f"{API}/999999", json={})),
    ]
    for theirs, missing in pairs:
        assert theirs.status_code == missing.status_code == 404
        assert theirs.get_json() == missing.get_json()
    assert client.put(f"{API}/abc/read", json={}).status_code == 404
    with app.app_context():
        [untouched] = entries_for("alice")
        assert untouched.read_at is None


def test_summary_counts_unread_with_an_etag_and_a_304(app, twelve_edits, as_alice):
    response = as_alice.get(f"{API}/summary")
    assert response.get_json() == {
        "unread": 1, "unreadLabel": "1", "unseen": 1, "unseenLabel": "1", "enabled": True,
        "latestAt": response.get_json()["latestAt"],
    }
    assert response.headers["Cache-Control"] == "private, no-cache"
    etag = response.headers["ETag"]
    unchanged = as_alice.get(f"{API}/summary", headers={"If-None-Match": etag})
    assert unchanged.status_code == 304
    as_alice.put(f"{API}/read", json={})
    changed = as_alice.get(f"{API}/summary", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.get_json()["unread"] == 0


def test_the_etag_includes_the_user(app, twelve_edits, client):
    with app.app_context():
        watch("handbook/onboarding", "carol")
        edit("handbook/onboarding", "bob", "For both")
    run_jobs(app)
    login(client, "alice")
    alice_tag = client.get(f"{API}/summary").headers["ETag"]
    client.post("/logout")
    login(client, "carol")
    assert client.get(f"{API}/summary", headers={"If-None-Match": alice_tag}).status_code == 200


def test_the_badge_caps_at_ninety_nine_plus(app, as_alice):
    with app.app_context():
        alice = str(user("alice").id)
        db.session.execute(sa.insert(Notification), [
            {"user_id": alice, "site_id": None, "category": "watchedPage", "variant": "edited",
             "variants": ",edited,", "group_key": f"k{n}", "data": {}, "count": 1,
             "last_event_id": n, "in_app": True}
            for n in range(130)
        ])
        db.session.commit()
    body = as_alice.get(f"{API}/summary").get_json()
    assert (body["unread"], body["unreadLabel"]) == (100, "99+")


def test_mark_all_or_one_pages_entries_read_and_dismiss(app, as_alice):
    with app.app_context():
        watch("home", "alice")
        edit("home", "bob", "Home edit")
        edit("handbook/onboarding", "bob", "Onboarding edit")
        home_id = str(page("home").id)
    run_jobs(app)
    response = as_alice.put(f"{API}/read", json={"pageId": home_id})
    assert response.get_json()["marked"] == 1
    unread = as_alice.get(API, query_string={"unread": "1"}).get_json()["items"]
    assert [i["page"]["path"] for i in unread] == ["handbook/onboarding"]
    assert as_alice.put(f"{API}/read", json={}).get_json()["marked"] == 1
    bad = as_alice.put(f"{API}/read", json={"pageId": 5, "other": 1})
    assert bad.status_code == 400
    for item in as_alice.get(API).get_json()["items"]:
        assert as_alice.delete(f"{API}/{item['id']}", json={}).status_code == 200
    assert as_alice.get(API).get_json()["items"] == []


def test_reading_an_entry_cancels_its_pending_mail(app, twelve_edits, as_alice):
    [item] = as_alice.get(API).get_json()["items"]
    as_alice.put(f"{API}/{item['id']}/read", json={})
    with app.app_context():
        [entry] = entries_for("alice")
        assert entry.email_state == "skipped"


def test_the_link_follows_a_move_and_falls_back_to_the_snapshot(app, twelve_edits, as_alice):
    with app.app_context():
        wiki.move_page(page("handbook/onboarding"), user("carol"), "handbook/welcome")
    run_jobs(app)  # before the delete: a later fan-out finds no watchers left to tell
    [item] = as_alice.get(API).get_json()["items"]
    assert item["url"] == "/pages/handbook/welcome"
    with app.app_context():
        wiki.delete_page(page("handbook/welcome"), user("admin"))
    run_jobs(app)
    [item] = as_alice.get(API).get_json()["items"]
    assert item["variants"] == ["edited", "moved", "deleted"]
    assert item["url"] == "/pages/handbook/welcome"  # from the snapshot: the page is gone
    assert "edited 12 times, moved and deleted" in item["text"]


def test_an_excerpt_is_shown_only_while_its_comment_exists(app, as_alice):
    with app.app_context():
        comment = wiki.add_comment(page("handbook/onboarding"), user("bob"), "Buy <b>laptops</b>")
        comment_id = comment.id
    run_jobs(app)
    [item] = as_alice.get(API).get_json()["items"]
    assert item["excerpt"] == "Buy <b>laptops</b>"
    assert item["text"] == "Bob Builder commented on Onboarding"
    assert item["url"] == f"/pages/handbook/onboarding/comments#comment-{comment_id}"
    with app.app_context():
        wiki.delete_comment(db.session.merge(comment), user("bob"))
    [item] = as_alice.get(API).get_json()["items"]
    assert item["excerpt"] is None


def test_the_inbox_page_groups_by_day_and_works_without_javascript(app, twelve_edits, as_alice):
    html = as_alice.get(INBOX).get_data(as_text=True)
    assert "Onboarding was edited 12 times, last by Bob Builder" in html
    assert 'class="wn-day"' in html and "wn-unread" in html
    entry_id = re.search(r'data-id="(\d+)"', html).group(1)
    response = as_alice.post(f"{INBOX}/{entry_id}/read", data={"next": INBOX})
    assert response.status_code == 302 and response.headers["Location"] == INBOX
    assert "wn-unread" not in as_alice.get(INBOX).get_data(as_text=True)
    for elsewhere in ("https://evil.example/", f"{INBOX}?\r\nSet-Cookie: a=b",
                      f"{INBOX}?page=\t/evil", "/_notifications/inboxes"):
        response = as_alice.post(f"{INBOX}/{entry_id}/read", data={"next": elsewhere})
        assert (response.status_code, response.headers["Location"]) == (302, INBOX)
    as_alice.post(f"{INBOX}/{entry_id}/dismiss")
    assert "Nothing here yet" in as_alice.get(INBOX).get_data(as_text=True)


def test_the_inbox_page_speaks_french(app, twelve_edits, as_alice):
    html = as_alice.get(INBOX, headers={"Accept-Language": "fr"}).get_data(as_text=True)
    assert ("La page «\u202fOnboarding\u202f» a été modifiée 12 fois, "
            "en dernier par Bob Builder") in html
    assert "Boîte de réception" in html
    assert '<nav class="wn-filters" aria-label="Filtres de la boîte de réception">' in html


def test_a_site_with_notifications_off_hides_the_badge_and_keeps_entries(app, twelve_edits,
                                                                        as_alice):
    assert 'class="wn-badge"' in as_alice.get("/").get_data(as_text=True)
    with app.app_context():
        set_site_enabled(db.session, str(main_site().id), False)
        db.session.commit()
        live.changed_everyone(app)  # as Admin's save does
    assert 'class="wn-badge"' not in as_alice.get("/").get_data(as_text=True)
    summary = as_alice.get(f"{API}/summary").get_json()
    assert (summary["enabled"], summary["unread"]) == (False, 0)
    with app.app_context():
        set_site_enabled(db.session, str(main_site().id), True)
        db.session.commit()
        live.changed_everyone(app)  # as Admin's save does
    assert as_alice.get(f"{API}/summary").get_json()["unread"] == 1


def test_a_site_with_notifications_off_has_no_inbox_until_switched_on(app, twelve_edits,
                                                                      as_alice):
    """docs/rules.md#the-site-switch: the page, its list fragment and the list API answer 404 as an
    unknown route does, the demo's header drops its link, and nothing is lost."""
    assert 'href="/_notifications/inbox">Inbox<' in as_alice.get("/").get_data(as_text=True)
    categories = {c["key"]: {"inApp": c["inApp"], "email": c["email"]}
                  for c in as_alice.get(PREFERENCES).get_json()["categories"]}
    categories["mention"]["email"] = False
    chosen = {"categories": categories,
              "emailSchedule": {"cadence": "daily", "hour": 8, "timezone": "Europe/Paris"}}
    assert as_alice.put(PREFERENCES, json=chosen).status_code == 200
    before = as_alice.get(PREFERENCES).get_json()
    with app.app_context():
        set_site_enabled(db.session, str(main_site().id), False)
        db.session.commit()
        live.changed_everyone(app)  # as Admin's save does
    listed = as_alice.get(API)
    assert (listed.status_code, listed.get_json()["error"]["code"]) == (404, "not_found")
    assert as_alice.get(INBOX).status_code == 404
    assert as_alice.get(f"{INBOX}/entries").status_code == 404
    assert ">Inbox<" not in as_alice.get("/").get_data(as_text=True)
    with app.app_context():
        assert notify.enabled_for(main_site().id) is False
        set_site_enabled(db.session, str(main_site().id), True)
        db.session.commit()
        live.changed_everyone(app)  # as Admin's save does
        assert notify.enabled_for(main_site().id) is True
    [item] = as_alice.get(API).get_json()["items"]
    assert item["count"] == 12 and item["readAt"] is None
    assert "edited 12 times" in as_alice.get(INBOX).get_data(as_text=True)
    assert 'href="/_notifications/inbox">Inbox<' in as_alice.get("/").get_data(as_text=True)
    # Her preferences and digest schedule were kept through it, too.
    assert as_alice.get(PREFERENCES).get_json() == before
    assert before["emailSchedule"]["cadence"] == "daily"


def test_a_host_template_asks_whether_notifications_are_on_here(app):
    template = "{% if wikinotify_enabled() %}You will be notified.{% endif %}"
    with app.test_request_context("/"):
        assert render_template_string(template) == "You will be notified."
        set_site_enabled(db.session, str(main_site().id), False)
        db.session.commit()
        live.changed_everyone(app)  # as Admin's save does
        assert render_template_string(template) == ""


def test_opening_the_page_and_its_discussion_marks_their_entries_read(app, as_alice):
    with app.app_context():
        edit("handbook/onboarding", "bob", "An edit")
        wiki.add_comment(page("handbook/onboarding"), user("bob"), "A comment")
    run_jobs(app)

    def unread():
        with app.app_context():
            return sorted(e.category for e in entries_for("alice", read_at=None))

    assert unread() == ["watchedPage", "watchedPageComment"]
    as_alice.get("/pages/handbook/onboarding")
    assert unread() == ["watchedPageComment"]
    as_alice.get("/pages/handbook/onboarding/comments")
    assert unread() == []


def test_a_page_view_with_nothing_unread_writes_nothing(app, as_alice):
    with app.app_context():
        engine = db.engine
    with statements_sent(engine) as seen:
        assert as_alice.get("/pages/handbook/onboarding").status_code == 200
    statements = [statement.split()[0].upper() for statement, _ in seen]
    assert statements and set(statements) <= {"SELECT"}


def _statements_of_a_request(app, client, path):
    with app.app_context():
        engine = db.engine
    with statements_sent(engine) as seen:
        assert client.get(path).status_code == 200
    return engine, seen


def test_a_page_of_the_inbox_asks_the_wiki_for_its_reader_once(app, twelve_edits, as_alice):
    """The access re-check and her zone's times read the same facts of hers: one call
    (docs/benchmarks.md#the-inbox-at-scale), which the demo wiki answers from its own
    sign-in load of the request (her groups read with her account): one statement."""
    _, seen = _statements_of_a_request(app, as_alice, API)
    accounts = [s for s, _ in seen if re.search(r"\bFROM demo_users\b", s)]
    assert len(accounts) == 1, accounts


@pytest.mark.parametrize("host", ["localhost", "docs.localhost", "127.0.0.1"])
def test_a_request_finds_its_site_in_one_statement(app, host):
    """Every signed-in request pays for its site (docs/benchmarks.md#the-inbox-at-scale):
    the one its host names, else the default, is one round trip, also on a host no site
    names (an address, as the benchmark's server is reached)."""
    with app.app_context():
        engine = db.engine
        names = dict(db.session.execute(sa.select(Site.hostname, Site.id)).all())
        default = db.session.scalar(sa.select(Site.id).where(Site.is_default.is_(True)))
    seen = []

    def record(conn, cursor, statement, *args):
        seen.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        with app.test_request_context(base_url=f"http://{host}:5000/"):
            assert wiki.current_site().id == names.get(host, default)
            db.session.remove()
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    sites = [s for s in seen if re.search(r"\bFROM demo_sites\b", s)]
    assert len(sites) == 1, sites


# A kept page is looked for before the account loads, by its site: a process that has not
# found the host name's site in the last few seconds reads it apart (docs/rules.md#kept-pages).
@pytest.mark.app_config(WIKINOTIFY_KEPT_PAGES=False)
def test_a_signed_in_request_reads_its_account_and_its_site_in_one_statement(
        app, twelve_edits, as_alice):
    """The floor of every signed-in request (docs/benchmarks.md#the-inbox-at-scale): the
    demo wiki's sign-in load reads the request's site beside the account."""
    _, seen = _statements_of_a_request(app, as_alice, API)
    sites = [s for s, _ in seen if re.search(r"\bdemo_sites\b", s)]
    assert len(sites) == 1, sites
    assert re.search(r"\bFROM demo_users\b", sites[0]), sites


def _plan_without(engine, statement, parameters, *indexes):
    """``EXPLAIN`` of ``statement`` with ``indexes`` dropped (rolled back) and no scan of the
    table: the tables are tiny here, and the planner's choice among indexes a guess, so
    this shows what the unread index alone can serve, as the statement is written (its
    predicate proven)."""
    with engine.connect() as conn:
        conn.exec_driver_sql("SET enable_seqscan = off")
        for index in indexes:
            conn.exec_driver_sql(f"DROP INDEX {index}")
        plan = "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + statement,
                                                                  parameters))
        conn.rollback()
    return plan


INBOX_INDEX = "ix_wikinotify_notifications_inbox"
SLOT_INDEX = "uq_wikinotify_notifications_unread_group"
UNREAD_INDEX = "ix_wikinotify_notifications_unread"


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_the_pinned_entries_and_a_page_views_check_are_ranges_of_the_unread_index(
        app, twelve_edits, as_alice):
    """The list's pinned entries (unread announcements) and a page view's "anything unread
    here?" each name the user and the categories: the unread index leads with those, so
    each is a short range of it, not a read of every unread entry of hers
    (docs/benchmarks.md#the-inbox-at-scale: 100,000 table pages each, before, for a reader
    with 100,000 unread)."""
    engine, seen = _statements_of_a_request(app, as_alice, API)
    entries = [(s, p) for s, p in seen if "FROM wikinotify_notifications" in s]
    assert len(entries) == 1  # the pinned entries and the page, in one statement
    pinned = _plan_without(engine, *entries[0], INBOX_INDEX, SLOT_INDEX)
    assert f"using {UNREAD_INDEX}" in pinned, pinned
    assert re.search(r"Index Cond: .*user_id.*category", pinned), pinned

    _, seen = _statements_of_a_request(app, as_alice, "/pages/handbook/onboarding")
    check = [(s, p) for s, p in seen if "FROM wikinotify_notifications" in s][0]
    viewed = _plan_without(engine, *check, INBOX_INDEX, SLOT_INDEX)
    assert f"using {UNREAD_INDEX}" in viewed, viewed
    assert re.search(r"Index Cond: .*user_id.*page_id", viewed), viewed
    with engine.connect() as conn:
        definition = conn.exec_driver_sql(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            f"AND indexname = '{UNREAD_INDEX}'").scalar_one()
    assert "(user_id, category, page_id, site_id, in_app)" in definition, definition
