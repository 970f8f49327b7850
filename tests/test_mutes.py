"""Mutes: a muted page tells the muter nothing from any category, a muted person's
actions tell the muter nothing, pending mail for what was muted is cancelled, and the
page's button works without JavaScript. Every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import re

import pytest

from demo import wiki
from demo.models import db
from tests.helpers.jobs import run_jobs
from tests.helpers.web import csrf_token, login, login_with_csrf
from tests.helpers.wiki import edit, entries_for, page, user, watch

API = "/_notifications/api/mutes"
PREFERENCES = "/_notifications/preferences"


pytestmark = pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True)


def ids(*names: str) -> list[str]:
    return [str(user(n).id) for n in names]


def page_id(path: str) -> str:
    return str(page(path).id)


def mute(client, kind: str, target: str):
    return client.put(API, json={"kind": kind, "id": target})


# -- the API --------------------------------------------------------------------------------


def test_a_mute_is_listed_once_however_often_it_is_made(app, client):
    login(client, "alice")
    assert client.get(API).get_json() == {"items": []}
    with app.app_context():
        onboarding, bob = page_id("handbook/onboarding"), ids("bob")[0]
    assert mute(client, "page", onboarding).status_code == 204
    assert mute(client, "page", onboarding).status_code == 204
    assert mute(client, "user", bob).status_code == 204
    items = client.get(API).get_json()["items"]
    assert sorted((i["kind"], i["id"], i["name"]) for i in items) == [
        ("page", onboarding, "Onboarding"), ("user", bob, "Bob Builder")]
    assert client.delete(f"{API}/page/{onboarding}", json={}).status_code == 204
    assert [i["kind"] for i in client.get(API).get_json()["items"]] == ["user"]


@pytest.mark.parametrize(("body", "field"), [
    ({"kind": "thread", "id": "1"}, "kind"),
    ({"kind": "page"}, "id"),
    ({"kind": "page", "id": ""}, "id"),
    ({"id": "1"}, "kind"),
    ({"kind": "page", "id": "1", "extra": True}, "extra"),
])
def test_a_bad_mute_is_a_400_naming_the_field(app, client, body, field):
    login(client, "alice")
    response = client.put(API, json=body)
    assert response.status_code == 400
    assert field in response.get_json()["error"]["fields"]
    assert client.get(API).get_json() == {"items": []}


@pytest.mark.parametrize("kind", ["page", "user"])
def test_muting_what_the_wiki_does_not_know_is_a_404(app, client, kind):
    login(client, "alice")
    response = mute(client, kind, "999999")
    assert (response.status_code, response.get_json()["error"]["code"]) == (404, "not_found")
    assert client.get(API).get_json() == {"items": []}


def test_a_page_the_reader_cannot_read_answers_as_one_that_does_not_exist(app, client):
    with app.app_context():
        runbook = page_id("ops/runbook")  # Ops only: carol is not in it
    login(client, "carol")
    hidden, missing = mute(client, "page", runbook), mute(client, "page", "999999")
    assert (hidden.status_code, hidden.get_json()) == (missing.status_code, missing.get_json())
    assert hidden.status_code == 404
    assert client.get(API).get_json() == {"items": []}
    login(client, "alice")  # in Ops: she may mute it
    assert mute(client, "page", runbook).status_code == 204


def test_the_form_answers_alike_for_a_page_hidden_from_the_reader_and_a_missing_one(app, client):
    with app.app_context():
        runbook = page_id("ops/runbook")
    login(client, "carol")
    answers = [client.post("/_notifications/mutes", data={"kind": "page", "id": target})
               for target in (runbook, "999999")]
    assert [a.status_code for a in answers] == [404, 404]
    assert answers[0].get_data() == answers[1].get_data()
    assert client.get(API).get_json() == {"items": []}


def test_someone_elses_mute_answers_as_one_that_does_not_exist(app, client):
    with app.app_context():
        onboarding = page_id("handbook/onboarding")
    login(client, "bob")
    mute(client, "page", onboarding)
    login(client, "alice")
    theirs = client.delete(f"{API}/page/{onboarding}", json={})
    missing = client.delete(f"{API}/page/nothing-here", json={})
    assert theirs.status_code == missing.status_code == 404
    assert theirs.get_json() == missing.get_json()
    login(client, "bob")
    assert len(client.get(API).get_json()["items"]) == 1


def test_a_guest_gets_401(client):
    assert client.get(API).status_code == 401
    assert client.put(API, json={"kind": "page", "id": "1"}).status_code == 401


# -- the fan-out ----------------------------------------------------------------------------


def test_a_muted_page_tells_the_muter_nothing_from_any_category(app, client):
    with app.app_context():
        watch("handbook/onboarding", "carol")
        onboarding = page("handbook/onboarding")
        parent = wiki.add_comment(onboarding, user("alice"), "Where are the laptops?").id
        run_jobs(app)
        target = page_id("handbook/onboarding")
    login(client, "alice")
    mute(client, "page", target)
    with app.app_context():
        onboarding = page("handbook/onboarding")
        edit("handbook/onboarding", "bob", "An edit")
        wiki.add_comment(onboarding, user("bob"), "Ask @alice", parent_id=parent)
        wiki.add_comment(onboarding, user("bob"), "A comment on the page")
        run_jobs(app)
        assert entries_for("alice") == []
        # Carol watches it too and did not mute it: she is told.
        assert {e.category for e in entries_for("carol")} >= {"watchedPage"}


def test_a_muted_person_tells_the_muter_nothing_and_others_still_do(app, client):
    with app.app_context():
        onboarding = page("handbook/onboarding")
        parent = wiki.add_comment(onboarding, user("alice"), "Where are the laptops?").id
        watch("handbook/onboarding", "carol")
        run_jobs(app)
        bob = ids("bob")[0]
    login(client, "alice")
    mute(client, "user", bob)
    with app.app_context():
        onboarding = page("handbook/onboarding")
        edit("handbook/onboarding", "bob", "Bob's edit")
        wiki.add_comment(onboarding, user("bob"), "A comment by Bob")
        wiki.add_comment(onboarding, user("bob"), "Ask @alice", parent_id=parent)
        wiki.add_comment(onboarding, user("bob"), "@alice, read this")
        run_jobs(app)
        assert entries_for("alice") == []
        assert entries_for("carol") != []  # Bob is muted by Alice only
        edit("handbook/onboarding", "carol", "Carol's edit")
        run_jobs(app)
        [told] = entries_for("alice")
        assert (told.category, told.actor_id) == ("watchedPage", ids("carol")[0])


def test_muting_cancels_the_mail_waiting_for_what_was_muted(app, client):
    with app.app_context():
        watch("ops/runbook", "alice")
        edit("handbook/onboarding", "bob", "An edit")
        edit("ops/runbook", "bob", "Another page")
        run_jobs(app)
        assert {e.email_state for e in entries_for("alice")} == {"pending"}
        onboarding = page_id("handbook/onboarding")
    login(client, "alice")
    mute(client, "page", onboarding)
    with app.app_context():
        states = {e.page_id: e.email_state for e in entries_for("alice")}
        assert states[onboarding] == "skipped"
        assert states[page_id("ops/runbook")] == "pending"  # not muted: still due
        assert entries_for("bob") == []


def test_muting_a_person_cancels_the_mail_waiting_for_what_they_did(app, client):
    with app.app_context():
        watch("ops/runbook", "alice")
        edit("handbook/onboarding", "bob", "Bob's edit")
        edit("ops/runbook", "carol", "Carol's edit")
        run_jobs(app)
        assert {e.email_state for e in entries_for("alice")} == {"pending"}
        (bob,) = ids("bob")
    login(client, "alice")
    mute(client, "user", bob)
    with app.app_context():
        states = {e.page_id: e.email_state for e in entries_for("alice")}
        assert states[page_id("handbook/onboarding")] == "skipped"
        assert states[page_id("ops/runbook")] == "pending"  # carol is not muted


def test_muting_a_person_keeps_the_mail_of_an_entry_that_carries_others_news(app, client):
    """Carol edited, then Bob: the entry names Bob last, but its mail is Carol's news too."""
    with app.app_context():
        edit("handbook/onboarding", "carol", "Carol's edit")
        run_jobs(app)
        edit("handbook/onboarding", "bob", "Bob's edit")
        run_jobs(app)
        (entry,) = entries_for("alice")
        assert (entry.count, entry.email_state) == (2, "pending")
        (bob,) = ids("bob")
    login(client, "alice")
    mute(client, "user", bob)
    with app.app_context():
        (entry,) = entries_for("alice")
        assert entry.email_state == "pending"


