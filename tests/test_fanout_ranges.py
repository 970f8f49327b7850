"""One event, many workers (docs/benchmarks.md#the-fan-out): an audience larger than
``WIKINOTIFY_FANOUT_RANGE_SIZE`` is split into ranges, each its own ``fanout_range`` job.

Tiny range sizes keep the worlds small. Each test asserts the exact end state: everyone told
once, by the highest-priority category; the event processed once, after its last range;
no range left behind.
"""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from rq import Worker

from bench.fanout_split import ranges_by_worker
from demo import wiki
from demo.models import Comment, User, Watch, db
from tests.helpers.database import entries_refused_for, statements_sent
from tests.helpers.jobs import (
    STALE_SECONDS,
    app_queues,
    finish,
    run_jobs,
    run_results,
    start_worker,
    stop_workers,
    tells_waiting_for_the_mark,
    wait_for,
    worker_env,
)
from tests.helpers.wiki import add_users, add_watches, emit_edit, events, page, user
from wikinotify import admin, queue
from wikinotify.categories import FanoutContext
from wikinotify.jobs.dispatch import STALE_CLAIM
from wikinotify.models import Event, FanoutRange, Notification
from wikinotify.pipeline import audience, claims, failures
from wikinotify.pipeline.events import DispatchReport
from wikinotify.pipeline.events import dispatch as dispatch_events
from wikinotify.pipeline.ranges import RangeReport, fan_out_range
from wikinotify.state import state

#: Ranges of this many candidates: several ranges from a few hundred watchers.
RANGE_SIZE = 100
#: The worker a deployment runs (docs/operating.md): the app built before it registers.
APP_WORKER = "wikinotify.jobs.appctx.Worker"
#: Longer than ``Notification.variant`` (String(32)): PostgreSQL refuses it at the upsert.
BAD_VARIANT = "v" * 40


# A worker alone on the queue splits too here, unless a test says otherwise (the tests of
# when a split pays, below): these tests are about the ranges.
pytestmark = pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=False,
                                    WIKINOTIFY_FANOUT_RANGE_SIZE=RANGE_SIZE,
                                    WIKINOTIFY_FANOUT_SPLIT_ALONE=True)


def fanout_ctx() -> FanoutContext:
    return FanoutContext(host=state().host, session=db.session)


def dispatch(stale_after: timedelta = STALE_CLAIM) -> DispatchReport:
    """One dispatch run in this process: it claims the event, and splits it."""
    return dispatch_events(fanout_ctx(), state().registry, mail_on=False, budget=60,
                           stale_after=stale_after, me="dispatcher")


def run_range(me: str, *, stale_after: timedelta = STALE_CLAIM,
              budget: float = 60) -> RangeReport | None:
    """What a ``fanout_range`` job does, in this process: claim a range, fan it out."""
    range_id = claims.claim_range(db.session, me=me, stale_after=stale_after)
    if range_id is None:
        return None
    return fan_out_range(fanout_ctx(), state().registry, range_id, mail_on=False,
                                budget=budget, me=me)


def ranges() -> list[FanoutRange]:
    db.session.expire_all()
    return list(db.session.scalars(sa.select(FanoutRange).order_by(FanoutRange.number)))


def entries_of(event_id: int) -> dict[str, list[tuple[str, int, bool]]]:
    """Each person's entries written by ``event_id``: (category, count, unread)."""
    db.session.expire_all()
    found: dict[str, list[tuple[str, int, bool]]] = {}
    rows = db.session.execute(
        sa.select(Notification.user_id, Notification.category, Notification.count,
                  Notification.read_at)
        .where(Notification.last_event_id == event_id).order_by(Notification.id))
    for user_id, category, count, read_at in rows:
        found.setdefault(user_id, []).append((category, count, read_at is None))
    return found


