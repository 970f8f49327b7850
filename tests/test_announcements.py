"""Announcements end to end (docs/rules.md#announcements): an administrator's word to
everyone on a site or to some of its groups, published through the API and the admin page,
fanned out by a real RQ worker on the real Redis, mailed through a real SMTP server; on SQLite
and on PostgreSQL. The author is not told, nor is whoever cannot read the site."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from demo.models import Group, PageRule, User, db
from tests.helpers.database import statements_sent
from tests.helpers.jobs import deliver, run_jobs
from tests.helpers.mail import bodies
from tests.helpers.web import login
from tests.helpers.wiki import (
    add_users,
    edit,
    entries_for,
    events,
    main_site,
    many_watched_edits,
    user,
)
from wikinotify import announcements
from wikinotify.categories import announcement
from wikinotify.categories.base import EntryView
from wikinotify.instance_settings import set_site_enabled
from wikinotify.models import EmailState, Event, Notification, utcnow
from wikinotify.preferences import effective

API = "/_notifications/api/admin/announcements"
LIST = "/_notifications/api/notifications"
SUMMARY = f"{LIST}/summary"
PAGE = "/_notifications/admin/announcements"
BODY = "Saturday 9:00–12:00, see https://status.example.org/maintenance. <b>No</b> edits."

pytestmark = [
    pytest.mark.app_config(smtp=True),
    # Mail is due at once: each test runs the mail when it wants it.
    pytest.mark.mail_delay(0),
]


def group_id(name: str) -> str:
    return str(db.session.scalar(sa.select(Group.id).where(Group.name == name)))


def outsider() -> str:
    """eve: an active, verified account in no group, who cannot read the site."""
    eve = User(username="eve", email="eve@example.com", display_name="Eve", password_hash="!",
               verified=True, active=True, is_system=False, is_admin=False)
    db.session.add(eve)
    db.session.commit()
    return str(eve.id)


def publish(client, *, who: str = "admin", **body):
    login(client, who)
    response = client.post(API, json={"title": "Read-only on Saturday", "body": BODY,
                                      "audience": {"everyone": True}, **body})
    client.post("/logout")
    return response


#: An entry's email state that is no mail: none asked for, or cancelled.
NO_MAIL = (EmailState.NONE, EmailState.SKIPPED)


def told() -> dict[str, list[str]]:
    """Each reader's announcement entries: their channels, in-app and/or a mail."""
    db.session.expire_all()
    found: dict[str, list[str]] = {}
    rows = db.session.execute(
        sa.select(User.username, Notification.in_app, Notification.email_state)
        .join(User, sa.cast(User.id, sa.String) == Notification.user_id)
        .where(Notification.category == announcement.KEY))
    for name, in_app, mail in rows:
        found[name] = [c for c, on in (("inApp", in_app),
                                                 ("email", mail not in NO_MAIL))
                       if on]
    return found


# -- who is told ------------------------------------------------------------------------------


def test_everyone_is_told_but_its_author_and_who_cannot_read_the_site(ctx, client, smtp):
    outsider()
    carol = user("carol")
    carol.locale = "fr"
    db.session.commit()

    response = publish(client)
    assert response.status_code == 201, response.get_json()
    body = response.get_json()
    assert (body["title"], body["audience"], body["important"], body["state"]) == (
        "Read-only on Saturday", {"everyone": True}, False, "waiting")
    run_jobs(ctx)
    deliver(ctx)

    mailed = {"alice", "bob", "carol"}
    # dave's address is unverified: in-app only. Not admin, its author; not eve.
    assert told() == {**{name: ["inApp", "email"] for name in mailed}, "dave": ["inApp"]}
    by_address = {m["To"].split("@")[0]: m for m in smtp.inbox.messages}
    assert sorted(by_address) == sorted(mailed)
    assert len(smtp.inbox.messages) == 3  # one mail each
    assert by_address["bob"]["Subject"] == "[Main wiki] Announcement: Read-only on Saturday"
    assert by_address["carol"]["Subject"] == "[Main wiki] Annonce\u202f: Read-only on Saturday"
    text, html = bodies(by_address["bob"])
    assert BODY in text  # plain text as written
    assert ('<a href="https://status.example.org/maintenance" rel="nofollow noopener">'
            in html)  # the address a link, the sentence's full stop outside it
    assert "&lt;b&gt;No&lt;/b&gt;" in html and "<b>No</b>" not in html
    [event] = events()
    assert (event.kind, event.processed_at is not None) == (announcement.KIND, True)