# -- the button and the preferences page (no JavaScript) ----------------------------------


def fields_of(html: str) -> dict[str, str]:
    return dict(re.findall(r'name="([^"]+)" value="([^"]*)"', html))


def page_button(client) -> str:
    """The onboarding page's mute form, as a browser without JavaScript sees it."""
    html = client.get("/pages/handbook/onboarding").get_data(as_text=True)
    return re.search(r'<form class="wn-mute".*?</form>', html, re.S).group(0)


@pytest.mark.parametrize("app_config", [{"WTF_CSRF_ENABLED": True}])
def test_the_page_button_mutes_and_unmutes_without_javascript(app, client):
    login_with_csrf(client, "alice")
    form = page_button(client)
    fields = fields_of(form)
    assert fields["action"] == "mute" and "Mute this page" in form
    action = re.search(r'action="([^"]+)"', form).group(1)

    forged = client.post(action, data={**fields, "csrf_token": "forged"})
    assert forged.status_code == 400
    response = client.post(action, data=fields)
    assert (response.status_code, response.location) == (302, "/pages/handbook/onboarding")
    assert [i["kind"] for i in client.get(API).get_json()["items"]] == ["page"]

    html = client.get("/pages/handbook/onboarding").get_data(as_text=True)
    assert "Unmute this page" in html
    preferences = client.get(PREFERENCES).get_data(as_text=True)
    listed = re.search(r'<section class="wn-mutes".*?</section>', preferences, re.S).group(0)
    assert "Onboarding" in listed
    undo = fields_of(listed)
    assert undo["action"] == "unmute" and undo["csrf_token"] == csrf_token(listed)
    assert client.post(action, data=undo).status_code == 302
    assert client.get(API).get_json() == {"items": []}