def watched_page(watchers: int):
    """The onboarding page with ``watchers`` new watchers besides alice (the seed's);
    everyone who watches it, as ids."""
    target = page("handbook/onboarding")
    add_watches(target, add_users(watchers))
    return target, {*map(str, watcher_ids(target.id))}


def watcher_ids(page_id) -> list[int]:
    return list(db.session.scalars(sa.select(Watch.user_id).where(Watch.page_id == page_id)))


def assert_processed_once(event_id: int, split_into: int) -> None:
    [event] = [e for e in events() if e.id == event_id]
    assert event.processed_at is not None and event.ranges == split_into
    assert (event.cursor, event.claimed_by, event.failed_at, event.attempts) == (
        None, None, None, 0)
    assert ranges() == []  # the last range took every range with it


# -- everyone once, by the highest priority -------------------------------------------------


def test_a_split_comment_tells_everyone_once_by_the_highest_priority(ctx):
    target, watchers = watched_page(349)  # with alice: 350 watchers
    bob = user("bob")
    ordered = sorted(watchers, key=int)
    # Mentioned: a watcher at each end of the keyset and one in the middle (the first,
    # middle and last range), and someone who does not watch the page.
    mentioned = [ordered[0], ordered[175], ordered[-1]]
    outsider = add_users(1)[0]
    # A watcher's comment, written without an emit, which bob answers.
    replied_to = ordered[250]
    parent = Comment(page=target, author_id=int(replied_to), body="A question")
    db.session.add(parent)
    db.session.commit()
    handles = " ".join(f"@{db.session.get(User, int(person)).username}"
                       for person in [*mentioned, outsider])
    wiki.add_comment(target, bob, f"Thanks {handles}", parent_id=parent.id)
    # A small event beside it: it takes today's path.
    small = page("ops/runbook")
    emit_edit(small, str(bob.id))
    db.session.commit()

    run_jobs(ctx)

    comment_event, edit_event = events()
    assert_processed_once(comment_event.id, split_into=4)
    assert edit_event.ranges is None and edit_event.processed_at is not None
    expected = {person: "watchedPageComment" for person in watchers}
    expected.update({person: "mention" for person in [*mentioned, outsider]})
    expected[replied_to] = "commentReply"
    expected.pop(str(bob.id), None)
    found = entries_of(comment_event.id)
    assert found == {person: [(category, 1, True)] for person, category in expected.items()}


def test_an_event_found_too_small_to_split_is_walked_without_reading_its_candidates_again(
        ctx, monkeypatch):
    """Learning that an event is not split reads its candidates ahead of the walk; the
    walk takes the batches read ahead rather than asking the wiki for them again."""
    monkeypatch.setattr(audience, "CANDIDATE_BATCH", 10)
    target, watchers = watched_page(64)  # with alice: 65 watchers, 7 batches, one range
    event_id = emit_edit(target, str(user("bob").id))
    db.session.commit()
    host = state().host
    asked: list[str | None] = []
    original = host.page_watchers

    def page_watchers(page_id, *, after, limit):
        asked.append(after)
        return original(page_id, after=after, limit=limit)

    monkeypatch.setattr(host, "page_watchers", page_watchers)
    dispatch()
    # The first batch, then the rest read ahead in one query (bob, the editor, is not told).
    assert len(asked) == 2
    assert set(entries_of(event_id)) == watchers - {str(user("bob").id)}
    [event] = [e for e in events() if e.id == event_id]
    assert event.processed_at is not None and event.ranges is None


def test_the_last_range_marks_its_event_processed_when_its_last_batch_commits_not_after_its_tell(
        ctx, monkeypatch):
    """As an unsplit event's (docs/rules.md#writing-entries): the last range's mark does not
    wait for the open pages of its last batch to be told."""
    monkeypatch.setattr(audience, "CANDIDATE_BATCH", 10)  # a range's batches: 10, 20, 20...
    target, watchers = watched_page(149)  # with alice: 150 watchers, two ranges
    event_id = emit_edit(target, str(user("bob").id))
    db.session.commit()
    marked_while_telling = tells_waiting_for_the_mark(monkeypatch, max(watchers, key=int))

    run_jobs(ctx)

    assert_processed_once(event_id, split_into=2)
    assert marked_while_telling.is_set(), "the mark waited for the last batch's tell"