def test_a_group_announcement_tells_its_members_only(ctx, client, smtp):
    ops = db.session.scalar(sa.select(Group).where(Group.name == "Ops"))
    ops.members.append(user("admin"))  # the author, a member: still not told
    db.session.commit()

    response = publish(client, audience={"groups": [group_id("Ops")]})
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["audience"] == {"groups": [group_id("Ops")]}
    run_jobs(ctx)
    deliver(ctx)

    assert set(told()) == {"alice", "bob"}  # not carol, not dave, not the author
    assert sorted(m["To"] for m in smtp.inbox.messages) == [
        "alice@example.com", "bob@example.com"]


def test_a_large_audience_is_split_into_ranges_and_told_once(ctx, client, app):
    app.config["WIKINOTIFY_FANOUT_RANGE_SIZE"] = 100
    app.config["WIKINOTIFY_FANOUT_SPLIT_ALONE"] = True  # the in-process worker is alone
    added = add_users(349)
    assert publish(client).status_code == 201
    run_jobs(ctx)

    [event] = events()
    assert event.ranges == 4 and event.processed_at is not None  # 353 readers, 100 a range
    rows = db.session.execute(
        sa.select(Notification.user_id, Notification.count)
        .where(Notification.category == announcement.KEY)).all()
    assert sorted(user_id for user_id, _ in rows) == sorted(
        [*added, *(str(user(n).id) for n in ("alice", "bob", "carol", "dave"))])
    assert {count for _, count in rows} == {1}


# -- important --------------------------------------------------------------------------------


def test_important_reaches_the_inbox_of_a_reader_who_turned_announcements_off(ctx, client):
    login(client, "alice")
    shown = client.get("/_notifications/api/preferences").get_json()["categories"]
    wanted = {c["key"]: c["defaults"] for c in shown}
    wanted["announcement"] = {"inApp": False, "email": False}
    off = client.put("/_notifications/api/preferences", json={"categories": wanted})
    assert off.status_code == 200  # her choice is taken: it holds for ordinary ones
    client.post("/logout")

    assert publish(client, title="Coffee on Friday").status_code == 201
    run_jobs(ctx)
    assert "alice" not in told()

    assert publish(client, title="Password reset for everyone", important=True).status_code == 201
    run_jobs(ctx)
    [entry] = entries_for("alice")
    assert (entry.in_app, entry.email_state) == (True, EmailState.NONE)  # mail stays hers
    assert entry.data["important"] is True
    # Each announcement an entry of its own: bob, who kept the defaults, has both.
    assert [e.data["title"] for e in entries_for("bob")] == [
        "Coffee on Friday", "Password reset for everyone"]


def test_the_rule_requires_in_app_and_leaves_the_other_channels_alone():
    off = {"inApp": False, "email": False}
    category = announcement.category
    # Webhook, chat and push follow email's default (on), as for every category.
    assert effective(category, off, mail_on=True, required=True) == (True, False, True, True, True)
    assert effective(category, off, mail_on=True) == (False, False, True, True, True)
    assert effective(category, {}, mail_on=True, required=True) == (True, True, True, True, True)
    important = Event(kind=announcement.KIND, data={"snapshot": {"important": True}})
    assert category.in_app_required(important)
    assert not category.in_app_required(Event(kind=announcement.KIND, data={"snapshot": {}}))
    view = EntryView(1, "default", ("default",), "Downtime", None, {"important": True})
    assert category.describe(view) == "Important announcement: Downtime"


