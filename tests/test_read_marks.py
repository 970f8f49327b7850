"""Read marks (docs/rules.md#read-marks): "mark all read" writes one mark that the
``settle_read_marks`` job writes onto the entries; until it has, every place that decides
"unread" reads the covered entries as read. SQLite and PostgreSQL, entries made by a real
worker from the demo wiki's own actions."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from demo.models import db
from tests.helpers.database import entries_refused_for
from tests.helpers.jobs import app_queues, run_jobs, run_results, run_worker
from tests.helpers.wiki import edit, entries_for, page, user, watch
from wikinotify import inbox, queue
from wikinotify.inbox import read_marks, undo
from wikinotify.models import EmailState, Notification, ReadMark, utcnow
from wikinotify.pipeline.upsert import upsert

API = "/_notifications/api/notifications"

pytestmark = pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True)


@pytest.fixture
def two_entries(app):
    """Alice watches Onboarding (seed) and Home; Bob saves each: two unread entries of
    hers, their mail pending."""
    with app.app_context():
        watch("home", "alice")
        edit("handbook/onboarding", "bob", "First")
        edit("home", "bob", "Home edit")
    run_jobs(app)


def alice() -> str:
    return str(user("alice").id)


def hold_the_job(app) -> None:
    """Take the settling job off the queue: what follows runs before it."""
    for q in app_queues(app):
        q.empty()


def settle(app) -> None:
    """Run the settling job as a worker would (enqueued, then run by a real RQ worker in
    this process)."""
    queue.enqueue(app, queue.Job.SETTLE_READ_MARKS)
    run_jobs(app)


def marks() -> list[tuple[str, int]]:
    db.session.expire_all()
    return list(db.session.execute(sa.select(ReadMark.user_id, ReadMark.through_id)))


def states(name: str = "alice") -> list[tuple[int, bool, str]]:
    """Each entry's (count, its own read_at is set, mail state), oldest first."""
    return [(e.count, e.read_at is not None, e.email_state) for e in entries_for(name)]


def mark_all(client) -> dict:
    response = client.put(f"{API}/read", json={})
    assert response.status_code == 200
    return response.get_json()


def unread_ids(client) -> list[int]:
    return [i["id"] for i in client.get(f"{API}?unread=true").get_json()["items"]]


def summary(client) -> dict:
    return client.get(f"{API}/summary").get_json()


def test_before_the_job_runs_every_reading_of_the_inbox_sees_them_read(app, two_entries,
                                                                         as_alice):
    marked = mark_all(as_alice)
    hold_the_job(app)
    assert marked["marked"] == 2 and marked["undoToken"]
    with app.app_context():
        # Not written onto the rows yet; their mail cancelled at once.
        assert states() == [(1, False, "skipped"), (1, False, "skipped")]
        assert [m[0] for m in marks()] == [alice()]
        [mark] = db.session.scalars(sa.select(ReadMark)).all()
        mark_read_at = mark.read_at
        site = str(page("home").site_id)
        assert inbox.unseen_count(db.session, alice(), site) == 0
        bob = str(user("bob").id)
        together = inbox.summaries(db.session, [(bob, site), (alice(), site)])
        assert together[alice(), site].unread == 0
        onboarding = str(page("handbook/onboarding").id)
        assert not inbox.has_unread_on_page(db.session, alice(), onboarding, ["watchedPage"])
        assert inbox.mark_page_read(db.session, alice(), onboarding, ["watchedPage"]) == 0
        db.session.commit()
    assert summary(as_alice)["unread"] == 0
    items = as_alice.get(API).get_json()["items"]
    assert len(items) == 2 and all(i["readAt"] for i in items)
    assert unread_ids(as_alice) == []
    # A page of the inbox (HTML) shows no unread entry either.
    inbox_page = as_alice.get("/_notifications/inbox").get_data(as_text=True)
    assert "wn-entry" in inbox_page and "wn-unread" not in inbox_page

    settle(app)
    with app.app_context():
        assert marks() == []
        rows = entries_for("alice")
        assert {e.read_at for e in rows} == {mark_read_at}
        assert {e.email_state for e in rows} == {"skipped"}
    assert summary(as_alice)["unread"] == 0
    assert [i["readAt"] for i in as_alice.get(API).get_json()["items"]] == [
        i["readAt"] for i in items]


