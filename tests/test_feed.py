"""The reader's inbox as an Atom feed (docs/rules.md#the-feed): read with no session by a real
feed parser, after real events fanned out by a real worker; only her own entries, and only
what she may see now; its signed link shown and reset on the preferences page, a reset or
forged link a 404 that says nothing more. SQLite and PostgreSQL."""

from __future__ import annotations

import re

import feedparser
import pytest
import sqlalchemy as sa
from flask import before_render_template, current_app

from demo import wiki
from demo.extensions import notify
from demo.models import AuditLog, db
from tests.helpers.access import (
    EXCERPT,
    SECRET_PATH,
    SECRET_TITLE,
    comment_told_to_carol,
    lock_away_move_and_retitle,
)
from tests.helpers.jobs import run_jobs
from tests.helpers.web import csrf_token, login, login_with_csrf
from tests.helpers.wiki import edit, main_site, page, user, watch
from wikinotify.inbox import feed
from wikinotify.instance_settings import instance_settings, set_site_enabled
from wikinotify.mail.tokens import make_token
from wikinotify.models import FeedKey

PREFERENCES = "/_notifications/preferences"
RESET = "/_notifications/preferences/feed/reset"
LINK = re.compile(r'<a class="wn-feed-link" type="application/atom\+xml" href="([^"]+)"')


def feed_link(client, name: str) -> str:
    """The feed URL ``name``'s preferences page shows, as a path on the test client."""
    login(client, name)
    html = client.get(PREFERENCES).get_data(as_text=True)
    client.post("/logout")
    return LINK.search(html).group(1).removeprefix(main_site().base_url)


def read(app, path: str):
    """The feed, fetched as a feed reader does: a client of its own, no cookie."""
    return app.test_client().get(path)


def parsed(app, path: str):
    response = read(app, path)
    assert response.status_code == 200, response.status_code
    result = feedparser.parse(response.data)
    assert not result.bozo, result.bozo_exception
    return result


def bob_edits_onboarding(content: str = "A new paragraph") -> None:
    """Alice watches Onboarding (seed); Bob saves it."""
    edit("handbook/onboarding", "bob", content)
    run_jobs(current_app._get_current_object())


def test_her_feed_lists_her_entries_with_absolute_links_and_no_session(ctx, client):
    bob_edits_onboarding()
    path = feed_link(client, "alice")
    response = read(ctx, path)
    assert response.headers["Content-Type"] == "application/atom+xml; charset=utf-8"
    assert response.headers["Cache-Control"] == "private, no-cache"
    assert "Set-Cookie" not in response.headers
    assert response.last_modified is not None
    result = parsed(ctx, path)
    base = main_site().base_url
    assert result.feed.title == "Notifications for Alice Liddell on Main wiki"
    assert result.feed.id.startswith("urn:uuid:")
    assert [link.href for link in result.feed.links if link.rel == "self"] == [base + path]
    [entry] = result.entries
    assert entry.title == "Onboarding was edited by Bob Builder"
    assert entry.link == f"{base}/pages/handbook/onboarding"
    assert entry.id.startswith("urn:uuid:") and entry.updated_parsed
    assert entry.author == "Bob Builder"
    # A conditional GET of an unchanged feed is a 304.
    again = ctx.test_client().get(path, headers={"If-None-Match": response.headers["ETag"]})
    assert again.status_code == 304


def test_an_entry_keeps_its_id_as_it_coalesces_and_the_newest_comes_first(ctx, client):
    bob_edits_onboarding()
    path = feed_link(client, "alice")
    [first] = parsed(ctx, path).entries
    wiki.save_page(main_site(), user("admin"), "handbook/new", "New hire FAQ", "v1")
    watch("handbook/new", "alice")
    edit("handbook/new", "bob", "v2")
    run_jobs(ctx)
    bob_edits_onboarding("Another paragraph")
    entries = parsed(ctx, path).entries
    assert [e.title for e in entries] == ["Onboarding was edited twice, last by Bob Builder",
                                         "New hire FAQ was edited by Bob Builder"]
    assert entries[0].id == first.id