# -- the inbox --------------------------------------------------------------------------------


def test_an_unread_announcement_is_pinned_first_until_read(ctx, client):
    assert publish(client).status_code == 201
    run_jobs(ctx)
    edit("handbook/onboarding", "bob", "Newer than the announcement.")  # alice watches it
    run_jobs(ctx)

    login(client, "alice")
    items = client.get(LIST).get_json()["items"]
    assert [(i["category"], i["pinned"]) for i in items] == [
        ("announcement", True), ("watchedPage", False)]
    assert items[0]["body"] == BODY and items[0]["url"] is None
    html = client.get("/_notifications/inbox").get_data(as_text=True)
    pinned, rest = html.split('class="wn-entries wn-pinned-list"')[1].split("</ul>", 1)
    assert "Read-only on Saturday" in pinned and "Read-only on Saturday" not in rest
    assert ('<a href="https://status.example.org/maintenance" rel="nofollow noopener">'
            in pinned and "&lt;b&gt;No&lt;/b&gt;" in pinned)
    # No later page repeats it; read, it goes back to its place by time.
    assert [i["category"] for i in client.get(LIST + "?unread=true").get_json()["items"]] == [
        "announcement", "watchedPage"]
    assert client.put(f"{LIST}/{items[0]['id']}/read", json={}).status_code == 204
    items = client.get(LIST).get_json()["items"]
    assert [(i["category"], i["pinned"]) for i in items] == [
        ("watchedPage", False), ("announcement", False)]


def test_a_pinned_announcement_heads_the_first_page_and_no_page_repeats_it(ctx, client):
    """The pinned entries and the page are read together (one statement, the page's walk
    reading ten more rows for those it leaves out): the announcement is first, the page
    still has thirty others, and the next page goes on from there without it."""
    assert publish(client).status_code == 201
    run_jobs(ctx)
    many_watched_edits(34)  # all newer than the announcement
    run_jobs(ctx)

    login(client, "alice")
    first = client.get(LIST).get_json()
    assert [(i["category"], i["pinned"]) for i in first["items"][:2]] == [
        ("announcement", True), ("watchedPage", False)]
    assert len(first["items"]) == 31 and first["nextCursor"]
    second = client.get(LIST, query_string={"cursor": first["nextCursor"]}).get_json()
    assert [i["category"] for i in second["items"]] == ["watchedPage"] * 4
    assert second["nextCursor"] is None
    ids = [i["id"] for i in first["items"] + second["items"]]
    assert len(set(ids)) == len(ids) == 35


@pytest.mark.mail_delay(3600)
def test_a_reader_who_can_no_longer_read_the_site_no_longer_sees_its_text(ctx, client, smtp):
    assert publish(client, title="Read-only on Saturday").status_code == 201
    run_jobs(ctx)  # the mail waits an hour: she loses the site first
    everyone = db.session.scalar(sa.select(Group).where(Group.name == "Everyone"))
    db.session.add(PageRule(group_id=everyone.id, path_prefix="", permissions=["read:pages"],
                            deny=True))
    db.session.commit()

    login(client, "carol")
    [item] = client.get(LIST).get_json()["items"]
    assert (item["available"], item["body"], item["page"]) == (False, None, None)
    assert item["text"] == "Annonce\u202f: Read-only on Saturday"  # what she was told, in French
    db.session.execute(sa.update(Notification).values(email_after=utcnow() - timedelta(1)))
    db.session.commit()
    deliver(ctx)
    assert smtp.inbox.raw == []  # checked again before the mail: nobody may read the site


