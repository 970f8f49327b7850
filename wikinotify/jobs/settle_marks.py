"""The ``settle_read_marks`` job: write each reader's "mark all read" onto her entries
(docs/rules.md#read-marks). Kicked after the request that wrote a mark commits, and run
by the minute's ``rq cron`` too, so a lost or failed run is taken again within a minute:
the work is the marks table itself, so running it twice, or on two workers at once, only
finds less to do."""

from __future__ import annotations

import time

from .. import queue
from ..inbox import read_marks
from ..queue import Job
from .appctx import running

#: A run stops taking batches after this many seconds and asks for another run: well
#: inside RQ's job timeout (:data:`wikinotify.queue.JOB_TIMEOUT`), and it lets the fan-out
#: queue's other jobs in between.
RUN_SECONDS = 60


def settle_read_marks() -> dict[str, int]:
    """Settle every reader's mark, a bounded batch of rows per reader in turn, each batch
    committed on its own; idempotent."""
    with running(Job.SETTLE_READ_MARKS) as (app, st):
        # From here on, a new mark needs a run of its own: this one may have listed them.
        queue.release_kick(app, Job.SETTLE_READ_MARKS)
        session = st.db.session()  # the app context's Session, not its scoped proxy
        report = {"marks": 0, "batches": 0}
        readers = read_marks.marked_readers(session)
        session.commit()
        until = time.monotonic() + RUN_SECONDS
        while readers and time.monotonic() < until:
            left = []
            for user_id in readers:  # in turn: one reader's 100,000 rows hold up no one
                more = read_marks.settle_batch(session, user_id)
                session.commit()
                report["batches"] += 1
                if more:
                    left.append(user_id)
                else:
                    report["marks"] += 1
            readers = left
        if readers:
            queue.kick(app, Job.SETTLE_READ_MARKS, worker=True)
    return report
