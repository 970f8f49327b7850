"""The fan-out under faults (docs/operating.md#failures-and-dead-letters), on PostgreSQL with real
``rq worker`` processes: a worker killed mid-event, its database connections cut, four workers at
once; and a property test of the coalescing rules (docs/rules.md#coalescing-is-idempotency) through
the real fan-out.

Each scenario asserts the exact end state: every recipient has exactly one entry (or,
where entries were read meanwhile, exactly one unread) with the exact count, and nothing
is left claimed or unprocessed.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from demo import wiki
from demo.models import Watch, db
from tests.helpers.database import named_database_url, terminate_connections
from tests.helpers.jobs import (
    STALE_SECONDS,
    finish,
    start_worker,
    stop_workers,
    wait_for,
    worker_env,
)
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
from wikinotify import queue
from wikinotify.categories import FanoutContext
from wikinotify.jobs.dispatch import STALE_CLAIM
from wikinotify.models import Event, Notification, Preference
from wikinotify.pipeline.events import dispatch
from wikinotify.state import state

pytestmark = [
    pytest.mark.parametrize("database_url", ["postgresql"], indirect=True),
    pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=False,
                           WIKINOTIFY_STALE_CLAIM_SECONDS=STALE_SECONDS),
]


# -- the world -----------------------------------------------------------------------------


def entry_total(page_id) -> int:
    return db.session.scalar(sa.select(sa.func.count()).select_from(Notification)
                             .where(Notification.page_id == str(page_id)))


def assert_outbox_drained() -> None:
    """Every event processed, none claimed, none failed, no cursor left."""
    left = [(e.id, e.claimed_by, e.cursor, e.error) for e in events()
             if e.processed_at is None or e.cursor or e.failed_at or e.attempts]
    assert left == []


# -- workers -------------------------------------------------------------------------------


def after_the_stale_threshold() -> None:
    time.sleep(STALE_SECONDS + 0.5)


# -- kill -9 in the middle of one event ------------------------------------------------------


@pytest.mark.slow
def test_a_worker_killed_mid_event_is_finished_by_another_from_the_cursor(ctx):
    target = page("handbook/onboarding")
    watchers = add_users(20_000)
    add_watches(target, watchers)
    recipients = {*watchers, str(user("alice").id)}  # alice watches it from the seed
    emit_edit(target, str(user("bob").id))
    db.session.commit()  # kicks a dispatch
    victim = start_worker(ctx)
    wait_for(lambda: entry_total(target.id) >= 2_000)
    victim.send_signal(signal.SIGKILL)
    victim.communicate()  # reaped, its pipe closed
    assert victim.returncode == -signal.SIGKILL
    db.session.expire_all()
    [event] = events()
    written = entry_total(target.id)
    assert event.processed_at is None and event.claimed_by is not None, "it finished first"
    assert event.cursor is not None and 2_000 <= written < len(recipients)

    after_the_stale_threshold()
    queue.enqueue(ctx, "dispatch")  # the minute's cron
    finish(start_worker(ctx))
    found = counts_by_user(target.id)
    assert set(found) == recipients
    assert {tuple(entries) for entries in found.values()} == {((1, True),)}
    assert_outbox_drained()


# -- the worker's database connections cut --------------------------------------------------


def victim_env(app, name: str) -> dict:
    """The worker's environment, its connections named ``name`` in pg_stat_activity."""
    env = worker_env(app)
    env["FLASK_SQLALCHEMY_DATABASE_URI"] = named_database_url(
        app.config["SQLALCHEMY_DATABASE_URI"], name)
    return env


