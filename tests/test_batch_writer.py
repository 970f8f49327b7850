"""The fan-out's batch writer (docs/benchmarks.md#the-fan-out): on PostgreSQL, and on a SQLite
file in WAL mode, a batch is written on a thread of its own while the next one is decided, at
most one batch waits, the batches commit in order, and a failed one stops every batch behind
it."""

from __future__ import annotations

import contextlib
import threading
import time

import psycopg
import pytest
import sqlalchemy as sa

from demo.models import db
from wikinotify.models import Mute
from wikinotify.pipeline.batch_writer import BatchWriter

on_postgresql = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
on_sqlite = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def mute(user_id: str):
    """A batch's write: one row, then the commit, on the writer's session."""
    def write(session):
        session.add(Mute(user_id=user_id, kind="user", target_id="someone"))
        session.commit()
    return write


def fail(session):
    session.execute(sa.text("SELECT 1 / 0"))  # the database refuses it


def muters() -> list[str]:
    db.session.expire_all()
    return list(db.session.scalars(sa.select(Mute.user_id).order_by(Mute.created_at)))


@pytest.fixture
def table_locked(ctx):
    """wikinotify_mutes locked by another connection until the test calls the release
    this yields: a batch that writes to it waits there, as behind a slow database."""
    connection = db.engine.connect()
    connection.execute(sa.text("LOCK TABLE wikinotify_mutes IN ACCESS EXCLUSIVE MODE"))
    yield connection.rollback
    connection.rollback()
    connection.close()


def write_in_thread(writer: BatchWriter, job) -> threading.Thread:
    """``writer.write(job)`` on a thread of its own, which waits while the queue is full.
    The write may raise an earlier batch's failure, once its job is handed over: that is
    the caller's to meet (the tests read it from ``flush``), not the thread's to print."""
    def write() -> None:
        with contextlib.suppress(sa.exc.DBAPIError):
            writer.write(job)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


@on_postgresql
def test_a_batch_is_taken_while_the_one_before_is_still_written(ctx, table_locked):
    with BatchWriter(ctx, db.session) as writer:
        writer.write(mute("first"))  # the writer takes it, and waits on the lock
        writer.write(mute("second"))  # handed over at once: the fan-out decides on
        third = write_in_thread(writer, mute("third"))
        third.join(0.5)
        assert third.is_alive(), "a third batch waits: one waits at most, whatever the audience"
        table_locked()
        third.join(10)
        assert not third.is_alive()
        writer.flush()
        assert muters() == ["first", "second", "third"]


@on_postgresql
def test_a_failed_batch_is_raised_and_the_batches_behind_it_are_not_written(ctx, table_locked):
    writer = BatchWriter(ctx, db.session)
    writer.write(mute("first"))
    writer.write(fail)
    behind = write_in_thread(writer, mute("behind"))  # waits while the failing one waits
    table_locked()
    behind.join(10)
    with pytest.raises(sa.exc.DataError, match="division by zero"):
        writer.flush()
    # Still failed: a run cannot go on past a batch it did not write.
    with pytest.raises(sa.exc.DataError):
        writer.write(mute("later"))
    writer.close()
    assert muters() == ["first"]


@on_postgresql
def test_the_writer_s_failure_leaves_the_block_when_nothing_else_did(ctx):
    with pytest.raises(sa.exc.DataError), BatchWriter(ctx, db.session) as writer:
        writer.write(fail)
    assert muters() == []


def break_own_connection(session):
    """A batch whose connection dies under it, past SQLAlchemy (as a COPY's would): the
    rollback after it fails too."""
    raw = session.connection().connection.driver_connection
    with raw.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")


@on_postgresql
def test_a_batch_that_loses_its_connection_fails_the_run_and_hangs_nothing(ctx):
    writer = BatchWriter(ctx, db.session)
    outcome: dict[str, BaseException] = {}

    def run():
        try:
            writer.write(break_own_connection)
            writer.write(mute("behind"))
            writer.flush()
        except BaseException as error:  # what the fan-out would meet
            outcome["error"] = error
        finally:
            writer.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the run waits on a writer that has stopped"
    assert isinstance(outcome.get("error"), psycopg.OperationalError)
    assert muters() == []
    # The writer's connection left the pool: the next checkout is a live one.
    assert db.session.scalar(sa.text("SELECT 1")) == 1


@on_postgresql
def test_a_batch_alone_is_written_at_once_unless_one_before_it_went_to_the_writer(ctx):
    """An event of one batch has nothing to overlap: no thread, no second connection."""
    writers: list[str] = []

    def note_thread(session):
        writers.append(threading.current_thread().name)

    with BatchWriter(ctx, db.session) as writer:
        writer.write(note_thread, alone=True)
        writer.write(note_thread)  # a batch that others follow: the writer's
        writer.write(note_thread, alone=True)  # behind it, so in order: the writer's too
        writer.flush()
    here = threading.current_thread().name
    assert writers == [here, "wikinotify-fanout-writer", "wikinotify-fanout-writer"]


def test_a_writer_told_to_expect_batches_connects_before_the_first_and_keeps_their_order(ctx):
    """A walk whose first batch is full says so before deciding it: the writer's thread
    starts and opens its connection meanwhile, and a batch alone after that goes to it,
    behind nothing (docs/benchmarks.md#sqlite-the-embedded-default)."""
    writers: list[str] = []

    def note_thread(session):
        writers.append(threading.current_thread().name)

    with BatchWriter(ctx, db.session) as writer:
        opened = db.engine.pool.checkedout()  # the caller's (on SQLite it asked the mode)
        writer.expect()
        writer.flush()
        assert db.engine.pool.checkedout() == opened + 1, "the writer's connection is open"
        writer.write(note_thread)
        writer.write(note_thread, alone=True)
        writer.flush()
    assert writers == ["wikinotify-fanout-writer", "wikinotify-fanout-writer"]


