"""The fan-out's batch writer (docs/benchmarks.md#the-fan-out): on PostgreSQL a batch is written on
a thread of its own while the next one is decided, at most one batch waits, the batches commit in
order, and a failed one stops every batch behind it."""

from __future__ import annotations

import contextlib
import threading

import psycopg
import pytest
import sqlalchemy as sa

from demo.models import db
from wikinotify.models import Mute
from wikinotify.pipeline.batch_writer import BatchWriter

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


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
