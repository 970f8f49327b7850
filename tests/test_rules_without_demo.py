"""The library's rules on a wiki that is not the demo: an in-memory host
(``tests/helpers/memory_host.py``), wikinotify's own tables on a real database (SQLite and
PostgreSQL) and its jobs run in this process on the real Redis. Who is told (never the
actor; only those who may read the page; watchers, mentions, reviewers, a reply's parent
author), how entries coalesce, preferences and mutes. The demo's end-to-end tests
(``test_pipeline.py`` and the others) stay the contract with a real wiki."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from tests.helpers.jobs import run_jobs
from tests.helpers.memory_host import SITE, MemoryHost, Rule, memory_app
from wikinotify import WikiNotify
from wikinotify.models import Event, Mute, Notification, Preference
from wikinotify.queue import kick_dispatch
from wikinotify.state import state

ONBOARDING, RUNBOOK = "1", "2"


@pytest.fixture
def host() -> MemoryHost:
    """alice, bob, carol and dave read everything; ops/ is Ops' alone (bob's); carol
    reviews the handbook."""
    wiki = MemoryHost()
    wiki.groups["everyone"] = {"read:pages", "read:comments"}
    for name in ("alice", "bob", "carol", "dave"):
        wiki.add_account(name, "everyone", *(["ops"] if name == "bob" else []),
                         *(["editors"] if name == "carol" else []))
    wiki.rules.append(Rule("everyone", "ops/", frozenset({"read:pages"}), deny=True))
    wiki.rules.append(Rule("ops", "ops/", frozenset({"read:pages"})))
    wiki.approval_rules["handbook/"] = {"editors"}
    wiki.add_page(ONBOARDING, "handbook/onboarding", "Onboarding")
    wiki.add_page(RUNBOOK, "ops/runbook", "Runbook")
    return wiki


@pytest.fixture
def ctx(host, database_url, redis_url, queue_name):
    app = memory_app(host, database_url, WIKINOTIFY_REDIS_URL=redis_url,
                     WIKINOTIFY_QUEUE=queue_name, WIKINOTIFY_MAIL_ENABLED=True,
                     MAIL_DEFAULT_SENDER="wiki@memory.example")
    with app.app_context():
        yield app
        session().remove()
        state().db.engine.dispose()


def session():
    return state().db.session


def emit(kind: str, page_id: str, by: str, variant: str, **fields) -> None:
    """What the wiki does where the action happens: emit in its transaction, commit."""
    snapshot = dict(state().host.pages([page_id])[page_id])
    WikiNotify.emit(kind, site_id=SITE.id, actor_id=by, page_id=page_id, snapshot=snapshot,
                    variant=variant, **fields)
    session().commit()


def edit(page_id: str, by: str, variant: str = "edited") -> None:
    emit("page:edit", page_id, by, variant)


def comment(host: MemoryHost, comment_id: str, by: str, text: str,
            parent_id: str | None = None) -> None:
    host.comment_authors[comment_id] = by
    emit("comment:new", ONBOARDING, by, "new", comment_id=comment_id, key=comment_id,
         parent_id=parent_id, text=text)


def entries_for(user_id: str, **where) -> list[Notification]:
    session().expire_all()
    query = sa.select(Notification).where(Notification.user_id == user_id)
    for column, value in where.items():
        query = query.where(getattr(Notification, column) == value)
    return list(session().scalars(query.order_by(Notification.id)))


def told(*user_ids: str) -> dict[str, list[str]]:
    return {u: [e.category for e in entries_for(u)] for u in user_ids}


def prefer(user_id: str, category: str, **channels: bool) -> None:
    for channel, enabled in channels.items():
        session().merge(Preference(user_id=user_id, category=category, channel=channel,
                                   enabled=enabled))
    session().commit()


# -- who is told ---------------------------------------------------------------------------


def test_watchers_are_told_and_the_actor_never(ctx, host):
    host.watch(ONBOARDING, "alice", "bob", "carol")
    edit(ONBOARDING, "alice")
    run_jobs(ctx)
    assert told("alice", "bob", "carol", "dave") == {
        "alice": [], "bob": ["watchedPage"], "carol": ["watchedPage"], "dave": []}
    [entry] = entries_for("bob")
    assert (entry.variant, entry.count, entry.actor_id) == ("edited", 1, "alice")
    assert entry.data["actor_name"] == "Alice"


def test_only_those_who_may_read_the_page_are_told_and_access_is_read_at_fan_out(ctx, host):
    host.watch(RUNBOOK, "bob", "carol")  # carol is not in Ops: a watch is not access
    edit(RUNBOOK, "alice")
    host.watch(RUNBOOK, "dave")
    host.change_account("dave", group_ids=frozenset({"everyone", "ops"}))  # joins Ops...
    run_jobs(ctx)  # ...before the fan-out runs: it reads the groups then
    assert told("bob", "carol", "dave") == {
        "bob": ["watchedPage"], "carol": [], "dave": ["watchedPage"]}


def test_inactive_system_and_guest_accounts_are_never_told_and_unverified_get_no_mail(
        ctx, host):
    host.watch(ONBOARDING, "alice", "carol", "dave")
    host.add_account("guest", "everyone", guest=True)
    host.add_account("robot", "everyone", system=True)
    host.watch(ONBOARDING, "guest", "robot")
    host.change_account("carol", active=False)
    host.change_account("dave", verified=False)
    edit(ONBOARDING, "bob")
    run_jobs(ctx)
    assert told("carol", "guest", "robot") == {"carol": [], "guest": [], "robot": []}
    [alice], [dave] = entries_for("alice"), entries_for("dave")
    assert (alice.in_app, alice.email_state) == (True, "pending")
    assert (dave.in_app, dave.email_state, dave.email_after) == (True, "none", None)


def test_mentions_tell_the_handles_written_and_an_edit_only_the_new_ones(ctx, host):
    comment(host, "c1", "bob", "Thanks @carol and @bob")  # bob mentions himself
    run_jobs(ctx)
    assert told("bob", "carol", "dave") == {"bob": [], "carol": ["mention"], "dave": []}
    emit("comment:edit", ONBOARDING, "bob", "edited", comment_id="c1",
         text="Thanks @carol and @dave", previous_text="Thanks @carol and @bob")
    run_jobs(ctx)
    assert told("carol", "dave") == {"carol": ["mention"], "dave": ["mention"]}
    assert [e.count for e in entries_for("carol")] == [1]


def test_a_reply_tells_the_parent_author_and_one_entry_each_by_priority(ctx, host):
    """alice watches the page, wrote the parent and is mentioned in the reply: one entry,
    the mention; with mentions off, the reply; with both off, the watched comment."""
    host.watch(ONBOARDING, "alice")
    comment(host, "c1", "alice", "Where are the laptops?")
    comment(host, "c2", "dave", "Ask @alice", parent_id="c1")
    run_jobs(ctx)
    assert told("alice") == {"alice": ["mention"]}
    prefer("alice", "mention", inApp=False, email=False)
    comment(host, "c3", "bob", "Again, @alice?", parent_id="c1")
    run_jobs(ctx)
    assert [e.category for e in entries_for("alice")][-1:] == ["commentReply"]
    prefer("alice", "commentReply", inApp=False, email=False)
    comment(host, "c4", "bob", "@alice! the laptops", parent_id="c1")
    run_jobs(ctx)
    assert [e.category for e in entries_for("alice")][-1:] == ["watchedPageComment"]


def test_reviewers_hear_of_a_suggestion_but_not_its_author(ctx, host):
    host.add_account("erin", "everyone", "editors")
    emit("submission:new", ONBOARDING, "erin", "new", submission_id="s1")
    emit("submission:update", ONBOARDING, "erin", "updated", submission_id="s1")
    run_jobs(ctx)
    assert told("carol", "erin", "alice") == {"carol": ["reviewRequested"], "erin": [],
                                              "alice": []}
    [entry] = entries_for("carol")
    assert (entry.count, entry.variant) == (2, "updated")


def test_opt_in_categories_tell_only_those_who_turned_them_on(ctx, host):
    prefer("carol", "pageCreated", inApp=True)
    emit("page:create", ONBOARDING, "bob", "created")
    run_jobs(ctx)
    assert told("alice", "carol") == {"alice": [], "carol": ["pageCreated"]}


# -- coalescing ----------------------------------------------------------------------------


def test_edits_coalesce_into_one_unread_entry_keeping_every_variant(ctx, host):
    host.watch(ONBOARDING, "alice")
    for variant in ("edited", "edited", "moved"):
        edit(ONBOARDING, "bob", variant)
    run_jobs(ctx)
    [entry] = entries_for("alice")
    assert (entry.count, entry.variant, entry.variants) == (3, "moved", ",edited,moved,")


def test_reading_frees_the_slot_and_a_replayed_event_changes_nothing(ctx, host):
    host.watch(ONBOARDING, "alice")
    edit(ONBOARDING, "bob")
    run_jobs(ctx)
    [first] = entries_for("alice")
    session().execute(sa.update(Event).values(processed_at=None, claimed_at=None))
    session().commit()
    kick_dispatch(ctx)
    run_jobs(ctx)  # a worker died after writing: the event is taken again
    [again] = entries_for("alice")
    assert (again.id, again.count, again.updated_at) == (first.id, 1, first.updated_at)
    again.read_at = datetime.now(UTC)
    session().commit()
    edit(ONBOARDING, "bob")
    run_jobs(ctx)
    read, unread = entries_for("alice")
    assert (read.id, read.count, unread.read_at, unread.count) == (first.id, 1, None, 1)


# -- preferences and mutes -----------------------------------------------------------------


def test_preferences_choose_the_channels_and_all_off_tells_nothing(ctx, host):
    host.watch(ONBOARDING, "alice", "carol", "dave")
    prefer("alice", "watchedPage", email=False)
    prefer("carol", "watchedPage", inApp=False)
    prefer("dave", "watchedPage", inApp=False, email=False)
    edit(ONBOARDING, "bob")
    run_jobs(ctx)
    [alice], [carol] = entries_for("alice"), entries_for("carol")
    assert (alice.in_app, alice.email_state) == (True, "none")
    assert (carol.in_app, carol.email_state) == (False, "pending")
    assert entries_for("dave") == []


def test_a_muted_page_or_person_tells_nothing(ctx, host):
    host.watch(ONBOARDING, "alice", "carol", "dave")
    session().add_all([Mute(user_id="alice", kind="page", target_id=ONBOARDING),
                       Mute(user_id="carol", kind="user", target_id="bob")])
    session().commit()
    edit(ONBOARDING, "bob")
    run_jobs(ctx)
    assert told("alice", "carol", "dave") == {"alice": [], "carol": [], "dave": ["watchedPage"]}