# -- split only when another worker may take ranges ------------------------------------------


def test_a_worker_alone_on_the_queue_fans_a_large_event_out_in_one_run(ctx):
    ctx.config["WIKINOTIFY_FANOUT_SPLIT_ALONE"] = False
    target, watchers = watched_page(349)  # with alice: 350 watchers, four ranges' worth
    event_id = emit_edit(target, str(user("bob").id))
    db.session.commit()

    run_jobs(ctx)  # one worker, alone on the queue

    [event] = events()
    assert event.processed_at is not None and event.ranges is None
    assert ranges() == []
    assert run_results(ctx, "fanout_range") == []
    expected = watchers - {str(user("bob").id)}
    [run] = run_results(ctx, "dispatch")
    assert (run["split"], run["finished"], run["written"]) == (0, 1, len(expected))
    assert entries_of(event_id) == {person: [("watchedPage", 1, True)] for person in expected}


def test_a_large_event_is_split_when_another_worker_listens_on_the_queue(ctx):
    ctx.config["WIKINOTIFY_FANOUT_SPLIT_ALONE"] = False
    target, watchers = watched_page(349)
    event_id = emit_edit(target, str(user("bob").id))
    db.session.commit()
    # A worker on another machine, registered on the fan-out queue (it takes nothing here).
    fanout_queue = app_queues(ctx)[0]
    elsewhere = Worker([fanout_queue], connection=fanout_queue.connection,
                       name=f"elsewhere-{event_id}")
    elsewhere.register_birth()
    try:
        run_jobs(ctx)
    finally:
        elsewhere.register_death()

    assert_processed_once(event_id, split_into=4)
    expected = watchers - {str(user("bob").id)}
    assert entries_of(event_id) == {person: [("watchedPage", 1, True)] for person in expected}


def others_beside_a_lapsed_registration() -> int | None:
    """Run as an RQ job: ``queue.other_workers`` with two other names in the fan-out queue's
    set of workers, one alive elsewhere and one whose key lapsed (it stopped beating; RQ
    leaves its name in the set until it cleans up)."""
    from flask import current_app
    from rq import worker_registration

    fanout = queue.queue(current_app)
    workers_set = worker_registration.WORKERS_BY_QUEUE_KEY % fanout.name
    lapsed = f"{Worker.redis_worker_namespace_prefix}lapsed-elsewhere"
    alive = Worker([fanout], connection=fanout.connection, name="alive-elsewhere")
    alive.register_birth()
    fanout.connection.sadd(workers_set, lapsed)
    try:
        return queue.other_workers(current_app)
    finally:
        fanout.connection.srem(workers_set, lapsed)
        alive.register_death()


def test_a_worker_whose_registration_lapsed_is_not_counted_among_those_that_take_ranges(ctx):
    job = queue.queue(ctx).enqueue(others_beside_a_lapsed_registration)
    run_jobs(ctx)
    assert job.return_value() == 1  # the one alive; neither the lapsed one nor this worker


def test_a_run_that_is_no_rq_job_splits_a_large_event(ctx):
    """Called in-process, a run cannot know which workers will take the ranges."""
    ctx.config["WIKINOTIFY_FANOUT_SPLIT_ALONE"] = False
    target, _ = watched_page(299)
    emit_edit(target, str(user("bob").id))
    db.session.commit()
    report = dispatch()
    assert (report.claimed, report.split, report.finished) == (1, 1, 0)
    assert events()[0].ranges == 3


