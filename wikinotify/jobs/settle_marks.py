"""The ``settle_read_marks`` job: write each reader's "mark all read" onto her entries
(docs/rules.md#read-marks). Kicked after the request that wrote a mark commits, and run
by the minute's ``rq cron`` too: that is its retry, so a lost or failed run is taken
again within a minute. The work is the marks table itself, so running it twice, or on two
workers at once, only finds less to do."""

from __future__ import annotations

from .. import queue, telemetry
from ..inbox import read_marks
from ..queue import Job
from .appctx import running

#: A run stops taking batches after this many seconds and asks for another run: well
#: inside RQ's job timeout (:data:`wikinotify.queue.JOB_TIMEOUT`), and it lets the fan-out
#: queue's other jobs in between.
RUN_SECONDS = 60


def settle_read_marks() -> dict[str, int]:
    """Settle every reader's mark, a bounded batch at a time; idempotent."""
    job = Job.SETTLE_READ_MARKS
    with running(job) as (app, st), telemetry.reporting(app, job) as run:
        # From here on, a new mark needs a run of its own: this one may have listed them.
        queue.release_kick(app, job)
        report = run.report = read_marks.settle_all(st.db.session(), RUN_SECONDS)
        if report["left"]:
            queue.kick(app, job, worker=True)
    return report