#: ``next`` values that are not a path on this site, or that a browser would not read as
#: one: it drops tabs and newlines from a URL, and reads a backslash as a slash.
OFF_SITE = {
    "absolute": "https://evil.example/",
    "scheme-relative": "//evil.example/",
    "backslash": "/\\evil.example",
    "backslash-later": "/a/..\\..\\/evil.example",
    "tab": "/\t/evil.example/",
    "newline": "/\n/evil.example/",
    "header-split": "/pages/home\r\nSet-Cookie: a=b",
    "nul": "/\x00/evil.example/",
    "leading-space": " //evil.example/",
    "unicode-space": "/\u3000/evil.example/",
    "line-separator": "/\u2028/evil.example/",
    "scheme": "javascript:alert(1)",
    "relative": "evil.example",
}


@pytest.mark.parametrize("app_config", [{"WTF_CSRF_ENABLED": True}])
@pytest.mark.parametrize("elsewhere", OFF_SITE.values(), ids=OFF_SITE.keys())
def test_the_button_never_sends_the_reader_off_site(app, client, elsewhere):
    login_with_csrf(client, "alice")
    fields = fields_of(page_button(client))
    response = client.post("/_notifications/mutes", data={**fields, "next": elsewhere})
    assert (response.status_code, response.location) == (302, "/")


@pytest.mark.parametrize("app_config", [{"WTF_CSRF_ENABLED": True}])
def test_the_button_comes_back_to_a_path_of_this_site_with_its_query(app, client):
    login_with_csrf(client, "alice")
    fields = fields_of(page_button(client))
    here = "/pages/handbook/onboarding/comments?sort=new%20first"
    response = client.post("/_notifications/mutes", data={**fields, "next": here})
    assert (response.status_code, response.location) == (302, here)


@pytest.mark.parametrize("app_config", [{"WTF_CSRF_ENABLED": True}])
def test_the_button_comes_back_to_a_page_whose_path_has_spaces_and_accents(app, client):
    with app.app_context():
        edit("handbook/café menu", "bob", "Soup")
    login_with_csrf(client, "alice")
    here = "/pages/handbook/caf%C3%A9%20menu"
    html = client.get(here).get_data(as_text=True)
    form = re.search(r'<form class="wn-mute".*?</form>', html, re.S).group(0)
    response = client.post("/_notifications/mutes", data=fields_of(form))
    assert (response.status_code, response.location) == (302, here)


def test_the_discussion_offers_to_mute_each_other_commenter(app, client):
    with app.app_context():
        onboarding = page("handbook/onboarding")
        bobs = wiki.add_comment(onboarding, user("bob"), "Bob's comment").id
        alices = wiki.add_comment(onboarding, user("alice"), "Alice's comment").id
        db.session.commit()
    login(client, "alice")
    html = client.get("/pages/handbook/onboarding/comments").get_data(as_text=True)

    def comment(comment_id: int) -> str:
        return re.search(rf'id="comment-{comment_id}".*?</article>', html, re.S).group(0)

    assert "Mute this person" in comment(bobs)
    assert "Mute this person" not in comment(alices)  # never her own name
    assert "Mute this page" in html