def test_a_run_that_splits_its_event_reads_nothing_once_for_the_run(ctx, monkeypatch):
    """What a fan-out of many batches reads once for its run (mutes, preferences,
    endpoints, schedules: audience.read_for_run) is read after the split's check: a run
    that hands its event to ranges decides no batch, and each range reads for itself."""
    monkeypatch.setattr(audience, "CANDIDATE_BATCH", 10)  # a full first batch, then split
    ctx.config["WIKINOTIFY_FANOUT_SPLIT_ALONE"] = False
    target, _ = watched_page(299)
    emit_edit(target, str(user("bob").id))
    db.session.commit()
    with statements_sent(db.engine) as statements:
        report = dispatch()
    assert report.split == 1
    # (Every run reads the site-wide endpoints, those with no owner, before its first batch.)
    reads = ("FROM wikinotify_mutes", "FROM wikinotify_preferences",
             "wikinotify_endpoints.owner_id, wikinotify_endpoints.kind",
             "FROM wikinotify_email_schedules")
    assert not [sql for sql, _ in statements if any(read in sql for read in reads)]


# -- processed once, after the last range; a replay changes nothing -------------------------


def test_the_event_is_processed_after_its_last_range_only_and_a_replay_changes_nothing(ctx):
    target, watchers = watched_page(299)
    event_id = emit_edit(target, str(user("bob").id))
    db.session.commit()

    report = dispatch()
    assert (report.claimed, report.split, report.finished) == (1, 1, 0)
    [event] = events()
    assert event.ranges == 3 and event.claimed_by is None
    assert claims.claim_events(db.session, me="x", stale_after=timedelta(0)) == []
    assert [(r.number, r.done_at) for r in ranges()] == [(0, None), (1, None), (2, None)]
    bounds = [(r.lower, r.upper) for r in ranges()]
    ordered = sorted(watchers, key=int)
    assert bounds == [(None, ordered[99]), (ordered[99], ordered[199]), (ordered[199], None)]

    for number in range(3):
        assert events()[0].processed_at is None
        report = run_range(f"worker-{number}")
        assert report is not None and report.done
        assert report.processed == (number == 2)
        assert report.written == 100
    assert run_range("late") is None
    assert_processed_once(event_id, split_into=3)
    written = db.session.execute(
        sa.select(Notification.user_id, Notification.count, Notification.updated_at)
        .order_by(Notification.user_id)).all()
    assert {row.user_id for row in written} == watchers
    assert {row.count for row in written} == {1}

    # The event fanned out again, as a crashed run's retry would: split again, nothing
    # written (docs/rules.md#coalescing-is-idempotency).
    db.session.execute(sa.update(Event).where(Event.id == event_id).values(
        processed_at=None, ranges=None, cursor=None))
    db.session.commit()
    queue.enqueue(ctx, "dispatch")
    run_jobs(ctx)
    assert_processed_once(event_id, split_into=3)
    db.session.expire_all()
    assert db.session.execute(
        sa.select(Notification.user_id, Notification.count, Notification.updated_at)
        .order_by(Notification.user_id)).all() == written


# -- a lapsed lease: the range resumes from its cursor ------------------------------------------


@pytest.fixture
def split_in_two_batch_ranges(ctx, monkeypatch) -> tuple[int, set[str], list[str]]:
    """An event split into three ranges, in batches of 1,000 (whatever the production
    batch is) and ranges of 1,200: the first two ranges take two batches (1,000 + 200)
    each, so a range can stop between them. Its id, its watchers, and them in order."""
    monkeypatch.setattr(audience, "CANDIDATE_BATCH", 1_000)
    ctx.config["WIKINOTIFY_FANOUT_RANGE_SIZE"] = 1_200
    target, watchers = watched_page(2_499)
    event_id = emit_edit(target, str(user("bob").id))
    db.session.commit()
    dispatch()
    return event_id, watchers, sorted(watchers, key=int)


