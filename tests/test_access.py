"""Access is checked every time someone sees something (docs/rules.md#access;
docs/rules.md#lessons-learned): at the fan-out, in the inbox list and page, and in the mail. A
comment needs the page as well as its comments, as the wiki itself asks. Every test runs on SQLite
and on PostgreSQL, with a real RQ worker and a real SMTP server."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from demo import wiki
from demo.models import Group, PageRule, db
from tests.helpers.access import (
    EXCERPT,
    SECRET_PATH,
    SECRET_TITLE,
    comment_told_to_carol,
    lock_away_move_and_retitle,
)
from tests.helpers.jobs import run_jobs
from tests.helpers.web import login
from tests.helpers.wiki import entries_for, main_site, page, user
from wikinotify.mail.drain import NO_LONGER_VISIBLE
from wikinotify.models import Notification, utcnow

pytestmark = [
    pytest.mark.app_config(smtp=True),
    # Mail waits an hour: each test decides when it falls due.
    pytest.mark.mail_delay(3600),
]


def deny(group_name: str, prefix: str, *permissions: str) -> None:
    group = db.session.scalar(sa.select(Group).where(Group.name == group_name))
    db.session.add(PageRule(group_id=group.id, path_prefix=prefix,
                            permissions=list(permissions), deny=True))
    db.session.commit()


def inbox_items(client, name: str) -> list[dict]:
    login(client, name)
    items = client.get("/_notifications/api/notifications").get_json()["items"]
    client.post("/logout")
    return items


def test_the_inbox_hides_a_page_its_reader_can_no_longer_see(ctx, client):
    comment_told_to_carol()
    lock_away_move_and_retitle()

    [item] = inbox_items(client, "carol")
    assert item["available"] is False
    assert (item["url"], item["excerpt"], item["page"]["path"]) == (None, None, None)
    assert item["page"]["title"] == "Onboarding"  # as she was told, when she could see it
    login(client, "carol")
    listing = client.get("/_notifications/api/notifications").get_data(as_text=True)
    html = client.get("/_notifications/inbox").get_data(as_text=True)
    for shown in (listing, html):
        assert SECRET_TITLE not in shown
        assert SECRET_PATH not in shown
        assert EXCERPT not in shown
    assert "Onboarding" in html

    # alice is in Ops: the same entry follows the move for her, title, link and excerpt.
    [alice_item] = inbox_items(client, "alice")
    assert alice_item["available"] is True
    assert alice_item["page"] == {"id": alice_item["page"]["id"], "title": SECRET_TITLE,
                                  "path": SECRET_PATH}
    assert alice_item["excerpt"] == EXCERPT


def test_a_reader_who_leaves_a_group_loses_its_pages_at_her_next_request(ctx, client):
    """Her groups are read with her account on each request (the demo wiki's sign-in load
    answers wikinotify's access re-check): a change between two requests of one session
    is seen by the second."""
    comment_told_to_carol()
    lock_away_move_and_retitle()
    login(client, "alice")
    api = "/_notifications/api/notifications"
    [item] = client.get(api).get_json()["items"]
    assert item["available"] is True
    ops = db.session.scalar(sa.select(Group).where(Group.name == "Ops"))
    wiki.leave_group(user("alice"), ops)
    [item] = client.get(api).get_json()["items"]
    assert (item["available"], item["url"], item["excerpt"]) == (False, None, None)


def test_a_comment_entry_needs_the_page_as_well_as_its_comments_when_shown(ctx, client):
    comment_told_to_carol()
    deny("Everyone", "handbook/", "read:pages")  # read:comments stays
    assert "read:comments" in wiki.permissions_on(user("carol"), "handbook/onboarding")
    [item] = inbox_items(client, "carol")
    assert (item["available"], item["excerpt"], item["url"]) == (False, None, None)


def test_a_mention_needs_the_page_as_well_as_its_comments_at_the_fan_out(ctx, client):
    wiki.save_page(main_site(), user("bob"), "deals/acme", SECRET_TITLE, "Terms.")
    deny("Everyone", "deals/", "read:pages")
    ops = db.session.scalar(sa.select(Group).where(Group.name == "Ops"))
    db.session.add(PageRule(group_id=ops.id, path_prefix="deals/",
                            permissions=["read:pages"], deny=False))
    db.session.commit()
    # carol may read comments there but not the page: the wiki answers her with a 404.
    held = wiki.permissions_on(user("carol"), "deals/acme")
    assert "read:comments" in held and "read:pages" not in held
    login(client, "carol")
    assert client.get("/pages/deals/acme").status_code == 404

    wiki.add_comment(page("deals/acme"), user("bob"), "@carol @alice please check the terms")
    run_jobs(ctx)
    assert entries_for("carol") == []
    assert [e.category for e in entries_for("alice")] == ["mention"]


def make_due() -> None:
    db.session.execute(sa.update(Notification).where(Notification.email_state == "pending")
                       .values(email_after=utcnow() - timedelta(seconds=1)))
    db.session.commit()


def test_a_mail_is_not_sent_about_a_page_its_reader_can_no_longer_see(ctx, smtp):
    from wikinotify.queue import enqueue

    comment_told_to_carol()
    lock_away_move_and_retitle()
    make_due()
    enqueue(ctx, "send_mail")
    run_jobs(ctx)

    [carol_entry] = entries_for("carol")
    assert (carol_entry.email_state, carol_entry.email_error) == ("skipped", NO_LONGER_VISIBLE)
    # alice still may: hers is the one mail, with the page as it is now.
    [mail] = smtp.inbox.messages
    assert mail["To"] == user("alice").email
    assert EXCERPT in mail.get_body(("plain",)).get_content()
