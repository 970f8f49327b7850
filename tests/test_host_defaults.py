"""The smaller host interface (the README's second adoption step): six methods make a working
host, the others default to what a wiki without their feature needs, and one call on a page view
clears what the reader has seen, by each category's own ``link_section``."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import sqlalchemy as sa

from demo import wiki
from demo.extensions import notify
from demo.host import DemoHost
from demo.models import db
from tests.helpers.jobs import run_jobs
from tests.helpers.wiki import edit, entries_for, events, page, user, watch
from wikinotify import Host, SiteFacts, UserFacts
from wikinotify.categories import LAUNCH_CATEGORIES, Registry, watched_page_comment
from wikinotify.inbox.live import summary_version
from wikinotify.inbox.viewing import categories_shown_by

SMALLEST_HOST = {"page_watchers", "users", "check_access", "pages", "page_url", "is_admin"}


class SmallestHost(Host):
    """A wiki with one site, pages anyone may read, watching, and nothing else."""

    def __init__(self, sites: list[SiteFacts]) -> None:
        self._sites = sites

    def page_watchers(self, page_id, *, after, limit):
        return []

    def users(self, user_ids):
        return {u: UserFacts(id=u, display_name=u) for u in user_ids}

    def check_access(self, group_ids, permission, page):
        return True

    def pages(self, page_ids):
        return {p: {"id": p, "path": f"p/{p}", "title": p} for p in page_ids if p != "gone"}

    def page_url(self, page, *, section=None):
        return "/" + page["path"]

    def sites(self):
        return self._sites

    def is_admin(self, user_id):
        return False


def test_six_methods_make_a_host_and_the_rest_default_to_a_wiki_without_the_feature(caplog):
    assert Host.__abstractmethods__ == SMALLEST_HOST
    one = SiteFacts(id="main", base_url="https://wiki.example", title="Wiki")
    host = SmallestHost([one])
    assert host.watchers_query("7") is None
    assert host.page_reviewers({"id": "7"}, after=None, limit=10) == []
    assert host.mentioned_users("hi @alice", site_id="main") == []
    assert host.comment_author("3") is None
    assert host.comments_exist(["3"]) == set()  # no excerpt is shown of an unknown comment
    assert host.last_site_id(["5"]) == {}  # instance-scoped mail goes out from the first site
    assert host.avatar_urls(["5"]) == {}  # the bell menu shows initials
    assert host.active_users(["5", "6"]) == {"5", "6"}  # from users()' facts
    assert (host.page_exists("7"), host.page_exists("gone")) == (True, False)
    assert host.current_site_id() == "main"
    with caplog.at_level(logging.INFO, logger="wikinotify.audit"):
        host.audit("updateNotificationPrefs", actor_id="5", kind="user", details={"a": 1})
    assert "updateNotificationPrefs by 5 (user)" in caplog.text

    # Announcements (docs/rules.md#announcements): no groups to offer; everyone is asked of
    # accounts_with_permission (this host has none: the event fails naming it); groups,
    # which nothing else lists, need the host's own method.
    assert host.announcement_groups() == []
    with pytest.raises(NotImplementedError, match="accounts_with_permission"):
        host.announcement_audience("main", None, after=None, limit=10)
    with pytest.raises(NotImplementedError, match="announcement_audience for groups"):
        host.announcement_audience("main", frozenset({"ops"}), after=None, limit=10)

    class ReadersHost(SmallestHost):
        def accounts_with_permission(self, permission, *, after, limit):
            return [f"{permission} after {after}, {limit}"]

    readers = ReadersHost([one]).announcement_audience("main", None, after="4", limit=2)
    assert readers == ["read:pages after 4, 2"]

    two = SmallestHost([one, dataclasses.replace(one, id="docs")])
    with pytest.raises(NotImplementedError, match="implement Host.current_site_id"):
        two.current_site_id()


def test_without_a_watchers_query_deletion_reads_the_watchers_before_its_insert(
    ctx, monkeypatch
):
    monkeypatch.setattr(DemoHost, "watchers_query", Host.watchers_query)
    watch("handbook/onboarding", "bob")
    wiki.delete_page(page("handbook/onboarding"), user("admin"))
    [event] = events()
    assert sorted(event.recipients) == sorted([str(user("alice").id), str(user("bob").id)])
    run_jobs(ctx)
    assert [(e.category, e.variant) for e in entries_for("alice")] == [("watchedPage", "deleted")]


def test_what_a_view_clears_is_each_categorys_link_section():
    own = dataclasses.replace(watched_page_comment.category, key="ownThread")
    registry = Registry((*LAUNCH_CATEGORIES, own))
    assert categories_shown_by(registry, "page") == [
        "watchedPage", "suggestionReviewed", "pageCreated", "pageDeleted", "announcement"]
    assert set(categories_shown_by(registry, "discussion")) == {
        "watchedPageComment", "mention", "commentReply", "ownThread"}
    assert categories_shown_by(registry, "review") == ["reviewRequested"]
    with pytest.raises(ValueError, match="section is 'talk'"):
        categories_shown_by(registry, "talk")


def test_mark_seen_joins_the_callers_transaction_and_tells_the_badge_after_commit(ctx):
    edit("handbook/onboarding", "bob", "An edit")
    wiki.add_comment(page("handbook/onboarding"), user("bob"), "A comment")
    run_jobs(ctx)
    alice = str(user("alice").id)
    target = page("handbook/onboarding").id

    def unread():
        db.session.expire_all()
        return sorted(e.category for e in entries_for("alice", read_at=None))

    assert notify.mark_seen(alice, target, section="discussion") == 1
    db.session.rollback()  # the caller changed its mind: nothing was committed for it
    assert unread() == ["watchedPage", "watchedPageComment"]

    before = summary_version(ctx, alice)
    assert notify.mark_seen(alice, target, section="discussion") == 1
    assert summary_version(ctx, alice) == before  # nothing is told before the commit
    db.session.commit()
    assert unread() == ["watchedPage"]
    assert summary_version(ctx, alice) != before
    assert notify.mark_seen(alice, target) == 1  # section="page"
    db.session.commit()
    assert unread() == []


def test_mark_seen_logs_and_ignores_a_section_it_does_not_know(ctx, caplog):
    """The README's promise: mark_seen never raises, not even for a section that is
    not one of VIEWS' names (a typo, or a value that is not a name at all)."""
    edit("handbook/onboarding", "bob", "An edit")
    run_jobs(ctx)
    alice, target = str(user("alice").id), page("handbook/onboarding").id
    with caplog.at_level(logging.WARNING, logger="wikinotify.inbox.viewing"):
        assert notify.mark_seen(alice, target, section="talk") == 0
        assert notify.mark_seen(alice, target, section=["page"]) == 0
    assert "section 'talk'" in caplog.text and "section ['page']" in caplog.text
    db.session.commit()
    assert [e.category for e in entries_for("alice", read_at=None)] == ["watchedPage"]


def test_a_failed_mark_seen_costs_the_caller_nothing(ctx, caplog):
    """On PostgreSQL a failed statement would abort the caller's transaction: mark_seen
    runs in a SAVEPOINT, logs and goes on (SQLite keeps the transaction anyway)."""
    edit("handbook/onboarding", "bob", "An edit")
    run_jobs(ctx)
    alice, target = str(user("alice").id), page("handbook/onboarding").id
    wiki.add_comment(page("handbook/onboarding"), user("carol"), "The caller's own write")

    def failing_update(connection, cursor, statement, *args):
        if statement.lstrip().upper().startswith("UPDATE WIKINOTIFY_NOTIFICATIONS"):
            raise sa.exc.OperationalError(statement, {}, Exception("injected"))

    sa.event.listen(db.engine, "before_cursor_execute", failing_update)
    try:
        with caplog.at_level(logging.ERROR):
            assert notify.mark_seen(alice, target) == 0
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", failing_update)
    assert "could not mark page of page" in caplog.text
    db.session.commit()  # the caller's own write still commits
    assert [c.body for c in page("handbook/onboarding").comments][-1:] == [
        "The caller's own write"]
    assert [e.category for e in entries_for("alice", read_at=None)] == ["watchedPage"]