def test_a_range_whose_lease_lapsed_is_resumed_from_its_cursor_and_nothing_twice(
    split_in_two_batch_ranges,
):
    event_id, watchers, ordered = split_in_two_batch_ranges
    assert [(r.lower, r.upper) for r in ranges()] == [
        (None, ordered[1_199]), (ordered[1_199], ordered[2_399]), (ordered[2_399], None)]

    # A worker writes one batch of the first range, hands it over (out of time), claims it
    # again and dies: its lease holds the range until it lapses.
    report = run_range("doomed", budget=0)
    assert report is not None and report.deferred and report.written == 1_000
    assert ranges()[0].cursor == ordered[999]
    assert claims.claim_range(db.session, me="doomed", stale_after=STALE_CLAIM) == ranges()[0].id
    # Everyone told so far reads the entry: a batch written again would show as a second,
    # unread entry.
    db.session.execute(sa.update(Notification).values(read_at=datetime.now(UTC)))
    db.session.commit()

    # Within the lease, another worker takes the next range, not the dead one's.
    report = run_range("heir")
    assert report is not None and report.done and report.range_id == ranges()[0].id + 1
    # Once the lease has lapsed, the range is taken over, and resumed after its cursor.
    report = run_range("heir", stale_after=timedelta(0))
    assert report is not None and report.done and report.written == 200
    report = run_range("heir")
    assert report is not None and report.processed

    assert_processed_once(event_id, split_into=3)
    found = entries_of(event_id)
    told_first = set(ordered[:1_000])
    assert found == {person: [("watchedPage", 1, person not in told_first)]
                     for person in watchers}


def test_a_range_that_fails_after_a_committed_batch_reports_what_it_wrote(
    split_in_two_batch_ranges,
):
    """The first batch of the first range commits (its cursor with it: never written
    again); the database refuses an entry of the second: the range's report counts the
    first batch's entries, and not the refused batch's, for the counters and the log."""
    event_id, _, ordered = split_in_two_batch_ranges
    with entries_refused_for(ordered[1_100]):  # in the first range's second batch
        report = run_range("w")
    assert report is not None and report.failed
    assert report.written == 1_000 == len(entries_of(event_id))


# -- kill -9 in the middle of a range --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_worker_killed_mid_range_is_finished_by_another_and_nothing_twice(ctx):
    # Ranges of two candidate batches each, so the kill is likely to fall between two.
    ctx.config["WIKINOTIFY_STALE_CLAIM_SECONDS"] = STALE_SECONDS
    size = 2 * audience.CANDIDATE_BATCH
    target, watchers = watched_page(2 * size - 1)
    env = worker_env(ctx)
    env["FLASK_WIKINOTIFY_FANOUT_RANGE_SIZE"] = str(size)
    victim = start_worker(ctx, env=env)
    event_id = emit_edit(target, str(user("bob").id))
    db.session.commit()
    queue.enqueue(ctx, "dispatch")
    wait_for(lambda: told(event_id) > 0)
    victim.send_signal(signal.SIGKILL)
    victim.communicate()
    assert victim.returncode == -signal.SIGKILL
    assert events()[0].processed_at is None, "it finished first"
    assert told(event_id) < len(watchers)

    time.sleep(STALE_SECONDS + 0.5)  # the dead worker's lease lapses
    queue.enqueue(ctx, "dispatch")  # the minute's cron, which hands the ranges on
    finish(start_worker(ctx, env=env))
    assert_processed_once(event_id, split_into=2)
    assert entries_of(event_id) == {person: [("watchedPage", 1, True)] for person in watchers}


def told(event_id: int) -> int:
    return db.session.scalar(sa.select(sa.func.count()).select_from(Notification)
                             .where(Notification.last_event_id == event_id))


# -- two real workers share one event ---------------------------------------------------------