@pytest.mark.parametrize("settled", [False, True], ids=["before the job", "after the job"])
def test_an_event_after_the_mark_makes_a_new_unread_entry(app, two_entries, as_alice,
                                                          settled):
    mark_all(as_alice)
    hold_the_job(app)
    if settled:
        settle(app)
    with app.app_context():
        edit("handbook/onboarding", "bob", "Second")
    run_jobs(app)
    with app.app_context():
        onboarding = str(page("handbook/onboarding").id)
        about_it = entries_for("alice", page_id=onboarding)
    # Not joined into the entry she read: a new one, unread, its mail due.
    assert [(e.count, e.read_at is None, e.email_state) for e in about_it] == [
        (1, False, "skipped"), (1, True, "pending")]
    assert unread_ids(as_alice) == [about_it[1].id]
    assert summary(as_alice)["unread"] == 1


def test_undo_before_the_job_makes_them_unread_with_their_mail(app, two_entries, as_alice):
    marked = mark_all(as_alice)
    hold_the_job(app)
    undone = as_alice.post(f"{API}/undo", json={"token": marked["undoToken"]})
    assert undone.get_json() == {"restored": 2}
    with app.app_context():
        assert marks() == []
        assert states() == [(1, False, "pending"), (1, False, "pending")]
    assert summary(as_alice)["unread"] == 2
    settle(app)  # finds nothing to do
    with app.app_context():
        assert states() == [(1, False, "pending"), (1, False, "pending")]


def test_undo_between_two_batches_of_the_job(app, two_entries, as_alice):
    marked = mark_all(as_alice)
    hold_the_job(app)
    with app.app_context():
        assert read_marks.settle_batch(db.session, alice(), limit=1)  # one row, more left
        db.session.commit()
        assert sorted(states()) == [(1, False, "skipped"), (1, True, "skipped")]
    undone = as_alice.post(f"{API}/undo", json={"token": marked["undoToken"]})
    assert undone.get_json() == {"restored": 2}
    with app.app_context():
        assert marks() == []
        assert states() == [(1, False, "pending"), (1, False, "pending")]
        assert not read_marks.settle_batch(db.session, alice(), limit=1)  # nothing left
        db.session.commit()
        assert states() == [(1, False, "pending"), (1, False, "pending")]


def test_undo_after_the_job(app, two_entries, as_alice):
    marked = mark_all(as_alice)
    hold_the_job(app)
    settle(app)
    undone = as_alice.post(f"{API}/undo", json={"token": marked["undoToken"]})
    assert undone.get_json() == {"restored": 2}
    with app.app_context():
        assert states() == [(1, False, "pending"), (1, False, "pending")]


@pytest.mark.parametrize("order", ["first undone first", "second undone first"])
def test_a_second_mark_all_read_before_the_first_settled_and_each_undone(
        app, two_entries, as_alice, order):
    first = mark_all(as_alice)
    hold_the_job(app)
    with app.app_context():
        edit("news", "alice", "A page of hers")  # nothing for her
        watch("news", "alice")
        edit("news", "bob", "News")
    run_jobs(app)  # the fan-out alone: the settling job is off the queue
    assert summary(as_alice)["unread"] == 1
    second = mark_all(as_alice)
    hold_the_job(app)
    assert second["marked"] == 1
    with app.app_context():
        # The first mark was written onto its rows when the second was made.
        assert states() == [(1, True, "skipped"), (1, True, "skipped"), (1, False, "skipped")]
        assert len(marks()) == 1
    assert summary(as_alice)["unread"] == 0
    tokens = [first["undoToken"], second["undoToken"]]
    if order == "second undone first":
        tokens.reverse()
    restored = [as_alice.post(f"{API}/undo", json={"token": t}).get_json()["restored"]
                for t in tokens]
    assert sorted(restored) == [1, 2]
    assert summary(as_alice)["unread"] == 3
    with app.app_context():
        assert marks() == []
        assert [read for _, read, _ in states()] == [False, False, False]


def test_marking_a_covered_entry_unread_settles_her_mark_first(app, two_entries, as_alice):
    mark_all(as_alice)
    hold_the_job(app)
    first = as_alice.get(API).get_json()["items"][-1]["id"]
    assert as_alice.put(f"{API}/{first}/unread", json={}).status_code == 204
    assert unread_ids(as_alice) == [first]
    assert summary(as_alice)["unread"] == 1
    with app.app_context():
        assert marks() == []
        assert {e.id: e.read_at is None for e in entries_for("alice")}[first] is True


def test_a_dismissal_of_a_covered_entry_comes_back_read(app, two_entries, as_alice):
    mark_all(as_alice)
    hold_the_job(app)
    first = as_alice.get(API).get_json()["items"][-1]["id"]
    token = as_alice.delete(f"{API}/{first}", json={}).get_json()["undoToken"]
    assert as_alice.post(f"{API}/undo", json={"token": token}).get_json() == {"restored": 1}
    assert unread_ids(as_alice) == []


