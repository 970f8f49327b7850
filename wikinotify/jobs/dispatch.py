"""The ``dispatch`` job: drain the outbox (docs/rules.md#claiming-events). Kicked after every emit
(debounced), run every minute by ``rq cron`` as a safety net, and re-enqueued while events wait. And
the ``fanout_range`` job: one range of a split event (see :func:`wikinotify.pipeline.ranges.split`),
asked for by the split and, as a safety net for ranges whose worker died, by every
dispatch run."""

from __future__ import annotations

import time
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from flask import Flask
from sqlalchemy.orm import Session

from .. import queue, telemetry
from ..categories import FanoutContext
from ..config import config
from ..inbox import live
from ..mail import drain
from ..mail.setup import mail_configured
from ..pipeline import claims, events, ranges
from ..queue import Job
from .appctx import running

#: A claim older than the job timeout plus this margin was abandoned by a dead worker:
#: the default of ``WIKINOTIFY_STALE_CLAIM_SECONDS``.
CLAIM_MARGIN = timedelta(seconds=60)
STALE_CLAIM = timedelta(seconds=queue.JOB_TIMEOUT) + CLAIM_MARGIN


def dispatch() -> dict[str, Any]:
    """Claim a batch of events and fan each out; safe to run twice, or on many workers."""
    with running(Job.DISPATCH) as (app, st), telemetry.reporting(app, Job.DISPATCH) as run:
        # From here on, an emit needs a run of its own: this one may have claimed already.
        queue.release_kick(app, Job.DISPATCH)
        session = st.db.session()  # the app context's Session, not its scoped proxy
        stale_after = _stale_after(app)
        report = run.report = events.DispatchReport()  # reported as it grows
        events.dispatch(
            FanoutContext(host=st.host, session=session),
            st.registry,
            mail_on=mail_configured(app),
            budget=config("DISPATCH_BUDGET", app),
            stale_after=stale_after,
            report=report,
        )
        if report.claimed:  # as the emit's kick did, should that have been lost
            live.wiki_changed(app)
        if claims.events_waiting(session, stale_after=stale_after):
            queue.kick_dispatch(app)
        # Ranges whose worker died, or that wait out a back-off: the minute cron's run
        # hands them to a worker.
        _kick_ranges(app, session, stale_after)
        _kick_mail(app, session)
    return _result(report)


def fanout_range() -> dict[str, Any]:
    """Claim a range of a split event and fan it out, then the next free one, while any is
    and the run's budget lasts. As soon as it holds a claim while more ranges wait, it asks
    for another run: one queued at a time (the kick's hold), taken by the next free worker,
    which asks for the next, so N workers soon hold N ranges. Taking ranges one after
    another in one run, rather than one range per run, is what keeps RQ's forking worker
    from building the app again for every range."""
    reports: list[ranges.RangeReport] = []
    with (running(Job.FANOUT_RANGE) as (app, st),
          telemetry.reporting(app, Job.FANOUT_RANGE) as run):
        run.report = reports  # reported as it grows, however the run ends
        queue.release_kick(app, Job.FANOUT_RANGE)
        session = st.db.session()
        stale_after = _stale_after(app)
        me = claims.worker_id()
        deadline = time.monotonic() + config("DISPATCH_BUDGET", app)
        while time.monotonic() < deadline:
            range_id = claims.claim_range(session, me=me, stale_after=stale_after)
            if range_id is None:
                break
            _kick_ranges(app, session, stale_after)
            reports.append(ranges.fan_out_range(
                FanoutContext(host=st.host, session=session),
                st.registry,
                range_id,
                mail_on=mail_configured(app),
                budget=deadline - time.monotonic(),
                me=me,
            ))
            if reports[-1].deferred or reports[-1].interrupted:
                # Out of time, or the database went away: the range waits for the next run.
                _kick_ranges(app, session, stale_after)
                break
        _kick_mail(app, session)
    return {"ranges": [_result(report) for report in reports]}


def _stale_after(app: Flask) -> timedelta:
    return timedelta(seconds=config("STALE_CLAIM_SECONDS", app))


def _kick_ranges(app: Flask, session: Session, stale_after: timedelta) -> None:
    if claims.ranges_waiting(session, stale_after=stale_after):
        queue.kick(app, Job.FANOUT_RANGE, worker=True)


def _kick_mail(app: Flask, session: Session) -> None:
    # With no email delay, what was just written is due now: no need to wait for the
    # minute cron.
    if drain.mail_waiting(session):
        queue.kick(app, Job.SEND_MAIL)


def _result(report: events.DispatchReport | ranges.RangeReport) -> dict[str, Any]:
    return {k: str(v) if k == "started_at" else v for k, v in asdict(report).items()}
