"""From a wiki action to the inbox, through real RQ workers on a real Redis (docs/rules.md#emit,
docs/rules.md#claiming-events, docs/rules.md#the-outbox, docs/rules.md#corner-cases;
docs/rules.md#the-fan-out). Every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import gc
import time
import weakref
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from demo import wiki
from demo.extensions import notify
from demo.models import User, db, user_groups
from tests.helpers.jobs import enqueue_cron_jobs, run_jobs, run_worker
from tests.helpers.wiki import (
    all_entries,
    edit,
    entries_for,
    events,
    main_site,
    page,
    prefer,
    user,
    watch,
)
from wikinotify.instance_settings import set_site_enabled
from wikinotify.jobs.appctx import running
from wikinotify.models import Event
from wikinotify.pipeline import audience

pytestmark = pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True)


# -- who is told --------------------------------------------------------------------------


def test_the_actor_is_never_a_recipient(ctx):
    watch("handbook/onboarding", "bob")  # alice watches it too, from the seed
    edit("handbook/onboarding", "alice", "Alice's own edit")
    run_worker(ctx, forking=True)  # the plain `rq worker` of the docs
    assert entries_for("alice") == []
    [entry] = entries_for("bob")
    assert (entry.category, entry.variant, entry.count) == ("watchedPage", "edited", 1)
    assert entry.actor_id == str(user("alice").id)
    assert entry.data["actor_name"] == "Alice Liddell"


def test_unverified_accounts_get_in_app_entries_but_no_email(ctx):
    watch("handbook/onboarding", "dave")
    edit("handbook/onboarding", "bob", "An edit")
    run_jobs(ctx)
    [dave] = entries_for("dave")
    [alice] = entries_for("alice")
    assert (dave.in_app, dave.email_state, dave.email_after) == (True, "none", None)
    assert (alice.in_app, alice.email_state) == (True, "pending")
    delay = alice.email_after - alice.created_at
    assert timedelta(seconds=179) < delay < timedelta(seconds=181)


def test_inactive_and_system_accounts_are_skipped(ctx):
    watch("handbook/onboarding", "carol")
    watch("handbook/onboarding", "dave")
    user("carol").active = False
    user("dave").is_system = True
    db.session.commit()
    edit("handbook/onboarding", "bob", "An edit")
    run_jobs(ctx)
    assert entries_for("carol") == [] and entries_for("dave") == []
    assert len(entries_for("alice")) == 1


def test_access_is_checked_when_the_fan_out_runs(ctx):
    """bob leaves Ops between the edit and the fan-out: he is not told."""
    watch("ops/runbook", "bob")
    edit("ops/runbook", "alice", "Rotate the keys")
    ops = db.session.scalar(sa.text("SELECT id FROM demo_groups WHERE name = 'Ops'"))
    db.session.execute(
        sa.delete(user_groups).where(
            user_groups.c.user_id == user("bob").id, user_groups.c.group_id == ops
        )
    )
    db.session.commit()
    run_jobs(ctx)
    assert entries_for("bob") == []


def test_a_restricted_page_never_reaches_someone_without_access(ctx):
    watch("ops/runbook", "bob")
    watch("ops/runbook", "carol")  # carol is not in Ops: the watch row alone is not access
    edit("ops/runbook", "alice", "Rotate the keys")
    run_jobs(ctx)
    assert entries_for("carol") == []
    assert len(entries_for("bob")) == 1


def test_one_entry_per_person_by_priority_after_preferences(ctx):
    """alice watches the page, wrote the parent comment and is mentioned in the reply."""
    onboarding = page("handbook/onboarding")
    parent = wiki.add_comment(onboarding, user("alice"), "Where are the laptops?")
    run_jobs(ctx)
    wiki.add_comment(onboarding, user("bob"), "Ask @alice, she knows", parent_id=parent.id)
    run_jobs(ctx)
    assert [e.category for e in entries_for("alice")] == ["mention"]

    prefer("alice", "mention", inApp=False, email=False)
    wiki.add_comment(onboarding, user("bob"), "Again, @alice?", parent_id=parent.id)
    run_jobs(ctx)
    assert [e.category for e in entries_for("alice", read_at=None)][-1:] == ["commentReply"]

    prefer("alice", "commentReply", inApp=False, email=False)
    wiki.add_comment(onboarding, user("bob"), "@alice! the laptops", parent_id=parent.id)
    run_jobs(ctx)
    categories = [e.category for e in entries_for("alice")]
    assert categories.count("watchedPageComment") == 1
    assert categories.count("mention") == 1  # the first one, before she turned them off


def test_replies_go_to_the_parent_author_only(ctx):
    onboarding = page("handbook/onboarding")
    parent = wiki.add_comment(onboarding, user("carol"), "Laptops?")
    wiki.add_comment(onboarding, user("dave"), "Me too", parent_id=parent.id)
    run_jobs(ctx)
    wiki.add_comment(onboarding, user("bob"), "Ordered them", parent_id=parent.id)
    run_jobs(ctx)
    assert [e.category for e in entries_for("carol")] == ["commentReply"]
    assert entries_for("dave") == []  # in the thread, but neither its root's author nor a watcher


def test_a_comment_edited_to_add_a_mention_tells_only_the_new_handles(ctx):
    onboarding = page("handbook/onboarding")
    comment = wiki.add_comment(onboarding, user("bob"), "Thanks @carol")
    run_jobs(ctx)
    assert [e.category for e in entries_for("carol")] == ["mention"]
    wiki.edit_comment(comment, user("bob"), "Thanks @carol and @admin")
    run_jobs(ctx)
    assert [e.category for e in entries_for("admin")] == ["mention"]
    assert [e.count for e in entries_for("carol")] == [1]


def test_reviewers_hear_of_suggestions_and_an_update_bumps_the_entry(ctx):
    onboarding = page("handbook/onboarding")
    wiki.suggest(onboarding, user("bob"), "A better onboarding")
    run_jobs(ctx)
    wiki.suggest(onboarding, user("bob"), "An even better onboarding")
    run_jobs(ctx)
    for reviewer in ("carol", "admin"):
        [entry] = entries_for(reviewer)
        assert (entry.category, entry.count, entry.variant) == ("reviewRequested", 2, "updated")
    assert entries_for("alice") == []  # a watcher, not a reviewer


# -- coalescing and idempotency -------------------------------------------------------------


def test_forty_edits_coalesce_into_one_entry_counting_forty(ctx):
    for n in range(40):
        edit("handbook/onboarding", "bob", f"Edit number {n}")
    run_jobs(ctx)
    [entry] = entries_for("alice")
    assert (entry.count, entry.variants, entry.email_state) == (40, ",edited,", "pending")


def test_a_coalesced_entry_remembers_every_variant(ctx):
    edit("handbook/onboarding", "bob", "One")
    edit("handbook/onboarding", "bob", "Two")
    wiki.move_page(page("handbook/onboarding"), user("bob"), "handbook/welcome")
    run_jobs(ctx)
    [entry] = entries_for("alice")
    assert (entry.count, entry.variant, entry.variants) == (3, "moved", ",edited,moved,")
    assert entry.data["path"] == "handbook/welcome"


def test_a_replayed_event_changes_nothing(ctx):
    edit("handbook/onboarding", "bob", "Once")
    run_jobs(ctx)
    [before] = entries_for("alice")
    # A worker died after writing but before marking the event done: it is taken again.
    db.session.execute(sa.update(Event).values(processed_at=None, claimed_at=None))
    db.session.commit()
    notify_kick(ctx)
    run_jobs(ctx)
    [after] = entries_for("alice")
    assert (after.id, after.count, after.updated_at) == (before.id, 1, before.updated_at)
    assert all(e.processed_at is not None for e in events())


def notify_kick(app) -> None:
    from wikinotify.queue import kick_dispatch

    kick_dispatch(app)


def test_reading_frees_the_slot(ctx):
    edit("handbook/onboarding", "bob", "One")
    run_jobs(ctx)
    [first] = entries_for("alice")
    first.read_at = datetime.now(UTC)
    db.session.commit()
    edit("handbook/onboarding", "bob", "Two")
    run_jobs(ctx)
    read, unread = entries_for("alice")
    assert read.id == first.id and read.count == 1
    assert unread.read_at is None and unread.count == 1


# -- emit --------------------------------------------------------------------------------


def test_a_rolled_back_action_leaves_no_event(ctx):
    target = page("handbook/onboarding")
    notify.emit("page:edit", site_id=target.site_id, actor_id=user("bob").id,
                page_id=target.id, snapshot={"title": "x", "path": target.path},
                variant="edited")
    db.session.rollback()
    assert events() == []
    run_jobs(ctx)
    assert all_entries() == []


def test_emit_writes_nothing_when_nobody_listens_or_the_kind_is_unknown(ctx):
    target = page("handbook/onboarding")
    with notify.importing():
        notify.emit("page:create", site_id=target.site_id, page_id=target.id)
    notify.emit("page:exploded", site_id=target.site_id, page_id=target.id)
    db.session.commit()
    assert events() == []


# Nothing listens on port 1: every Redis call fails at once.
@pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True, WIKINOTIFY_REDIS_URL="redis://127.0.0.1:1/0")
class TestRedisDown:
    def test_emit_does_not_raise_and_the_cron_delivers_later(self, ctx, redis_url, caplog):
        edit("handbook/onboarding", "bob", "While Redis is down")
        assert len(events()) == 1
        assert "could not kick dispatch" in caplog.text
        # Redis is back: the every-minute cron entry enqueues the dispatch job.
        ctx.config["WIKINOTIFY_REDIS_URL"] = redis_url
        enqueue_cron_jobs(ctx)
        run_jobs(ctx)
        assert len(entries_for("alice")) == 1


# -- origins, deletion, the site switch -----------------------------------------------------


def test_deletion_tells_the_watchers_captured_before_the_page_went(ctx):
    prefer("carol", "pageDeleted", inApp=True)
    prefer("bob", "pageDeleted", inApp=True)
    watch("handbook/onboarding", "bob")  # bob watches and opted in: one entry
    # (docs/rules.md#one-entry-per-person-per-event)
    wiki.delete_page(page("handbook/onboarding"), user("admin"))
    [event] = events()
    assert sorted(event.recipients) == sorted([str(user("alice").id), str(user("bob").id)])
    run_jobs(ctx)
    [alice] = entries_for("alice")
    assert (alice.category, alice.variant, alice.data["path"]) == (
        "watchedPage", "deleted", "handbook/onboarding")
    assert [e.category for e in entries_for("bob")] == ["watchedPage"]
    assert [e.category for e in entries_for("carol")] == ["pageDeleted"]


def test_deletion_is_checked_against_the_page_as_it_was(ctx):
    prefer("carol", "pageDeleted", inApp=True)  # not in Ops
    prefer("bob", "pageDeleted", inApp=True)  # in Ops
    wiki.delete_page(page("ops/runbook"), user("alice"))
    run_jobs(ctx)
    assert entries_for("carol") == []
    assert [e.category for e in entries_for("bob")] == ["pageDeleted"]


def test_a_delete_event_for_a_page_still_there_is_dropped(ctx):
    target = page("handbook/onboarding")
    notify.emit("page:delete", site_id=target.site_id, actor_id=user("bob").id,
                page_id=target.id, snapshot=wiki.page_snapshot(target), variant="deleted")
    db.session.commit()  # ...and the delete itself then failed
    run_jobs(ctx)
    assert all_entries() == []
    assert events()[0].processed_at is not None


def test_bulk_deletes_tell_watchers_but_not_the_opted_in(ctx):
    prefer("carol", "pageDeleted", inApp=True)
    wiki.delete_folder(main_site(), user("admin"), "handbook")
    assert {e.origin for e in events()} == {"bulk"}
    run_jobs(ctx)
    assert [(e.category, e.variant) for e in entries_for("alice")] == [("watchedPage", "deleted")]
    assert entries_for("carol") == []


def test_imports_tell_watchers_but_do_not_announce_new_pages(ctx):
    prefer("carol", "pageCreated", inApp=True)
    records = [
        {"path": "handbook/onboarding", "title": "Onboarding", "content": "Synced from git"},
        {"path": "handbook/imported", "title": "Imported", "content": "New from git"},
    ]
    wiki.import_pages(main_site(), user("admin"), records)
    assert {e.origin for e in events()} == {"import"}
    run_jobs(ctx)
    assert [e.category for e in entries_for("alice")] == ["watchedPage"]
    assert entries_for("carol") == []


def test_a_page_created_as_a_draft_is_announced_once_saying_so(ctx):
    prefer("carol", "pageCreated", inApp=True)
    wiki.save_page(main_site(), user("bob"), "handbook/draft", "Draft", "Soon",
                   publishing=wiki.Publishing("unpublished", None, None))
    run_jobs(ctx)
    [entry] = entries_for("carol")
    assert (entry.category, entry.data["publish_state"]) == ("pageCreated", "unpublished")
    wiki.save_page(main_site(), user("bob"), "handbook/draft", "Draft", "Soon",
                   publishing=wiki.Publishing("published", None, None))
    run_jobs(ctx)
    assert [e.category for e in entries_for("carol")] == ["pageCreated"]


def test_the_site_switch_stops_emits_and_keeps_entries(ctx):
    edit("handbook/onboarding", "bob", "Before")
    run_jobs(ctx)
    set_site_enabled(db.session, str(main_site().id), False)
    db.session.commit()
    edit("handbook/onboarding", "bob", "While off")
    assert len(events()) == 1
    run_jobs(ctx)
    [entry] = entries_for("alice")
    assert entry.count == 1


def test_a_deleted_account_takes_its_entries_along(ctx):
    edit("handbook/onboarding", "bob", "Hello")
    run_jobs(ctx)
    alice = user("alice")
    notify.forget_user(alice.id)
    db.session.commit()
    assert all_entries() == []


# -- long fan-outs and many workers ---------------------------------------------------------


def add_watchers(path: str, count: int) -> None:
    """``count`` extra verified accounts in Everyone, all watching ``path``."""
    target = page(path)
    everyone = db.session.scalar(sa.text("SELECT id FROM demo_groups WHERE name = 'Everyone'"))
    first = db.session.scalar(sa.select(sa.func.max(User.id))) + 1
    db.session.execute(sa.insert(User), [
        {"id": first + n, "username": f"w{first + n}", "email": f"w{first + n}@example.com",
         "display_name": f"Watcher {n}", "password_hash": "!", "verified": True, "active": True,
         "is_system": False, "is_admin": False}
        for n in range(count)
    ])
    ids = range(first, first + count)
    db.session.execute(sa.insert(user_groups), [{"user_id": i, "group_id": everyone} for i in ids])
    db.session.execute(sa.text(
        "INSERT INTO demo_watches (page_id, user_id, site_id) VALUES (:p, :u, :s)"),
        [{"p": target.id, "u": i, "s": target.site_id} for i in ids])
    db.session.commit()


# A budget so small that every run stops after its first batch.
@pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True, WIKINOTIFY_DISPATCH_BUDGET=0.001)
class TestTimeBudget:
    @pytest.mark.slow
    def test_a_fan_out_out_of_time_finishes_from_its_cursor(self, ctx):
        extra = 2 * audience.CANDIDATE_BATCH + 500
        add_watchers("handbook/onboarding", extra)
        edit("handbook/onboarding", "bob", "To everyone")
        run_jobs(ctx)
        rows = all_entries()
        assert len(rows) == extra + 1  # alice and the others
        assert len({r.user_id for r in rows}) == extra + 1
        assert all(r.count == 1 for r in rows)
        [event] = events()
        assert event.processed_at is not None and event.cursor is None
        assert finished_dispatch_runs(ctx) >= 3  # a batch, a batch, the rest


def finished_dispatch_runs(app) -> int:
    from rq import Queue
    from rq.registry import FinishedJobRegistry

    from wikinotify.queue import connection

    queue = Queue(app.config["WIKINOTIFY_QUEUE"], connection=connection(app))
    return len(FinishedJobRegistry(queue=queue))


@pytest.mark.slow
def test_two_workers_drain_one_outbox_with_no_duplicate_and_no_loss(ctx, database_url):
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite allows one writer at a time; concurrent draining is PostgreSQL's")
    import concurrent.futures

    from wikinotify.queue import enqueue

    site, bob = main_site(), user("bob")
    paths = [f"load/p{n}" for n in range(120)]
    for path in paths:
        wiki.save_page(site, user("admin"), path, path, "v1")
    for path in paths:
        watch(path, "alice")
        watch(path, "carol")
    db.session.execute(sa.delete(Event))
    db.session.commit()
    for path in paths:
        wiki.save_page(site, bob, path, path, "v2")
    for _ in range(6):
        enqueue(ctx, "dispatch")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = pool.map(lambda _: run_worker(ctx, forking=True), range(2))
        outputs = [r.stdout + r.stderr for r in runs]
    rows = all_entries()
    assert len(rows) == 240
    assert {(r.user_id, r.page_id) for r in rows} == {
        (str(user(n).id), str(page(p).id)) for n in ("alice", "carol") for p in paths
    }
    assert all(r.count == 1 for r in rows)
    done = events()
    assert len(done) == 120 and all(e.processed_at is not None for e in done)
    for output in outputs:  # each worker process ran dispatch jobs of its own
        assert "wikinotify.jobs.dispatch()" in output, output[-2000:]


def test_a_claim_takes_at_most_its_batch(ctx):
    from wikinotify.pipeline.claims import claim_events

    target = page("handbook/onboarding")
    for _ in range(120):
        notify.emit("page:edit", site_id=target.site_id, actor_id=user("bob").id,
                    page_id=target.id, snapshot=wiki.page_snapshot(target), variant="edited")
    db.session.commit()
    first = claim_events(db.session, me="one", stale_after=timedelta(minutes=11))
    second = claim_events(db.session, me="two", stale_after=timedelta(minutes=11))
    assert len(first) == 50 and len(second) == 50
    assert not set(first) & set(second)
    assert first == sorted(first) and max(first) < min(second)  # oldest first
    # An abandoned claim is taken again once it is older than the timeout. SQLite's clock
    # counts whole seconds: a claim made in this second is not yet older than "now".
    time.sleep(1.1)
    stale = claim_events(db.session, me="three", stale_after=timedelta(0), batch=200)
    assert len(stale) == 120


def test_no_sql_reaches_an_entry_by_id_alone(ctx):
    """Pinned where it matters: mark-read and dismiss for someone else's entry do nothing."""
    from wikinotify import inbox

    edit("handbook/onboarding", "bob", "Hello")
    run_jobs(ctx)
    [entry] = entries_for("alice")
    bob = str(user("bob").id)
    assert inbox.mark_read(db.session, bob, entry.id) is False
    assert inbox.dismiss(db.session, bob, entry.id) is False
    db.session.commit()
    [still] = entries_for("alice")
    assert still.read_at is None