def test_the_job_on_a_real_worker_settles_the_mark(app, two_entries, as_alice):
    mark_all(as_alice)  # its kick enqueued the job
    run_worker(app)
    with app.app_context():
        assert marks() == []
        assert [read for _, read, _ in states()] == [True, True]


def test_a_reader_whose_rows_cannot_be_settled_holds_up_no_one(app, two_entries, as_alice):
    """One bad item never stops a batch: the database refuses her rows' update, so her
    mark's batch fails alone (rolled back, counted and logged); Carol's mark, placed after
    hers, is settled in the same run, and the next run settles hers. Meanwhile her inbox
    reads as her mark says."""
    with app.app_context():
        watch("home", "carol")
        edit("home", "bob", "Second home edit")
    run_jobs(app)
    mark_all(as_alice)
    hold_the_job(app)
    with app.app_context():
        carol = str(user("carol").id)
        read_marks.placing_a_mark(db.session())
        read_marks.place(db.session(), carol, str(page("home").site_id), utcnow())
        db.session.commit()
        with entries_refused_for(alice(), "UPDATE"):
            settle(app)
        assert [user_id for user_id, _ in marks()] == [alice()]
        assert [read for _, read, _ in states("carol")] == [True]
        assert [read for _, read, _ in states()] == [False, False]  # Home's two edits are one
    assert unread_ids(as_alice) == [] and summary(as_alice)["unread"] == 0
    assert run_results(app, "settle_read_marks")[-1] == {
        "marks": 1, "batches": 1, "failed": 1, "left": 0}
    settle(app)
    with app.app_context():
        assert marks() == []
        assert [read for _, read, _ in states()] == [True, True]


def test_another_readers_mark_never_covers_her_entries(app, two_entries, as_alice):
    with app.app_context():
        read_marks.place(db.session(), str(user("bob").id), None, utcnow())
        read_marks.place(db.session(), str(user("carol").id), str(page("home").site_id),
                         utcnow())
        db.session.commit()
        site = str(page("home").site_id)
        assert inbox.unseen_count(db.session, alice(), site) == 2
        # Read together, as a fan-out's wake reads the summaries of many readers.
        bob, carol = str(user("bob").id), str(user("carol").id)
        together = inbox.summaries(db.session, [(bob, site), (alice(), site), (carol, site)])
        assert together[alice(), site].unread == 2
    assert summary(as_alice)["unread"] == 2
    assert len(unread_ids(as_alice)) == 2
    settle(app)
    with app.app_context():
        assert marks() == []
        assert [read for _, read, _ in states()] == [False, False]


def test_a_mark_covers_its_site_and_the_instance_scoped_entries_only(app, as_alice):
    with app.app_context():
        me = alice()
        site = str(page("home").site_id)
        for n, (site_id, key) in enumerate([(site, "here"), (None, "anywhere"),
                                            ("elsewhere", "there")]):
            db.session.add(Notification(
                user_id=me, site_id=site_id, category="watchedPage", variant="edited",
                group_key=key, data={}, last_event_id=n + 1, in_app=True))
        db.session.commit()
        inbox.mark_all_read(db.session(), me, site)
        db.session.commit()
        unread = db.session.scalars(sa.select(Notification.group_key).where(
            Notification.user_id == me, read_marks.unread(Notification))).all()
        assert unread == ["there"]


def test_an_undo_waits_for_the_batch_of_the_job_that_holds_the_mark(app, two_entries, as_alice,
                                                                      database_url):
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite allows one writer at a time: nothing can fall between")
    marked = mark_all(as_alice)
    hold_the_job(app)
    with app.app_context():
        batch = Session(bind=db.engine)  # a worker's batch, not committed yet
        try:
            assert read_marks.settle_batch(batch, alice(), limit=1)
            db.session.execute(sa.text("SET lock_timeout = '200ms'"))
            with pytest.raises(sa.exc.OperationalError, match="lock timeout"):
                undo.undo(db.session, app.secret_key, alice(), marked["undoToken"])
            db.session.rollback()
            batch.commit()  # the batch's read and write land together
        finally:
            batch.close()
    undone = as_alice.post(f"{API}/undo", json={"token": marked["undoToken"]})
    assert undone.get_json() == {"restored": 2}
    with app.app_context():
        assert marks() == []
        assert states() == [(1, False, "pending"), (1, False, "pending")]


