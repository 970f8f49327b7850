"""The fan-out's write path (docs/benchmarks.md#the-fan-out): batches of thousands, a batch's
readers one JSON value merged by one statement, ids sent as one value, a transaction-local
asynchronous commit. Every test runs on SQLite and on PostgreSQL unless it says not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from demo.models import Group, User, Watch, db, user_groups
from tests.helpers.database import entries_refused_for, statements_sent
from tests.helpers.jobs import run_jobs, tells_waiting_for_the_mark
from tests.helpers.wiki import (
    add_users,
    add_watches,
    counts_by_user,
    emit_edit,
    events,
    main_site,
    page,
    user,
)
from wikinotify import dialects, queue
from wikinotify.models import Mute, Notification, Preference
from wikinotify.pipeline import audience
from wikinotify.pipeline.events import moved
from wikinotify.pipeline.upsert import COUNTS, Person, upsert
from wikinotify.preferences import mutes
from wikinotify.state import state

#: More than one candidate batch, so the cursor moves between batches on the way.
AUDIENCE = audience.CANDIDATE_BATCH + 700


pytestmark = pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True)


def test_batches_of_thousands_coalesce_count_variants_and_respect_mutes(ctx):
    target = page("handbook/onboarding")
    readers = add_users(AUDIENCE)
    add_watches(target, readers)
    muter, quiet = readers[1], readers[audience.CANDIDATE_BATCH + 1]  # one in each batch
    db.session.add(Mute(user_id=muter, kind="page", target_id=str(target.id)))
    db.session.add_all(Preference(user_id=quiet, category="watchedPage", channel=channel,
                                  enabled=False) for channel in ("inApp", "email"))
    db.session.commit()
    bob = str(user("bob").id)
    emit_edit(target, bob)
    emit_edit(target, bob)
    emit_edit(target, bob, variant="moved")
    db.session.commit()
    run_jobs(ctx)

    told = set(readers) - {muter, quiet}
    found = counts_by_user(target.id)
    assert {r: found[r] for r in told} == {r: [(3, True)] for r in told}
    assert muter not in found and quiet not in found
    rows = db.session.execute(
        sa.select(Notification.variants, Notification.data, Notification.email_state,
                  Notification.email_after)
        .where(Notification.page_id == str(target.id), Notification.user_id.in_(told)))
    shapes = {(v, d["variant_counts"]["edited"], d["variant_counts"]["moved"], s, a is not None)
              for v, d, s, a in rows}
    assert shapes == {(",edited,moved,", 2, 1, "pending", True)}


def shared_values(event_id: int, page_id: str) -> dict:
    """What every row of one event shares, as wikinotify.pipeline.rows.entry_rows makes it."""
    now = datetime.now(UTC)
    return {
        "site_id": str(main_site().id), "category": "watchedPage", "variant": "edited",
        "variants": ",edited,", "group_key": f"watchedPage:{page_id}", "page_id": page_id,
        "comment_id": None, "actor_id": "1",
        "data": {"title": "T", "path": "p", COUNTS: {"edited": 1}},
        "count": 1, "last_event_id": event_id, "email_attempts": 0,
        "created_at": now, "updated_at": now,
    }


def people(user_ids: list[str]) -> list[Person]:
    due = datetime.now(UTC) + timedelta(minutes=5)
    return [(u, True, "pending", due) for u in user_ids]


def entries(page_id: str) -> dict[str, tuple]:
    db.session.expire_all()
    rows = db.session.execute(
        sa.select(Notification.user_id, Notification.count, Notification.last_event_id,
                  Notification.updated_at, Notification.data)
        .where(Notification.page_id == page_id))
    return {u: (c, e, t, d[COUNTS]) for u, c, e, t, d in rows}


def test_a_batch_written_again_by_the_same_event_changes_nothing(ctx):
    readers = [f"r{n}" for n in range(1_200)]
    upsert(db.session, shared_values(7, "p1"), people(readers))
    db.session.commit()
    first = entries("p1")
    assert len(first) == 1_200 and {c for c, *_ in first.values()} == {1}
    # The replay of that batch (its commit lost, its worker dead): the same event again.
    upsert(db.session, shared_values(7, "p1"), people(readers))
    db.session.commit()
    assert entries("p1") == first
    # A newer event coalesces into every one of them, in a single transaction with a
    # second batch: each upsert cleans up after itself.
    upsert(db.session, shared_values(8, "p1"), people(readers[:600]))
    upsert(db.session, shared_values(8, "p1"), people(readers[600:]))
    db.session.commit()
    assert {(c, e, str(n)) for c, e, _, n in entries("p1").values()} == {
        (2, 8, str({"edited": 2}))}


def test_a_failed_batch_leaves_nothing_and_the_next_one_writes(ctx):
    readers = [f"r{n}" for n in range(50)]
    with pytest.raises(sa.exc.StatementError):
        # Naive time: refused before anything is written (UTCDateTime).
        bad = shared_values(9, "p2") | {"updated_at": datetime.now()}  # noqa: DTZ005
        upsert(db.session, bad, people(readers))
    db.session.rollback()
    assert entries("p2") == {}
    upsert(db.session, shared_values(9, "p2"), people(readers))
    db.session.commit()
    assert len(entries("p2")) == 50


def test_every_recipient_s_own_columns_arrive_whatever_her_id_holds(ctx):
    odd = ["a,b", 'quote"d', "back\\slash", "{braces}", "naïve 名前", "NULL", " spaced "]
    due = datetime(2026, 12, 5, 3, 4, 5, 678901, tzinfo=UTC)
    # Rows of several kinds in one batch, interleaved: each keeps its own columns.
    kinds = [(True, "pending", due), (False, "pending", due + timedelta(hours=1)),
             (True, "none", None)]
    batch: list[Person] = [(u, *kinds[n % len(kinds)]) for n, u in enumerate(odd)]
    upsert(db.session, shared_values(12, "p5"), batch)
    db.session.commit()
    rows = db.session.execute(
        sa.select(Notification.user_id, Notification.in_app, Notification.email_state,
                  Notification.email_after).where(Notification.page_id == "p5"))
    assert sorted(rows, key=lambda r: r[0]) == sorted(batch, key=lambda r: r[0])


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_only_the_fan_out_s_own_transaction_commits_asynchronously(ctx):
    def setting() -> str:
        return db.session.scalar(sa.text("SHOW synchronous_commit"))

    assert setting() == "on"
    upsert(db.session, shared_values(10, "p3"), people(["r1"]))
    assert setting() == "off"
    db.session.commit()
    assert setting() == "on"  # LOCAL: the connection goes back to the pool as it came


def test_ids_sent_as_one_value_match_whatever_they_hold(ctx):
    odd = ["a,b", 'quote"d', "back\\slash", "{braces}", "naïve 名前", "NULL", " spaced "]
    db.session.add_all(Mute(user_id=u, kind="user", target_id="actor") for u in odd)
    db.session.commit()
    assert mutes.muters_among(db.session, [*odd, "nobody"], None, "actor") == set(odd)
    query = sa.select(Mute.user_id).where(dialects.among(db.session, Mute.user_id, odd[:3]))
    assert set(db.session.scalars(query)) == set(odd[:3])
    assert list(db.session.scalars(
        sa.select(Mute.user_id).where(dialects.among(db.session, Mute.user_id, [])))) == []


def test_ids_named_twice_match_their_rows_once(ctx):
    db.session.add_all(Mute(user_id=u, kind="user", target_id=t)
                       for u in ("a", "b") for t in ("x", "y"))
    db.session.commit()
    query = sa.select(Mute.user_id, Mute.target_id).where(
        dialects.among(db.session, Mute.user_id, ["a", "b", "a", "a"]), Mute.target_id == "x")
    assert sorted(db.session.execute(query).all()) == [("a", "x"), ("b", "x")]
    count = sa.select(sa.func.count()).select_from(Mute).where(
        dialects.among(db.session, Mute.user_id, ["b", "b"]))
    assert db.session.scalar(count) == 2


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_sqlite_joins_the_ids_instead_of_indexing_them_first(ctx):
    """docs/benchmarks.md#sqlite-the-embedded-default: IN (SELECT … json_each) copied a
    batch's ids into a temporary index before the first lookup; a join reads them once."""
    query = sa.select(Mute.user_id).where(dialects.among(db.session, Mute.user_id, ["a", "b"]))
    compiled = query.compile(db.engine)
    plan = " / ".join(row[-1] for row in db.session.connection().exec_driver_sql(
        f"EXPLAIN QUERY PLAN {compiled}", tuple(compiled.params[k] for k in compiled.positiontup)))
    assert "LIST SUBQUERY" not in plan and "VIRTUAL TABLE" in plan, plan


