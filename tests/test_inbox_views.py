"""The inbox grouped by page, and what the bell menu shows of who acted: initials, or the
wiki's picture (docs/rules.md#the-inbox-page, docs/rules.md#the-inbox-api)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from demo import wiki
from demo.models import db
from tests.helpers.jobs import run_jobs
from tests.helpers.web import login
from tests.helpers.wiki import edit, entries_for, page, user, watch
from wikinotify.inbox.presentation import Presented, by_page
from wikinotify.models import Notification
from wikinotify.state import state

API = "/_notifications/api/notifications"
INBOX = "/_notifications/inbox"


def renamed(name: str, display_name: str) -> None:
    db.session.execute(sa.update(type(user(name))).where(type(user(name)).id == user(name).id)
                       .values(display_name=display_name))
    db.session.commit()


@pytest.mark.parametrize(("display_name", "initials"), [
    ("Bob Builder", "BB"),
    ("Bob", "B"),
    ("bob van der builder", "BB"),
    ("żaneta kowalska", "ŻK"),
    ("山田 太郎", "山太"),
    ("محمد علي", "مع"),
    ("e\u0301mile zola", "E\u0301Z"),
])
def test_the_list_gives_the_actor_s_initials(app, client, display_name, initials):
    with app.app_context():  # alice watches Onboarding (seed)
        renamed("bob", display_name)
        edit("handbook/onboarding", "bob", "An edit")
    run_jobs(app)
    login(client, "alice")
    [item] = client.get(API).get_json()["items"]
    assert item["actor"]["name"] == display_name
    assert item["actor"]["initials"] == initials
    assert item["actor"]["avatarUrl"] is None  # the demo wiki keeps no pictures


def test_a_host_s_avatar_is_given_once_per_list_and_only_over_http(app, client, monkeypatch):
    asked: list[list[str]] = []
    with app.app_context():
        watch("home", "alice")
        bob, carol = str(user("bob").id), str(user("carol").id)
        pictures = {bob: "https://pics.example/bob.png", carol: "javascript:alert(1)"}

        def avatar_urls(user_ids):
            asked.append(list(user_ids))
            return {i: pictures[i] for i in user_ids if i in pictures}

        monkeypatch.setattr(state().host, "avatar_urls", avatar_urls)
        edit("handbook/onboarding", "bob", "An edit")
        edit("home", "carol", "Another edit")
    run_jobs(app)
    login(client, "alice")
    items = client.get(API).get_json()["items"]
    faces = {i["actor"]["name"]: i["actor"]["avatarUrl"] for i in items}
    assert faces == {"Bob Builder": "https://pics.example/bob.png", "Carol Danvers": None}
    assert asked == [sorted({bob, carol})]  # one call for the page of entries


#: (reader, the toggle's words, the page's group heading)
READERS = {"alice": ("By day", "By page"), "carol": ("Par jour", "Par page")}


@pytest.mark.parametrize("name", ["alice", "carol"])
def test_the_inbox_groups_by_page_newest_activity_first(app, client, name):
    by_day, by_page_words = READERS[name]
    with app.app_context():
        for path in ("handbook/onboarding", "home"):
            watch(path, name)
        edit("handbook/onboarding", "bob", "First")
        edit("home", "bob", "Second")
        wiki.add_comment(page("handbook/onboarding"), user("bob"), "Newest of all")
        run_jobs(app)
        # The comment is the newest activity: Onboarding's group comes first.
        newest = max(entries_for(name), key=lambda e: e.category == "watchedPage"
                     and e.variant == "commented")
        db.session.execute(sa.update(Notification).where(Notification.id == newest.id)
                           .values(updated_at=datetime.now(UTC) + timedelta(minutes=1)))
        db.session.commit()
    login(client, name)

    html = client.get(INBOX).get_data(as_text=True)
    assert f"<strong>{by_day}</strong>" in html  # by day is the default
    assert f'href="/_notifications/inbox?view=pages">{by_page_words}</a>' in html
    assert 'class="wn-day wn-page-group"' not in html

    html = client.get(f"{INBOX}?view=pages").get_data(as_text=True)
    assert f"<strong>{by_page_words}</strong>" in html
    headings = re.findall(r'<h2 class="wn-day wn-page-group">([^<]*)</h2>', html)
    assert headings == ["Onboarding", "Home"]
    # The entries under each page: two about Onboarding, then one about Home.
    groups = html.split('class="wn-day wn-page-group"')[1:]
    assert [g.count('class="wn-entry') for g in groups] == [2, 1]
    # Unread and the view together, both kept by the other links.
    html = client.get(f"{INBOX}?view=pages&unread=1").get_data(as_text=True)
    assert 'href="/_notifications/inbox?unread=1">' in html
    fragment = client.get("/_notifications/inbox/entries?view=pages").get_data(as_text=True)
    assert fragment.count('class="wn-day wn-page-group"') == 2


def test_entries_about_no_page_are_a_group_of_their_own():
    def shown(entry_id: int, page_id: str | None, title: str | None) -> Presented:
        entry = Notification(id=entry_id, page_id=page_id, data={"title": title} if title else {})
        page_ref = {"id": page_id, "title": title, "path": None} if page_id else None
        return Presented(entry=entry, text="", url=None, page=page_ref, excerpt=None)

    entries = [shown(1, "7", "Home"), shown(2, None, None), shown(3, "8", "FAQ"),
               shown(4, "7", "Home"), shown(5, None, None)]
    assert [(title, [p.entry.id for p in group]) for title, group in by_page(entries)] == [
        ("Home", [1, 4]), (None, [2, 5]), ("FAQ", [3])]