def test_publishing_changes_are_variants_of_an_edit(ctx):
    """Setting a publish window is `scheduled`; the moment it takes effect is silent
    (docs/rules.md#corner-cases): no job runs then, so there is nothing to emit."""
    later = datetime.now(UTC) + timedelta(days=1)
    site, bob = main_site(), user("bob")
    wiki.save_page(site, bob, "handbook/onboarding", "Onboarding", "Same",
                   publishing=wiki.Publishing("published", later, None))
    wiki.save_page(site, bob, "handbook/onboarding", "Onboarding", "Same",
                   publishing=wiki.Publishing("unpublished", later, None))
    assert [e.data["variant"] for e in events()] == ["scheduled", "unpublished"]
    run_jobs(ctx)
    [entry] = entries_for("alice")
    assert entry.variants == ",scheduled,unpublished,"


def test_guest_accounts_are_never_recipients():
    from wikinotify.host import UserFacts

    guest = UserFacts(id="0", display_name="Guest", email="g@example.com", guest=True)
    assert not guest.can_receive and not guest.can_receive_email


# -- the job's frame --------------------------------------------------------------------------


class _Cyclic:
    def __init__(self) -> None:
        self.me = self


def test_a_job_leaves_what_was_there_before_it_to_collections_outside_it(app):
    before = _Cyclic()
    with running("a test's job"):
        # What the process held before the job is frozen; what the job makes is not, and
        # its cyclic garbage is still collected.
        assert gc.get_freeze_count() > 0
        made = _Cyclic()
        gone = weakref.ref(made)
        del made
        gc.collect()
        assert gone() is None
        assert gc.is_tracked(before)
    assert gc.get_freeze_count() == 0  # given back to the collector
    was = weakref.ref(before)
    del before
    gc.collect()
    assert was() is None