def test_the_demo_host_reads_each_account_with_all_its_groups_in_one_query(ctx):
    alice, bob = str(user("alice").id), str(user("bob").id)
    editors = Group(name="Editors of the bench", permissions=[])
    db.session.add(editors)
    db.session.flush()
    db.session.execute(sa.insert(user_groups).values(user_id=int(bob), group_id=editors.id))
    loner = add_users(1)[0]
    db.session.execute(sa.delete(user_groups).where(user_groups.c.user_id == int(loner)))
    db.session.commit()
    before = {str(g) for g in db.session.scalars(
        sa.select(user_groups.c.group_id).where(user_groups.c.user_id == int(bob)))}
    with statements_sent(db.engine) as statements:
        facts = state(ctx).host.users([alice, bob, loner, "999999", "not-a-number"])
    assert set(facts) == {alice, bob, loner}
    assert facts[bob].group_ids == frozenset(before) and str(editors.id) in before
    assert facts[loner].group_ids == frozenset()
    assert facts[alice].display_name and facts[alice].email
    assert len(statements) == 1


def test_which_accounts_are_active_is_one_query_of_the_accounts_rows_alone(ctx):
    """What every open stream's check asks, every 25 s (``Host.active_users``): the same
    answer as the accounts' facts, without reading their groups
    (docs/benchmarks.md#session-16-2026-12-05-the-checks-read)."""
    accounts = add_users(30)
    gone = accounts[:3]
    db.session.execute(sa.update(User).where(User.id.in_(map(int, gone))).values(active=False))
    db.session.commit()
    asked = [*accounts, "999999", "not-a-number", str(2**40)]
    with statements_sent(db.engine) as statements:
        active = state(ctx).host.active_users(asked)
    facts = state(ctx).host.users(asked)
    assert active == {one for one, said in facts.items() if said.active}
    assert active == set(accounts) - set(gone)
    assert len(statements) == 1 and user_groups.name not in statements[0][0]


