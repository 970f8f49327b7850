"""The fan-out writes a batch while it decides the next one.

Deciding who is told is the worker's Python (host lookups, access, preferences); writing
them is the database's work (a COPY and a merge), then Redis's (the open badges). Done one
after the other, each waits for the other: the fan-out ran at about half the rate of its
own write (docs/benchmarks.md#the-fan-out). On PostgreSQL a :class:`BatchWriter` hands each batch to
a thread of its own, with its own session and connection, and the fan-out goes on deciding the
next batch meanwhile; the thread waits on the database with the GIL released, so the two
overlap on a machine's cores. What follows a commit (the open pages of those it told, one
Redis script for thousands of readers) is a third thread's, the teller's, so the writer
starts on the next batch meanwhile; the run waits for the teller only at its end.

What does not change: each batch's rows, deliveries and cursor commit together, in the
order the batches were decided, so a run that dies resumes past exactly the batches that
committed. At most one batch waits while another is written, so a worker holds three
batches at most whatever the audience. Whoever moves the cursor otherwise (a deferral, a
split, the event marked processed) first waits for the writer with :meth:`flush`; the mark
does not wait for the teller (:meth:`close`).

On SQLite the same holds for a file in WAL mode (the embedded default,
docs/operating.md#sqlite-the-embedded-default): its one writer and its readers go on side by
side, and pysqlite releases the GIL while SQLite works, so the writer's thread writes while
the fan-out reads and decides. SQLite has one writer, though: while the caller's own session
holds the write lock (it wrote something not yet committed, an event's site-wide deliveries,
say), a thread's write would wait for a commit the caller makes only after that write, so
such a batch is written at once in the caller's session, with what it wrote. (The caller must
not start writing while batches it handed over wait: the fan-out writes before its first batch
or after :meth:`BatchWriter.flush`.) An in-memory
database (private to its connection) or one with a rollback journal (a writer locks readers
out) writes every batch at once in the caller's session, as before.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from types import TracebackType

from flask import Flask
from sqlalchemy.orm import Session

from .. import dialects
from ..state import state

log = logging.getLogger(__name__)

#: What follows a batch's commit: telling the open pages of those it told (Redis).
Tell = Callable[[], None]
#: A batch's write: its statements, then the commit, on the session it is given; it
#: returns what is to follow the commit, if anything.
Job = Callable[[Session], Tell | None]
#: How often a wait on the writer looks whether its thread is still there.
_CHECK_SECONDS = 1.0


class BatchWriter:
    """Writes the batches of one fan-out run, in order; a context manager that waits for
    the last batch on the way out (and, if the run failed, for the one being written)."""

    def __init__(self, app: Flask, session: Session) -> None:
        self._app = app
        self._session = session
        self._threaded = dialects.writes_beside_reads(session)
        #: One writer at a time (SQLite): see :meth:`write`.
        self._one_writer = not dialects.is_postgresql(session)
        # One batch waiting at most: the fan-out runs a batch ahead of its writes.
        self._jobs: queue.Queue[Job | None] = queue.Queue(maxsize=1)
        self._thread: threading.Thread | None = None
        # What follows each commit, on a thread of its own (the teller): the writer goes on
        # to the next batch's statements while Redis hears of the last one's readers. Two
        # wait at most: a slow Redis holds the writer back rather than piling up readers.
        self._tells: queue.Queue[Tell | None] = queue.Queue(maxsize=2)
        self._teller: threading.Thread | None = None
        #: The batch write that failed; kept, so every batch behind it is dropped.
        self._failure: BaseException | None = None
        self._reported = False

    def write(self, job: Job, *, alone: bool = False) -> None:
        """Write a batch: at once on SQLite; else hand it to the writer, after waiting
        while one is already waiting. A failed earlier batch is raised here.

        ``alone``: no batch is known to follow it (its category's last). Written at once
        in the caller's session too, unless a batch before it went to the writer: an event
        of one batch (nearly every event) has nothing to overlap, and a thread would only
        cost it a second connection.

        Also at once, after the batches before it, where the caller's session holds the
        database's one write lock (SQLite): the thread would wait for it."""
        if (not self._threaded or (alone and self._thread is None)
                or (self._one_writer and dialects.holds_write_lock(self._session))):
            self.flush()  # the batches handed over before it commit first, in order
            if (tell := job(self._session)) is not None:
                tell()
            return
        self._raise_failure()
        self._start()
        self._put(job)
        self._raise_failure()

    def expect(self) -> None:
        """More than one batch is coming (a walk's first batch is full): start the writer
        now, and have it open its connection while the caller decides the first batch.
        Otherwise the thread's start, its session and its connection (on SQLite a new one
        in each work horse, its settings and its reading of the schema) came after that
        batch, on the cores where the caller then decides the next one. Nothing where the
        batches are written in the caller's session."""
        if self._threaded and self._thread is None:
            self._start()
            self._put(_connect)

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="wikinotify-fanout-writer", daemon=True
            )
            self._thread.start()

    def flush(self) -> None:
        """Wait until every batch handed over is committed; raise the first that failed."""
        if self._thread is not None:
            # Queue.join() has no timeout: wait on the count it waits on, a second at a
            # time, so a writer gone (which :meth:`_run` should never allow) cannot hang us.
            with self._jobs.all_tasks_done:
                while self._jobs.unfinished_tasks and self._writer_alive():
                    self._jobs.all_tasks_done.wait(_CHECK_SECONDS)
        self._raise_failure()

    def close(self) -> None:
        """Wait for the batches handed over and what follows their commits, then stop the
        threads.

        A run marks its event (or range) done before this, inside the writer's block, once
        :meth:`flush` has seen its last batch commit: the entries are then there for every
        reader, and telling the open pages is what follows a commit, never part of it (a
        page that missed its news reads it at its next poll). Marking after this waited
        for the last batch's Redis script, 5 ms of a 10,000-watcher fan-out on SQLite on a
        quiet machine and 20 to 30 on a busy one (docs/benchmarks.md#sqlite-the-embedded-default).
        The job still ends only after this."""
        if self._thread is not None:
            self._put(None)
            while self._thread.is_alive():
                self._thread.join(_CHECK_SECONDS)
            self._thread = None
        if self._teller is not None:
            self._tell_later(None)
            while self._teller.is_alive():
                self._teller.join(_CHECK_SECONDS)
            self._teller = None

    def _put(self, job: Job | None) -> None:
        """Hand ``job`` over, waiting while one waits; never on a writer that is gone."""
        while True:
            try:
                self._jobs.put(job, timeout=_CHECK_SECONDS)
                return
            except queue.Full:
                if not self._writer_alive():
                    return

    def _writer_alive(self) -> bool:
        if self._thread is not None and self._thread.is_alive():
            return True
        if self._failure is None:
            self._failure = RuntimeError("the fan-out's batch writer stopped unexpectedly")
        return False

    def __enter__(self) -> BatchWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
        # A failure of the run's own is the one raised; a writer's surfaces here when
        # the caller has not met it yet (it ended without a flush).
        if kind is None and not self._reported:
            self._raise_failure()
        elif self._failure is not None and not self._reported:
            log.warning("wikinotify: a fan-out batch also failed to write: %s", self._failure)

    def _raise_failure(self) -> None:
        """Raise the failed batch's error: the run cannot go on past it."""
        if self._failure is not None:
            self._reported = True
            raise self._failure

    def _run(self) -> None:
        """Take batches until the ``None`` of :meth:`close`, whatever happens: a failure is
        recorded first (the fan-out raises it), and every batch behind it is taken and
        dropped, its cursor would skip the failed one's rows; so the fan-out is never
        left waiting on a queue nobody takes from."""
        # An app context of its own, so the session is this thread's (Flask-SQLAlchemy
        # scopes sessions by app context) and work after its commits finds the app.
        context = self._app.app_context()
        session: Session | None = None
        pushed = False
        try:
            context.push()
            pushed = True
            session = state(self._app).db.session()
        except BaseException as error:
            self._failure = error
        while (job := self._jobs.get()) is not None:
            try:
                if self._failure is None and session is not None:
                    if (tell := job(session)) is not None:
                        self._tell_later(tell)
            except BaseException as error:
                self._failure = error
                _discard(session)
            finally:
                self._jobs.task_done()
        self._jobs.task_done()
        try:
            if pushed:
                context.pop()  # Flask-SQLAlchemy's teardown closes the session
        except Exception as error:  # the batches are written; the thread just ends
            log.warning("wikinotify: the fan-out's writer could not close its session: %s",
                        error)

    def _tell_later(self, tell: Tell | None) -> None:
        """Hand what follows a commit to the teller, started at the first, waiting while
        two wait (``None``: the last); never on a teller that is gone."""
        if self._teller is None:
            self._teller = threading.Thread(
                target=self._tell_each, name="wikinotify-fanout-teller", daemon=True
            )
            self._teller.start()
        while self._teller.is_alive():
            try:
                self._tells.put(tell, timeout=_CHECK_SECONDS)
                return
            except queue.Full:
                continue
        if tell is not None:
            log.warning("wikinotify: the fan-out's teller stopped; open pages will read "
                        "this batch's news at their next poll")

    def _tell_each(self) -> None:
        """Run each commit's follow-up, in order, until the ``None`` of :meth:`close`. A
        failure is logged, not raised: the batch is committed, and a page that missed its
        news reads it at its next poll."""
        with self._app.app_context():
            while (tell := self._tells.get()) is not None:
                try:
                    tell()
                except Exception as error:
                    log.warning("wikinotify: could not tell the open pages of a batch: %s",
                                error)


def _connect(session: Session) -> None:
    """The writer's first job: its connection, opened (:meth:`BatchWriter.expect`)."""
    session.connection()


def _discard(session: Session | None) -> None:
    """Roll back a failed batch. The failure may have broken the connection (a database
    restart, a COPY cut off), and then the rollback raises too: the connection is dropped
    from the pool instead, and the batch's transaction dies with it."""
    if session is None:
        return
    try:
        session.rollback()
    except Exception:
        try:
            session.invalidate()
        except Exception as error:  # the failure is recorded; nothing more to save
            log.warning("wikinotify: could not drop a failed batch's connection: %s", error)
