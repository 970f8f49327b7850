"""The fan-out writes a batch while it decides the next one.

Deciding who is told is the worker's Python (host lookups, access, preferences); writing
them is the database's work (a COPY and a merge), then Redis's (the open badges). Done one
after the other, each waits for the other: the fan-out ran at about half the rate of its
own write (issue 13). On PostgreSQL a :class:`BatchWriter` hands each batch to a thread
of its own, with its own session and connection, and the fan-out goes on deciding the
next batch meanwhile; the thread waits on the database and on Redis with the GIL released,
so the two overlap on a machine's cores.

What does not change: each batch's rows, deliveries and cursor commit together, in the
order the batches were decided, so a run that dies resumes past exactly the batches that
committed. At most one batch waits while another is written, so a worker holds three
batches at most whatever the audience. Whoever moves the cursor otherwise (a deferral, a
split, the event marked processed) first waits for the writer with :meth:`flush`.

On SQLite each batch is written at once in the caller's session, as before: SQLite has
one writer at a time, and an in-memory database is private to its connection.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from types import TracebackType

from flask import Flask
from sqlalchemy.orm import Session

from . import dialects
from .state import state

#: A batch's write: its statements, then the commit, on the session it is given.
Job = Callable[[Session], None]


class BatchWriter:
    """Writes the batches of one fan-out run, in order; a context manager that waits for
    the last batch on the way out (and, if the run failed, for the one being written)."""

    def __init__(self, app: Flask, session: Session) -> None:
        self._app = app
        self._session = session
        self._threaded = dialects.is_postgresql(session)
        # One batch waiting at most: the fan-out runs a batch ahead of its writes.
        self._jobs: queue.Queue[Job | None] = queue.Queue(maxsize=1)
        self._thread: threading.Thread | None = None
        #: The batch write that failed; kept, so every batch behind it is dropped.
        self._failure: BaseException | None = None
        self._reported = False

    def write(self, job: Job) -> None:
        """Write a batch: at once on SQLite; else hand it to the writer, after waiting
        while one is already waiting. A failed earlier batch is raised here."""
        if not self._threaded:
            job(self._session)
            return
        self._raise_failure()
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="wikinotify-fanout-writer", daemon=True
            )
            self._thread.start()
        self._jobs.put(job)

    def flush(self) -> None:
        """Wait until every batch handed over is committed; raise the first that failed."""
        if self._thread is not None:
            self._jobs.join()
        self._raise_failure()

    def close(self) -> None:
        """Wait for the batches handed over, then stop the thread."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None

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

    def _raise_failure(self) -> None:
        """Raise the failed batch's error: the run cannot go on past it."""
        if self._failure is not None:
            self._reported = True
            raise self._failure

    def _run(self) -> None:
        # An app context of its own, so the session is this thread's (Flask-SQLAlchemy
        # scopes sessions by app context) and work after its commits finds the app.
        with self._app.app_context():
            session = state(self._app).db.session()
            while (job := self._jobs.get()) is not None:
                try:
                    # After a failure the batches behind it are dropped: their cursor
                    # would skip the failed one's rows.
                    if self._failure is None:
                        job(session)
                except BaseException as error:  # handed to the fan-out, which fails the event
                    session.rollback()
                    self._failure = error
                finally:
                    self._jobs.task_done()
            self._jobs.task_done()