@pytest.mark.mail_delay(3600)
def test_a_reader_removed_from_its_group_no_longer_sees_its_text(ctx, client, smtp):
    assert publish(client, title="Ops rota", audience={"groups": [group_id("Ops")]}
                   ).status_code == 201
    run_jobs(ctx)  # the mail waits an hour: she leaves the group first
    assert "alice" in told()
    ops = db.session.scalar(sa.select(Group).where(Group.name == "Ops"))
    ops.members.remove(user("alice"))
    db.session.commit()

    login(client, "alice")
    [item] = client.get(LIST).get_json()["items"]
    assert (item["available"], item["body"]) == (False, None)
    assert BODY not in client.get("/_notifications/inbox").get_data(as_text=True)
    client.post("/logout")
    db.session.execute(sa.update(Notification).values(email_after=utcnow() - timedelta(1)))
    db.session.commit()
    deliver(ctx)
    assert [m["To"] for m in smtp.inbox.messages] == ["bob@example.com"]  # still a member


# -- withdrawal -------------------------------------------------------------------------------


@pytest.mark.mail_delay(3600)
def test_withdrawal_removes_the_unread_entries_and_their_mail_and_keeps_read_ones(
        ctx, client, smtp):
    created = publish(client).get_json()
    run_jobs(ctx)
    [alices] = entries_for("alice")
    login(client, "alice")
    assert client.put(f"{LIST}/{alices.id}/read", json={}).status_code == 204
    client.post("/logout")

    login(client, "admin")
    assert client.delete(f"{API}/{created['id']}", json={}).status_code == 204
    listed = client.get(API).get_json()["items"]
    assert [(a["id"], a["state"]) for a in listed] == [(created["id"], "withdrawn")]
    assert listed[0]["withdrawnAt"]
    # Again: nothing new.
    assert client.delete(f"{API}/{created['id']}", json={}).status_code == 204

    assert told() == {"alice": ["inApp"]}  # hers was read: it stays, its mail cancelled
    db.session.execute(sa.update(Notification).values(email_after=utcnow() - timedelta(1)))
    db.session.commit()
    deliver(ctx)
    assert smtp.inbox.raw == []


def test_a_withdrawal_larger_than_a_batch_removes_every_entry_and_each_summary_changes(
        ctx, client, monkeypatch):
    # Four readers, two a batch: every batch deleted and each batch's readers told.
    monkeypatch.setattr(announcements, "WITHDRAW_BATCH", 2)
    created = publish(client).get_json()
    run_jobs(ctx)
    readers = ["alice", "bob", "carol", "dave"]
    assert sorted(told()) == readers
    polls = {}
    for name in readers:
        reader = ctx.test_client()
        login(reader, name)
        etag = reader.get(SUMMARY).headers["ETag"]
        # Kept in Redis now: the poll a stale version would answer.
        assert reader.get(SUMMARY, headers={"If-None-Match": etag}).status_code == 304
        polls[name] = (reader, etag)

    login(client, "admin")
    assert client.delete(f"{API}/{created['id']}", json={}).status_code == 204

    assert told() == {}
    for name, (reader, etag) in polls.items():
        after = reader.get(SUMMARY, headers={"If-None-Match": etag})
        assert after.status_code == 200, f"{name}: a stale 304"
        assert after.get_json()["unread"] == 0, f"{name}: a stale body"


def test_withdrawn_before_its_fan_out_it_tells_nobody(ctx, client):
    created = publish(client).get_json()
    login(client, "admin")
    assert client.delete(f"{API}/{created['id']}", json={}).status_code == 204
    run_jobs(ctx)
    assert told() == {}
    [event] = events()
    assert event.processed_at is not None


def _in_flight(event_id: int, username: str) -> None:
    """An entry a fan-out batch chosen before the withdrawal writes after it: unread,
    pinned, its mail due now, as the writer leaves it."""
    db.session.add(Notification(
        user_id=str(user(username).id), site_id=str(main_site().id), category=announcement.KEY,
        variant="published", group_key=f"{announcement.KEY}:{event_id}",
        data={"title": "Read-only on Saturday", "body": BODY}, last_event_id=event_id,
        in_app=True, email_state=EmailState.PENDING, email_after=utcnow() - timedelta(1)))
    db.session.commit()