def test_two_rq_workers_share_the_ranges_of_one_event(ctx):
    target, watchers = watched_page(1_199)
    env = worker_env(ctx)
    env["FLASK_WIKINOTIFY_FANOUT_RANGE_SIZE"] = str(RANGE_SIZE)
    # The workers as deployed: each builds the app before it registers. A SimpleWorker
    # builds it at its first job, and on a busy machine the second one's build outlasted
    # the twelve ranges, all taken by the first (a fresh-clone run, 2026-12-05).
    workers = [start_worker(ctx, burst=False, env=env, worker_class=APP_WORKER)
               for _ in range(2)]
    try:
        # Both listening, apps built, before the event exists: on a busy machine the
        # second worker's start-up could otherwise outlast the twelve ranges.
        wait_for(lambda: len(Worker.all(queue=app_queues(ctx)[0])) == 2, seconds=60)
        event_id = emit_edit(target, str(user("bob").id))
        db.session.commit()  # kicks a dispatch, which splits the event into 12 ranges
        queue.enqueue(ctx, "dispatch")  # and the minute's cron, in case a busy Redis lost it
        wait_for(lambda: events()[0].processed_at is not None, seconds=60)
    except AssertionError:
        outputs = stop_workers(workers)
        raise AssertionError("\n\n".join(o[-3000:] for o in outputs)) from None
    outputs = stop_workers(workers)
    # Both workers fanned ranges out, and the twelve ranges were each done once.
    taken = ranges_by_worker(app_queues(ctx)[0])
    assert len(taken) == 2 and sum(taken.values()) == 12, (taken, outputs[0][-3000:])
    assert_processed_once(event_id, split_into=12)
    assert entries_of(event_id) == {person: [("watchedPage", 1, True)] for person in watchers}


# -- a range that keeps failing ---------------------------------------------------------------


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_range_that_keeps_failing_fails_the_event_and_a_retry_finishes_it(ctx):
    target, watchers = watched_page(249)
    event_id = emit_edit(target, str(user("bob").id), variant=BAD_VARIANT)
    db.session.commit()
    dispatch()
    assert events()[0].ranges == 3
    for _ in range(failures.RETRY.attempts):
        db.session.execute(sa.update(FanoutRange).values(retry_after=None))
        db.session.commit()
        reports = [run_range(f"w{n}", stale_after=timedelta(0)) for n in range(3)]
        assert all(r is not None and r.failed for r in reports)
    assert run_range("w", stale_after=timedelta(0)) is None
    [event] = events()
    assert event.failed_at is not None and event.processed_at is None
    assert event.error.startswith("range 1: ") and "value too long" in event.error
    [listed] = admin.failed_events(db.session)
    assert listed["id"] == event_id

    # Fixed, and retried by an administrator: its ranges run again, from their cursors.
    db.session.execute(sa.update(Event).where(Event.id == event_id).values(
        data={**event.data, "variant": "edited"}))
    assert admin.retry_event(db.session, event_id)
    db.session.commit()
    queue.enqueue(ctx, "dispatch")  # what the retry's kick asks for
    run_jobs(ctx)
    assert_processed_once(event_id, split_into=3)
    assert entries_of(event_id) == {person: [("watchedPage", 1, True)] for person in watchers}


# -- what a range reads a batch -----------------------------------------------------------------


def test_a_range_reads_its_own_row_once_whatever_its_batches(ctx, monkeypatch):
    """Each batch's commit expires the range's row: its id and bound are read once, not
    loaded again for every batch's cursor."""
    monkeypatch.setattr(audience, "CANDIDATE_BATCH", 10)
    target, watchers = watched_page(299)  # ranges of 100: ten batches each
    emit_edit(target, str(user("bob").id))
    db.session.commit()
    dispatch()
    with statements_sent(db.engine) as sent:
        report = run_range("worker-0")
    assert report is not None and report.done and report.written == 100
    reads = [s for s, _ in sent
             if s.lstrip().upper().startswith("SELECT") and "FROM wikinotify_fanout_ranges" in s]
    # The range (claimed), the later ranges' bounds; at its end, the range again (to mark
    # it done, after the last batch's commit) and the ranges left. Ten batches: 13 before.
    assert len(reads) == 4, reads