@pytest.mark.slow
def test_connections_cut_mid_fan_out_lose_and_double_nothing(ctx):
    target = page("handbook/onboarding")
    add_watches(target, add_users(8_000))
    watchers = {str(w.user_id) for w in db.session.scalars(
        sa.select(Watch).where(Watch.page_id == target.id))}
    bob, carol = str(user("bob").id), str(user("carol").id)
    emit_edit(target, carol)  # every watcher has an unread entry counting 1 first
    db.session.commit()
    finish(start_worker(ctx))
    # The last watcher's entry held by another transaction: the fan-out's first batch of
    # 5,000 commits, its second waits on that row, and the cut finds it there (a race on
    # the clock let a fast fan-out finish first, in a CI run).
    last = max(watchers, key=int)
    holder = db.engine.connect()
    holder.execute(sa.select(Notification.id).where(
        Notification.user_id == last, Notification.page_id == str(target.id)).with_for_update())
    emit_edit(target, bob)
    db.session.commit()
    name = f"wikinotify-victim-{os.getpid()}"
    victim = start_worker(ctx, env=victim_env(ctx, name))
    try:
        wait_for(lambda: db.session.scalar(
            sa.select(sa.func.count()).select_from(Notification)
            .where(Notification.count == 2)) >= 1_000)
        assert terminate_connections(name) >= 1
    except BaseException:
        victim.kill()  # not left running into the next test
        victim.communicate()
        raise
    finally:
        holder.rollback()
        holder.close()
    db.session.commit()
    [_, event] = events()
    assert event.processed_at is None, "the fan-out finished before the cut"
    finish(victim)  # its run ends early, and the next one resumes from the cursor
    after_the_stale_threshold()
    queue.enqueue(ctx, "dispatch")  # the next run, whatever the cut left behind
    finish(start_worker(ctx))
    expected = {person: [((person != carol) + (person != bob), True)] for person in watchers}
    assert counts_by_user(target.id) == {p: e for p, e in expected.items() if e[0][0]}
    assert_outbox_drained()


# -- four workers, 2,000 events -------------------------------------------------------------


def audiences(users: list[str], rng: random.Random) -> list[list[str]]:
    """Overlapping audiences from 1 to 5,000 people: a few large, many small."""
    big = [users[:5_000], users[:2_000], users[1_000:2_000], users[2_500:3_000]]
    small = [rng.sample(users, rng.randint(1, 60)) for _ in range(36)]
    return big + small


@pytest.fixture
def default_stale_threshold(app):
    """The production threshold: with two seconds, a worker still busy with its batch
    would see it taken over by the others and fanned out twice (why the threshold
    stays well above the job timeout)."""
    app.config["WIKINOTIFY_STALE_CLAIM_SECONDS"] = STALE_CLAIM.total_seconds()


@pytest.mark.slow
def test_four_workers_drain_two_thousand_events_exactly(default_stale_threshold, ctx):
    rng = random.Random(8)
    users = add_users(5_000)
    site, admin_user = main_site(), user("admin")
    pages = []
    for n, audience in enumerate(audiences(users, rng)):
        pages.append(wiki.save_page(site, admin_user, f"load/p{n}", f"Load {n}", "v1"))
        add_watches(pages[-1], audience)
    db.session.execute(sa.delete(Event))
    db.session.commit()
    audience_of = {str(p.id): {str(w.user_id) for w in db.session.scalars(
        sa.select(Watch).where(Watch.page_id == p.id))} for p in pages}
    # Large audiences get few events, small ones many: 2,000 in all.
    plan = [pages[n] for n in range(4) for _ in range(3)]
    plan += [rng.choice(pages[4:]) for _ in range(2_000 - len(plan))]
    rng.shuffle(plan)
    actors = {}
    for target in plan:
        actor = rng.choice(users)
        actors[emit_edit(target, actor)] = (str(target.id), actor)
    db.session.commit()
    replay_pages = {str(p.id) for p in pages[4:12]}  # replayed, never read
    read_pages = {str(p.id) for p in pages} - replay_pages

    workers = [start_worker(ctx, burst=False) for _ in range(4)]
    replayed: set[str] = set()
    try:
        while True:
            for _ in range(4):
                queue.enqueue(ctx, "dispatch")  # what the kicks and the cron keep doing
            read_some(read_pages, users, rng)
            replay_finished(replay_pages - replayed, replayed)
            db.session.commit()
            if len(replayed) == len(replay_pages) and not waiting():
                break
            time.sleep(0.3)
    finally:
        outputs = stop_workers(workers)
    assert all("wikinotify.jobs.dispatch()" in output for output in outputs)

    expected: Counter = Counter()
    for page_id, actor in actors.values():
        for person in audience_of[page_id] - {actor}:
            expected[(person, page_id)] += 1
    found: Counter = Counter()
    unread: Counter = Counter()
    db.session.expire_all()
    for row in db.session.execute(sa.select(Notification.user_id, Notification.page_id,
                                            Notification.count, Notification.read_at)):
        found[(row.user_id, row.page_id)] += row.count
        unread[(row.user_id, row.page_id)] += row.read_at is None
    assert found == expected
    assert max(unread.values()) == 1
    assert_outbox_drained()