def _batch_in_flight(user_id: str, group_key: str | None = None) -> Session:
    """A fan-out batch's transaction (its own connection, as a worker's) that has written
    one entry for ``user_id`` through the fan-out's own upsert and not committed: a copy
    of her newest entry as a later event, under ``group_key`` (a new entry), or under its
    own (the event counted into it)."""
    batch = Session(bind=db.engine)
    model = batch.scalars(sa.select(Notification).where(Notification.user_id == user_id)
                          .order_by(Notification.id.desc())).first()
    assert model is not None
    shared = {name: getattr(model, name) for name in (
        "site_id", "category", "variant", "variants", "group_key", "page_id", "comment_id",
        "actor_id", "data", "count", "email_attempts", "created_at", "updated_at")}
    shared |= {"last_event_id": model.last_event_id + 1000, "updated_at": utcnow()}
    if group_key is not None:
        shared["group_key"] = group_key
    upsert(batch, shared, [(user_id, True, EmailState.NONE, None)])
    return batch


def _her_site(user_id: str) -> str | None:
    return db.session.scalar(sa.select(Notification.site_id)
                             .where(Notification.user_id == user_id).limit(1))


def _done_while_held(app, held: Session, work) -> bool:
    """Run ``work`` (in the app's context, its own connection) on a thread while ``held``
    stays uncommitted for a second, then commit ``held`` and wait for ``work``: whether
    it had finished before the commit."""
    def in_context() -> None:
        with app.app_context():
            session = Session(bind=db.engine)
            try:
                work(session)
                session.commit()
            finally:
                session.close()

    thread = threading.Thread(target=in_context, daemon=True)
    thread.start()
    try:
        thread.join(timeout=1.0)
        done_first = not thread.is_alive()
        held.commit()
    finally:
        held.close()
    thread.join(timeout=10)
    assert not thread.is_alive()
    return done_first


def test_the_lock_is_one_schemas_own(postgres_url, fresh_postgres_schema):
    """The lock between the batches and the marks is PostgreSQL's advisory lock, which
    the whole database shares: a wikinotify in another schema of it (another wiki; another
    worker of this test suite) must neither wait for this one's batches nor hold them up,
    where a test's batch in flight held up another test's, and both waited for ever."""
    here, there = sa.create_engine(postgres_url), sa.create_engine(fresh_postgres_schema)
    try:
        with Session(here) as batch, Session(there) as mark, Session(here) as same:
            read_marks.writing_entries(batch)  # a batch in flight, here
            for session in (mark, same):
                session.execute(sa.text("SET LOCAL lock_timeout = '500ms'"))
            read_marks.placing_a_mark(mark)  # there: at once
            with pytest.raises(sa.exc.OperationalError, match="lock timeout"):
                read_marks.placing_a_mark(same)  # here: it waits for the batch
    finally:
        here.dispose()
        there.dispose()


def test_a_mark_never_covers_an_entry_committed_after_it(app, two_entries, database_url):
    """Entry ids are handed out when a batch inserts, not when it commits: while one
    worker's batch is in flight, another's may commit larger ids. A mark that read the
    largest id then would cover the first batch's entry, committed after the click and
    never seen, and it would read as read. "Mark all read" waits for the batches in
    flight (docs/rules.md#read-marks)."""
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite has one writer: a batch's ids are the largest when it commits")
    with app.app_context():
        me, site = alice(), _her_site(alice())
        in_flight = _batch_in_flight(me, "later")
        other = _batch_in_flight(me, "other")  # another worker's batch: a larger id
        other.commit()  # committed first
        other.close()
    marked_first = _done_while_held(
        app, in_flight, lambda session: inbox.mark_all_read(session, me, site))
    with app.app_context():
        later = db.session.scalar(sa.select(read_marks.effective_read_at(Notification, me))
                                  .where(Notification.user_id == me,
                                         Notification.group_key == "later"))
    # Committed after the mark, the entry must read unread; committed before it (the
    # click waited), the mark covers it as it covers every entry she had.
    assert not marked_first and later is not None


def test_a_batch_waits_for_a_mark_being_placed(app, two_entries, database_url):
    """The other way round: a batch that would count an event into an entry the mark being
    placed covers (its coalescing slot) must see the mark, so the event makes a new unread
    entry instead of disappearing into one that reads as read. On both databases: SQLite's
    batch would read the marks before it waited for the write lock."""
    with app.app_context():
        me = alice()
        placing = Session(bind=db.engine)
        inbox.mark_all_read(placing, me, _her_site(me))  # not committed yet

    def coalescing_batch(_session: Session) -> None:
        batch = _batch_in_flight(me)
        batch.commit()
        batch.close()

    written_first = _done_while_held(app, placing, coalescing_batch)
    with app.app_context():
        unread = db.session.scalar(sa.select(sa.func.count()).select_from(Notification)
                                   .where(Notification.user_id == me,
                                          read_marks.unread(Notification, me)))
    assert not written_first and unread == 1