@on_sqlite
def test_on_a_sqlite_file_in_wal_mode_the_caller_reads_while_a_batch_is_written(ctx):
    """The embedded default (WAL, docs/operating.md#sqlite-the-embedded-default): the
    writer's thread holds SQLite's write lock while the fan-out reads on."""
    assert db.session.execute(sa.text("PRAGMA journal_mode")).scalar() == "wal"
    holding, read = threading.Event(), threading.Event()
    writers: list[str] = []

    def slow_batch(session):
        writers.append(threading.current_thread().name)
        session.add(Mute(user_id="first", kind="user", target_id="someone"))
        session.flush()  # the write lock is the writer's until its commit
        holding.set()
        assert read.wait(10), "the caller's read waited for the writer's commit"
        session.commit()

    with BatchWriter(ctx, db.session) as writer:
        writer.write(slow_batch)
        assert holding.wait(10)
        assert muters() == []  # read beside the uncommitted batch, not behind it
        read.set()
        writer.write(mute("second"))
        writer.flush()
        assert muters() == ["first", "second"]
    assert writers == ["wikinotify-fanout-writer"]


@on_sqlite
def test_on_sqlite_a_batch_is_written_in_the_caller_s_session_while_it_holds_the_write_lock(ctx):
    """An event's site-wide deliveries wait in the caller's session for its first batch:
    on SQLite, whose one write lock the caller then holds, a thread's write would wait for
    a commit that comes only after it. The batch is written in the caller's session, after
    the batches before it, and commits with what the caller wrote."""
    writers: list[str] = []

    def note_thread(session):
        writers.append(threading.current_thread().name)
        session.add(Mute(user_id=f"batch{len(writers)}", kind="user", target_id="someone"))
        session.commit()

    with BatchWriter(ctx, db.session) as writer:
        db.session.add(Mute(user_id="caller", kind="page", target_id="7"))
        db.session.flush()  # the caller holds the write lock, as the fan-out's first batch
        writer.write(note_thread)  # written here: committed with the caller's row
        assert sorted(muters()) == ["batch1", "caller"]
        db.session.commit()
        writer.write(note_thread)  # nothing held any more: the writer's
        writer.flush()
    here = threading.current_thread().name
    assert writers == [here, "wikinotify-fanout-writer"]
    assert sorted(muters()) == ["batch1", "batch2", "caller"]


def test_a_sqlite_database_without_wal_writes_every_batch_in_the_caller_s_session(tmp_path):
    """A rollback journal locks readers out while a writer writes; an in-memory database is
    private to its connection: neither gets the thread."""
    from sqlalchemy.orm import Session

    from wikinotify import dialects

    for url in (f"sqlite:///{tmp_path / 'journal.sqlite3'}", "sqlite://"):
        engine = sa.create_engine(url)
        with Session(engine) as session:
            assert not dialects.writes_beside_reads(session), url
        engine.dispose()
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'wal.sqlite3'}")
    with engine.connect() as connection:
        connection.exec_driver_sql("PRAGMA journal_mode = WAL")
    with Session(engine) as session:
        assert dialects.writes_beside_reads(session)
    engine.dispose()


@on_postgresql
def test_what_follows_a_commit_does_not_hold_up_the_next_batch_and_ends_before_the_run(ctx):
    """Telling the open pages (a Redis script per batch) runs on a thread of its own, after
    the batch's commit; the next batch is written meanwhile; the run waits for it."""
    slow_tell, told = threading.Event(), []

    def batch(user_id: str):
        def write(session):
            mute(user_id)(session)

            def tell() -> None:
                assert user_id in muters_elsewhere(), "told before the commit"
                if user_id == "first":
                    assert slow_tell.wait(10)
                told.append(user_id)
            return tell
        return write

    def muters_elsewhere() -> list[str]:
        with db.engine.connect() as connection:
            return list(connection.scalars(sa.select(Mute.user_id)))

    with BatchWriter(ctx, db.session) as writer:
        writer.write(batch("first"))
        writer.write(batch("second"))
        writer.flush()  # both committed while the first batch's tell still waits
        assert muters() == ["first", "second"] and told == []
        slow_tell.set()
    assert told == ["first", "second"]


@on_postgresql
def test_a_slow_teller_holds_the_writer_back_rather_than_piling_up_batches(ctx):
    """At most two commits' follow-ups wait for the teller (each holds a batch's readers):
    a Redis that answers slowly slows the fan-out, it does not fill the worker's memory."""
    released = threading.Event()
    written: list[str] = []

    def batch(user_id: str):
        def write(session):
            mute(user_id)(session)
            written.append(user_id)
            return lambda: released.wait(10)
        return write

    writer = BatchWriter(ctx, db.session)
    for number in range(4):  # the teller holds one, two wait, the writer holds the fourth
        writer.write(batch(f"b{number}"))
    fifth = write_in_thread(writer, batch("b4"))
    time.sleep(1.0)  # time enough for the writer to write every batch, were it not held
    assert writer._tells.qsize() <= 2
    assert "b4" not in written, "the writer went on while the teller was behind"
    released.set()
    fifth.join(10)
    writer.close()
    assert written == ["b0", "b1", "b2", "b3", "b4"]