def waiting() -> bool:
    return db.session.scalar(sa.select(sa.func.count()).select_from(Event).where(
        Event.processed_at.is_(None))) > 0


def read_some(read_pages: set[str], people: list[str], rng: random.Random) -> None:
    """People read their entries while the workers write, each one's in one statement as
    "mark all read" does: the next event starts a new entry."""
    for person in rng.sample(people, 5):
        db.session.execute(sa.update(Notification).where(
            Notification.user_id == person, Notification.read_at.is_(None),
            Notification.page_id.in_(read_pages)).values(read_at=datetime.now(UTC)))
        db.session.commit()


def replay_finished(pages: set[str], replayed: set[str]) -> None:
    """A page whose events are all out has the event that last wrote its entries fanned
    out again (as a fan-out retried after a crash would): docs/rules.md#coalescing-is-idempotency
    says that changes nothing."""
    for page_id in pages:
        unprocessed = sa.select(Event.id).where(Event.page_id == page_id,
                                                Event.processed_at.is_(None))
        if db.session.scalar(unprocessed.limit(1)) is not None:
            continue
        last = db.session.scalar(
            sa.select(Notification.last_event_id).where(Notification.page_id == page_id)
            .group_by(Notification.last_event_id).order_by(sa.func.count().desc()).limit(1))
        if last is not None:
            db.session.execute(sa.update(Event).where(Event.id == last).values(
                processed_at=None, claimed_at=None, claimed_by=None, cursor=None))
        replayed.add(page_id)


# -- the coalescing rules, as a property ----------------------------------------------------

PEOPLE = ("alice", "bob", "carol", "admin")
VARIANTS = ("edited", "moved", "scheduled")

operations = st.one_of(
    st.tuples(st.just("edit"), st.sampled_from(PEOPLE), st.sampled_from(VARIANTS),
              st.integers(0, 1)),
    st.tuples(st.just("read"), st.sampled_from(PEOPLE), st.integers(0, 1)),
    st.tuples(st.just("dismiss"), st.sampled_from(PEOPLE), st.integers(0, 1)),
    st.tuples(st.just("replay"), st.integers(0, 20)),
    st.tuples(st.just("prefer"), st.sampled_from(PEOPLE), st.booleans()),
)


class Model:
    """docs/rules.md#coalescing-is-idempotency in plain Python: one unread entry per (user, group
    key) at most; an event coalesces into it unless it is the event that last touched it (a replay);
    reading frees the slot; dismissing deletes the entry."""

    def __init__(self) -> None:
        self.entries: list[dict] = []  # in creation order, like ids
        self.events: list[tuple[str, str, int]] = []  # (actor, variant, page)
        self.in_app_off: set[str] = set()

    def fan_out(self, number: int, watchers: dict[int, set[str]]) -> None:
        actor, variant, target = self.events[number]
        for person in sorted(watchers[target] - {actor} - self.in_app_off):
            entry = self.unread(person, target)
            if entry is None:
                self.entries.append({"user": person, "page": target, "count": 1,
                                     "variants": [variant], "variant": variant,
                                     "actor": actor, "read": False, "last": number})
            elif entry["last"] != number:
                entry.update(count=entry["count"] + 1, variant=variant, actor=actor,
                             last=number)
                if variant not in entry["variants"]:
                    entry["variants"].append(variant)

    def unread(self, person: str, target: int) -> dict | None:
        return next((e for e in self.entries
                     if (e["user"], e["page"], e["read"]) == (person, target, False)), None)

    def read(self, person: str, target: int) -> None:
        entry = self.unread(person, target)
        if entry is not None:
            entry["read"] = True

    def dismiss(self, person: str, target: int) -> None:
        mine = [e for e in self.entries if (e["user"], e["page"]) == (person, target)]
        if mine:
            self.entries.remove(mine[-1])

    def state(self) -> list[tuple]:
        return sorted((e["user"], e["page"], e["count"], ",".join(e["variants"]),
                       e["variant"], e["actor"], e["read"]) for e in self.entries)