# -- the batches' sizes -------------------------------------------------------------------------


@pytest.mark.app_config(WIKINOTIFY_FANOUT_RANGE_SIZE=0)  # no split, so no ids read ahead
def test_a_walk_reads_its_first_batch_then_batches_twice_as_large(ctx, monkeypatch):
    monkeypatch.setattr(audience, "CANDIDATE_BATCH", 10)
    target = page("handbook/onboarding")
    add_watches(target, add_users(44))  # with alice: 45 watchers
    host = state().host
    limits: list[int] = []
    original = host.page_watchers

    def page_watchers(page_id, *, after, limit):
        limits.append(limit)
        return original(page_id, after=after, limit=limit)

    monkeypatch.setattr(host, "page_watchers", page_watchers)
    emit_edit(target, str(user("bob").id))
    db.session.commit()
    run_jobs(ctx)
    assert limits == [10, 20, 20]  # 10 + 20 + 15: the short batch is the last
    watchers = db.session.scalars(sa.select(sa.cast(Watch.user_id, sa.String))
                                  .where(Watch.page_id == target.id))
    assert counts_by_user(target.id) == {w: [(1, True)] for w in watchers}


@pytest.mark.app_config(WIKINOTIFY_FANOUT_RANGE_SIZE=0)  # no split: one run, two batches
def test_an_event_is_marked_processed_when_its_last_batch_commits_not_after_its_tell(
    ctx, monkeypatch
):
    """Telling the open pages follows each batch's commit on the teller's thread; the event
    is done once its last batch has committed, so its mark does not wait for that tell
    (docs/rules.md#writing-entries). Here the last batch's tell waits for the mark: with
    the mark after the tell, neither would come until the tell gave up."""
    monkeypatch.setattr(audience, "CANDIDATE_BATCH", 10)  # batches of 10, then 20
    target = page("handbook/onboarding")
    add_watches(target, add_users(24))  # with alice: 25 watchers, so two batches
    last = max(db.session.scalars(
        sa.select(sa.cast(Watch.user_id, sa.String)).where(Watch.page_id == target.id)), key=int)
    marked_while_telling = tells_waiting_for_the_mark(monkeypatch, last)
    emit_edit(target, str(user("bob").id))
    db.session.commit()
    run_jobs(ctx)
    [event] = events()
    assert event.processed_at is not None
    assert marked_while_telling.is_set(), "the mark waited for the last batch's tell"
    assert len(counts_by_user(target.id)) == 25