def test_her_feed_shows_no_other_readers_entries(ctx, client):
    wiki.save_page(main_site(), user("admin"), "carol/notes", "Carol's private notes", "v1")
    watch("carol/notes", "carol")
    edit("carol/notes", "bob", "v2")
    bob_edits_onboarding()
    alice = read(ctx, feed_link(client, "alice")).get_data(as_text=True)
    carol = parsed(ctx, feed_link(client, "carol"))
    assert "Carol" not in alice and "carol/notes" not in alice
    assert [e.link.rsplit("/", 1)[-1] for e in carol.entries] == ["notes"]


def test_a_page_she_can_no_longer_see_is_not_in_her_feed(ctx, client):
    comment_told_to_carol()
    path = feed_link(client, "carol")
    [entry] = parsed(ctx, path).entries
    assert entry.summary == EXCERPT  # while she may see it, with its comment's excerpt
    lock_away_move_and_retitle()
    body = read(ctx, path).get_data(as_text=True)
    assert feedparser.parse(body).entries == []
    for hidden in (SECRET_TITLE, SECRET_PATH, EXCERPT, "Onboarding"):
        assert hidden not in body


def test_a_reset_link_is_a_404_and_the_new_one_works(ctx, client):
    bob_edits_onboarding()
    old = feed_link(client, "alice")
    login(client, "alice")
    response = client.post(RESET)
    assert response.status_code == 302 and response.headers["Location"].endswith("#wn-feed")
    html = client.get(PREFERENCES).get_data(as_text=True)
    assert "Your feed has a new link. The old one no longer works." in html
    new = LINK.search(html).group(1).removeprefix(main_site().base_url)
    assert new != old
    assert read(ctx, old).status_code == 404
    assert len(parsed(ctx, new).entries) == 1
    resets = sa.select(AuditLog.actor_id).where(AuditLog.action == "resetNotificationFeed")
    assert db.session.scalars(resets).all() == [str(user("alice").id)]


def test_forged_and_foreign_tokens_are_a_404(ctx, client):
    path = feed_link(client, "alice")
    token = path.rsplit("/", 1)[1].removesuffix(".atom")
    secret = instance_settings(db.session).unsubscribe_secret
    alice, carol = str(user("alice").id), str(user("carol").id)
    version = db.session.scalar(sa.select(FeedKey.version).where(FeedKey.user_id == alice))
    forged = [
        token[:-2] + ("AA" if not token.endswith("AA") else "BB"),  # its signature altered
        feed._serializer(b"x" * 32).dumps({"u": alice, "k": version}),  # another secret
        feed._serializer(secret).dumps({"u": carol, "k": version}),  # her version, for carol
        make_token(secret, alice, ["watchedPage"]),  # an unsubscribe token: another salt
        "junk",
    ]
    for bad in forged:
        response = read(ctx, f"/_notifications/feed/{bad}.atom")
        assert (response.status_code, response.data) == (404, b""), bad


def test_an_inactive_or_forgotten_account_has_no_feed(ctx, client):
    bob_edits_onboarding()
    path = feed_link(client, "alice")
    alice = user("alice")
    alice.active = False
    db.session.commit()
    assert read(ctx, path).status_code == 404
    alice.active = True
    db.session.commit()
    assert read(ctx, path).status_code == 200
    notify.forget_user(str(alice.id))
    db.session.commit()
    assert db.session.scalars(sa.select(FeedKey)).all() == []
    assert read(ctx, path).status_code == 404


def test_a_switched_off_site_lists_nothing(ctx, client):
    bob_edits_onboarding()
    path = feed_link(client, "alice")
    set_site_enabled(db.session, str(main_site().id), False)
    db.session.commit()
    assert parsed(ctx, path).entries == []


def test_titles_are_escaped_and_what_xml_cannot_hold_is_dropped(ctx, client):
    onboarding = page("handbook/onboarding")
    onboarding.title = 'Tom & Jerry <script>alert("x")</script>\x0b'
    db.session.commit()
    bob_edits_onboarding()
    body = read(ctx, feed_link(client, "alice")).get_data(as_text=True)
    assert "<script>" not in body
    [entry] = feedparser.parse(body).entries
    assert entry.title == 'Tom & Jerry <script>alert("x")</script> was edited by Bob Builder'