def reset_wikinotify_tables() -> None:
    # The ranges of split fan-outs reference the events (none here, but TRUNCATE asks).
    db.session.execute(sa.text("TRUNCATE wikinotify_events, wikinotify_fanout_ranges, "
                               "wikinotify_notifications, wikinotify_preferences "
                               "RESTART IDENTITY"))
    db.session.commit()


def run_dispatch() -> None:
    st_ = state()
    dispatch(FanoutContext(host=st_.host, session=db.session), st_.registry,
             mail_on=False, budget=60, stale_after=STALE_CLAIM)


def actual_state(names: dict[str, str], page_ids: dict[str, int]) -> list[tuple]:
    db.session.expire_all()
    rows = db.session.scalars(sa.select(Notification).order_by(Notification.id))
    return sorted((names[r.user_id], page_ids[r.page_id], r.count, r.variants.strip(","),
                   r.variant, names[r.actor_id], r.read_at is not None) for r in rows)


def test_any_sequence_leaves_the_entries_the_coalescing_rules_predict(ctx):
    targets = [page("handbook/onboarding"), wiki.save_page(
        main_site(), user("admin"), "handbook/second", "Second", "v1")]
    for person in PEOPLE:
        for target in targets:
            if not wiki.is_watching(target, user(person)):
                wiki.watch(target, user(person))
    db.session.commit()
    ids = {name: str(user(name).id) for name in PEOPLE}
    names = {v: k for k, v in ids.items()}
    page_ids = {str(t.id): n for n, t in enumerate(targets)}
    watchers = {n: set(PEOPLE) for n in range(len(targets))}

    @settings(max_examples=25, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(st.lists(operations, min_size=1, max_size=12))
    def check(steps):
        reset_wikinotify_tables()
        model = Model()
        event_ids: list[int] = []
        for step in steps:
            apply(step, model, event_ids)
        assert actual_state(names, page_ids) == model.state()
        assert_outbox_drained()

    def apply(step, model: Model, event_ids: list[int]) -> None:
        kind, *args = step
        if kind == "edit":
            person, variant, n = args
            event_ids.append(emit_edit(targets[n], ids[person], variant))
            db.session.commit()
            model.events.append((person, variant, n))
            run_dispatch()
            model.fan_out(len(model.events) - 1, watchers)
        elif kind in ("read", "dismiss"):
            person, n = args
            mine = sa.and_(Notification.user_id == ids[person],
                           Notification.page_id == str(targets[n].id))
            if kind == "read":
                db.session.execute(sa.update(Notification).where(
                    mine, Notification.read_at.is_(None)).values(read_at=datetime.now(UTC)))
                model.read(person, n)
            else:
                last = db.session.scalar(sa.select(sa.func.max(Notification.id)).where(mine))
                db.session.execute(sa.delete(Notification).where(Notification.id == last))
                model.dismiss(person, n)
            db.session.commit()
        elif kind == "replay" and event_ids:
            number = args[0] % len(event_ids)
            db.session.execute(sa.update(Event).where(Event.id == event_ids[number]).values(
                processed_at=None, claimed_at=None, claimed_by=None, cursor=None))
            db.session.commit()
            run_dispatch()
            model.fan_out(number, watchers)
        elif kind == "prefer":
            person, on = args
            db.session.merge(Preference(user_id=ids[person], category="watchedPage",
                                        channel="inApp", enabled=on))
            db.session.commit()
            (model.in_app_off.discard if on else model.in_app_off.add)(person)

    check()