def test_an_entry_written_after_the_withdrawal_is_neither_shown_nor_mailed(
        ctx, client, smtp):
    created = publish(client).get_json()
    login(client, "admin")
    assert client.delete(f"{API}/{created['id']}", json={}).status_code == 204
    client.post("/logout")
    _in_flight(created["id"], "alice")  # the batch in flight commits after the DELETE

    login(client, "alice")
    assert client.get(LIST).get_json()["items"] == []
    deliver(ctx)
    assert smtp.inbox.raw == []
    [entry] = entries_for("alice")
    assert entry.email_state == EmailState.SKIPPED


@pytest.mark.mail_delay(3600)
def test_undo_brings_back_no_withdrawn_announcement_nor_its_mail(ctx, client, smtp):
    created = publish(client).get_json()
    run_jobs(ctx)
    [alices] = entries_for("alice")
    [bobs] = entries_for("bob")
    login(client, "alice")
    dismissed = client.delete(f"{LIST}/{alices.id}", json={}).get_json()["undoToken"]
    client.post("/logout")
    login(client, "bob")
    marked = client.put(f"{LIST}/read", json={}).get_json()["undoToken"]
    client.post("/logout")

    login(client, "admin")
    assert client.delete(f"{API}/{created['id']}", json={}).status_code == 204
    client.post("/logout")

    login(client, "alice")
    assert client.post(f"{LIST}/undo", json={"token": dismissed}).get_json()["restored"] == 0
    client.post("/logout")
    login(client, "bob")
    assert client.post(f"{LIST}/undo", json={"token": marked}).get_json()["restored"] == 0
    assert entries_for("alice") == []
    db.session.expire_all()
    [bobs] = entries_for("bob")
    assert bobs.read_at is not None and bobs.email_state in NO_MAIL


# -- the API ----------------------------------------------------------------------------------


def test_publishing_writes_one_row_of_wikinotifys_and_audits(ctx, client):
    login(client, "admin")
    with statements_sent(db.engine) as seen:
        assert client.post(API, json={"title": "T", "body": "B",
                                      "audience": {"everyone": True}}).status_code == 201
    inserts = [statement.split("(")[0] for statement, _ in seen
               if statement.lstrip().upper().startswith("INSERT")]
    assert [s for s in inserts if "wikinotify_" in s] == [
        "INSERT INTO wikinotify_events "]  # one
    assert [s for s in inserts if "demo_audit" in s]  # the wiki's audit entry, beside it
    audit = db.session.execute(sa.text(
        "SELECT action, kind FROM demo_audit_log ORDER BY id DESC LIMIT 1")).one()
    assert tuple(audit) == ("publishAnnouncement", "announcement")


#: Bodies the API refuses, each with the field its 400 names.
REFUSED = [
    ({"body": "B", "audience": {"everyone": True}}, "title"),
    ({"title": "", "body": "B", "audience": {"everyone": True}}, "title"),
    ({"title": "   ", "body": "B", "audience": {"everyone": True}}, "title"),
    ({"title": "a\r\nBcc: x@y", "body": "B", "audience": {"everyone": True}}, "title"),
    ({"title": "t" * 201, "body": "B", "audience": {"everyone": True}}, "title"),
    ({"title": "T", "body": "b" * 5001, "audience": {"everyone": True}}, "body"),
    ({"title": "T", "body": "nul \x00", "audience": {"everyone": True}}, "body"),
    ({"title": "T", "body": "B"}, "audience"),
    ({"title": "T", "body": "B", "audience": {}}, "audience.everyone"),
    ({"title": "T", "body": "B", "audience": {"everyone": False}}, "audience.everyone"),
    ({"title": "T", "body": "B", "audience": {"everyone": True, "groups": ["1"]}},
     "audience.everyone"),
    ({"title": "T", "body": "B", "audience": {"groups": []}}, "audience.groups"),
    ({"title": "T", "body": "B", "audience": {"groups": [str(n) for n in range(51)]}},
     "audience.groups"),
    ({"title": "T", "body": "B", "audience": {"groups": ["999999"]}}, "audience.groups.0"),
    ({"title": "T", "body": "B", "audience": {"everyone": True}, "siteId": "nowhere"},
     "siteId"),
    ({"title": "T", "body": "B", "audience": {"everyone": True}, "important": "yes"},
     "important"),
    ({"title": "T", "body": "B", "audience": {"everyone": True}, "html": True}, "html"),
]