def test_a_processed_event_s_place_is_never_moved_again(ctx):
    """A run whose lease lapsed while another finished the event goes on writing its
    batches (their entries change nothing, docs/rules.md#coalescing-is-idempotency); the
    place each batch stores must not stay on the event the other run marked processed."""
    target = page("handbook/onboarding")
    add_watches(target, add_users(2))
    emit_edit(target, str(user("bob").id))
    db.session.commit()
    run_jobs(ctx)
    [event] = events()
    assert event.processed_at is not None and event.cursor is None
    db.session.execute(moved(event, state().registry["watchedPage"], "123"))
    db.session.commit()
    [event] = events()
    assert event.cursor is None


# -- a batch the database refuses -------------------------------------------------------------

def test_a_batch_the_database_refuses_fails_the_event_and_its_retry_resumes_after_it(
    ctx, monkeypatch
):
    """On PostgreSQL the refused batch is written by the writer thread while the next is
    decided (wikinotify.pipeline.batch_writer); on SQLite in the run's own session. Either way the
    batches before it stay written, none after it is, and the retry writes each once."""
    monkeypatch.setattr(audience, "CANDIDATE_BATCH", 100)
    target = page("handbook/onboarding")
    add_watches(target, add_users(350))
    watchers = sorted(db.session.scalars(
        sa.select(sa.cast(Watch.user_id, sa.String)).where(Watch.page_id == target.id)), key=int)
    with entries_refused_for(watchers[150]):  # in the second batch
        emit_edit(target, str(user("bob").id))
        db.session.commit()
        run_jobs(ctx)
        [event] = events()
        assert event.processed_at is None and event.attempts == 1
        assert "refused by the test" in event.error
        assert event.cursor == {"category": "watchedPage", "after": watchers[99]}
        assert set(counts_by_user(target.id)) == set(watchers[:100])
    event.retry_after = None  # as an administrator's retry
    db.session.commit()
    queue.enqueue(ctx, "dispatch")
    run_jobs(ctx)
    assert counts_by_user(target.id) == {w: [(1, True)] for w in watchers}
    [event] = events()
    assert event.processed_at is not None and event.cursor is None


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_an_id_the_database_refuses_fails_its_batch_and_the_next_one_writes(ctx):
    """A NUL is a character PostgreSQL's text refuses: the batch's one statement fails as
    any statement does, which the run knows how to count."""
    with pytest.raises(sa.exc.DBAPIError, match="u0000") as raised:
        upsert(db.session, shared_values(11, "p4"), people(["r1", "nul\x00here"]))
    assert not raised.value.connection_invalidated
    db.session.rollback()
    upsert(db.session, shared_values(11, "p4"), people(["r1"]))
    db.session.commit()
    assert list(entries("p4")) == ["r1"]