def test_the_feed_speaks_her_language(ctx, client):
    comment_told_to_carol()
    login(client, "carol")  # carol's locale is fr
    html = client.get(PREFERENCES).get_data(as_text=True)
    assert "Réinitialiser le lien du flux" in html and "Reset the feed link" not in html
    result = parsed(ctx, feed_link(client, "carol"))
    assert result.feed.title == "Notifications pour Carol Danvers sur Main wiki"
    assert result.feed.language == "fr"
    [entry] = result.entries
    assert entry.title.startswith("Bob Builder a commenté")
    assert entry.tags[0].label == "Commentaires sur les pages que vous suivez"


@pytest.mark.app_config(WIKINOTIFY_UNSUBSCRIBE_RATE=3)
def test_refused_tokens_are_rate_limited_and_a_valid_one_never_is(ctx, client):
    path = feed_link(client, "alice")
    codes = [read(ctx, f"/_notifications/feed/junk{n}.atom").status_code for n in range(5)]
    assert codes == [404, 404, 404, 429, 429]
    assert read(ctx, path).status_code == 200


@pytest.mark.app_config(WTF_CSRF_ENABLED=True)
def test_the_reset_button_needs_the_pages_csrf_token(app, client):
    # Not under ``ctx``: requests inside one app context share its ``g``, and with it
    # Flask-WTF's "token already checked".
    login_with_csrf(client, "alice")
    html = client.get(PREFERENCES).get_data(as_text=True)
    assert 'type="application/atom+xml"' in html and "Reset the feed link" in html
    before = LINK.search(html).group(1)
    assert client.post(RESET).status_code == 400
    assert LINK.search(client.get(PREFERENCES).get_data(as_text=True)).group(1) == before
    response = client.post(RESET, data={"csrf_token": csrf_token(html)})
    assert response.status_code == 302
    assert LINK.search(client.get(PREFERENCES).get_data(as_text=True)).group(1) != before


def test_a_guest_cannot_reset_a_feed(client):
    response = client.post(RESET)
    assert response.status_code == 302 and "/login" in response.headers["Location"]


def test_the_page_commits_nothing_while_it_renders(app, client):
    """Her link's version is made by the preferences view before it renders: a template
    never commits what the host has pending mid-request."""
    login(client, "alice")
    happened = []
    commit = lambda session: happened.append("commit")  # noqa: E731
    render = lambda sender, **extra: happened.append("render")  # noqa: E731
    sa.event.listen(db.session, "before_commit", commit)
    before_render_template.connect(render, app)
    try:
        html = client.get(PREFERENCES).get_data(as_text=True)
    finally:
        sa.event.remove(db.session, "before_commit", commit)
        before_render_template.disconnect(render, app)
    assert "render" in happened
    assert "commit" not in happened[happened.index("render"):]
    path = LINK.search(html).group(1).removeprefix(main_site().base_url)
    assert read(app, path).status_code == 200


ALTERNATE = re.compile(r'<link rel="alternate" type="application/atom\+xml" title="[^"]*" '
                       r'href="([^"]+)">')


def alternates(client, path: str) -> list[str]:
    """The feeds ``path``'s head points a browser or a feed reader at."""
    html = client.get(path).get_data(as_text=True)
    head = html.split("</head>", 1)[0]
    assert len(ALTERNATE.findall(html)) == len(ALTERNATE.findall(head))  # in the head only
    return ALTERNATE.findall(head)


def test_her_inbox_and_preferences_point_a_feed_reader_at_her_own_feed(ctx, client):
    """docs/rules.md#the-feed: ``<link rel="alternate">`` in the head of her inbox and
    preferences, once she has a link (the preferences page makes it); never another
    reader's, and the new one after a reset."""
    login(client, "bob")
    assert alternates(client, "/_notifications/inbox") == []  # bob has no link yet
    client.post("/logout")
    alice = feed_link(client, "alice")
    bob = feed_link(client, "bob")
    assert alice != bob
    for name, own in (("alice", alice), ("bob", bob)):
        login(client, name)
        for path in ("/_notifications/inbox", PREFERENCES):
            assert alternates(client, path) == [main_site().base_url + own], (name, path)
        client.post("/logout")
    login(client, "alice")
    client.post(RESET)
    [new] = alternates(client, "/_notifications/inbox")
    assert new != main_site().base_url + alice
    assert read(ctx, new.removeprefix(main_site().base_url)).status_code == 200