def test_a_refused_body_is_a_400_naming_the_field_and_publishes_nothing(ctx, client):
    login(client, "admin")
    for body, field in REFUSED:
        response = client.post(API, json=body)
        assert response.status_code == 400, body
        assert field in response.get_json()["error"]["fields"], (body, response.get_json())
    assert events() == []


def test_only_administrators_may(ctx, client):
    assert client.get(API).status_code == 401
    login(client, "alice")
    assert client.get(API).status_code == 403
    assert client.post(API, json={"title": "T", "body": "B",
                                  "audience": {"everyone": True}}).status_code == 403
    assert client.delete(f"{API}/1", json={}).status_code == 403
    assert client.get(PAGE).status_code == 403
    assert events() == []
    client.post("/logout")
    login(client, "admin")
    for missing in ("1", "abc", "99999999999999999999"):
        assert client.delete(f"{API}/{missing}", json={}).status_code == 404
    edit("home", "bob", "An edit is an event, not an announcement.")
    [event] = events()
    assert client.delete(f"{API}/{event.id}", json={}).status_code == 404


def test_the_page_publishes_and_says_each_wrong_field_in_the_readers_language(ctx, client):
    admin = user("admin")
    admin.locale = "fr"
    db.session.commit()
    login(client, "admin")
    refused = client.post(PAGE, data={"title": "", "body": "B", "audience": "groups"})
    assert refused.status_code == 400
    html = refused.get_data(as_text=True)
    assert "Écrivez un titre d’une ligne, de 200 caractères au plus." in html
    assert "Choisissez tout le monde, ou au moins un groupe." in html
    assert "Write the announcement" not in html  # the body was fine
    assert events() == []

    done = client.post(PAGE, data={"title": "Ops moved", "body": "See <the runbook>.",
                                   "audience": "groups", "groups": [group_id("Ops")],
                                   "important": "on"})
    assert done.status_code == 302
    page = client.get(PAGE).get_data(as_text=True)
    assert "Ops moved" in page and "See &lt;the runbook&gt;." in page and ">Ops<" not in page
    [event] = events()
    assert event.data["audience"] == {"groups": [group_id("Ops")]}
    assert event.data["snapshot"]["important"] is True


@pytest.mark.app_config(WIKINOTIFY_CATEGORIES=["watchedPage"])
def test_a_wiki_that_leaves_the_category_out_has_no_announcements(ctx, client):
    login(client, "admin")
    assert client.get(API).status_code == 404
    assert client.post(API, json={"title": "T", "body": "B",
                                  "audience": {"everyone": True}}).status_code == 404
    assert client.get(PAGE).status_code == 404
    assert PAGE not in client.get("/_notifications/admin").get_data(as_text=True)


def test_a_site_switched_off_publishes_nothing(ctx, client):
    set_site_enabled(db.session, str(main_site().id), False)
    db.session.commit()
    response = publish(client)
    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "site_switched_off"
    assert events() == []


def test_withdrawal_is_audited(ctx, client):
    created = publish(client).get_json()
    login(client, "admin")
    client.delete(f"{API}/{created['id']}", json={})
    audit = db.session.execute(sa.text(
        "SELECT action, details FROM demo_audit_log ORDER BY id DESC LIMIT 1")).one()
    assert audit[0] == "withdrawAnnouncement"
