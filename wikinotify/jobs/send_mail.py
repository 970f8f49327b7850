"""The ``send_mail`` job: the mail drain (docs/rules.md#the-mail-run), on the mail queue. Asked for
every minute by ``rq cron`` (through :func:`kick_mail`), kicked when a fan-out leaves mail due at
once, and re-enqueued while mail is due."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from flask import Flask
from rq import Worker

from .. import queue, telemetry
from ..config import config
from ..instance_settings import instance_settings
from ..mail import drain, relay
from ..mail.setup import mail_problem
from ..queue import Job
from ..state import State
from .appctx import running

log = logging.getLogger(__name__)


#: A run shares its batch with idle mail workers only in shares of at least this many
#: (user, site) pairs: a smaller share would cost its worker more to start than it saves.
MIN_SHARE = 50


def send_mail(pairs: Sequence[Sequence[str | None]] | None = None) -> dict[str, Any]:
    """Send what is due, one mail per (user, site); safe to run twice, or on many workers.

    A run whose batch is large hands shares of it to the mail workers that are idle, each
    one a run of its own (``pairs``: just those (user, site) pairs) with its own SMTP
    connection: more worker processes send faster. Only the run that shared re-kicks.
    """
    with (running(Job.SEND_MAIL) as (app, st),
          telemetry.reporting(app, Job.SEND_MAIL) as run):
        if pairs is not None:
            report = _drain(app, st, run, pairs=[(str(u), s) for u, s in pairs])
        else:
            queue.hold_mail_run(app)
            try:
                report = _drain(app, st, run, share=lambda batch: _share(app, batch))
            finally:
                queue.release_kick(app, Job.SEND_MAIL)
            # A stopped run leaves the rest to the minute cron: asking again at once would
            # only meet the same relay trouble.
            if (report is not None and report.stopped is None
                    and drain.mail_waiting(st.db.session())):
                queue.kick(app, Job.SEND_MAIL)
    if report is None:
        return {}
    return {k: str(v) if k == "started_at" else v for k, v in asdict(report).items()}


def _share(app: Flask, batch: list[drain.Pair]) -> list[drain.Pair]:
    """Hand an equal share of ``batch`` to each idle worker of the mail queue, as a job of
    its own; return this run's share. Shares interleave, so each starts with the oldest."""
    mail_queue = queue.queue(app, job=Job.SEND_MAIL)
    idle = sum(1 for worker in Worker.all(queue=mail_queue) if worker.get_state() == "idle")
    parts = min(idle + 1, len(batch) // MIN_SHARE)
    if parts <= 1:
        return batch
    for n in range(1, parts):
        queue.enqueue(app, Job.SEND_MAIL, pairs=batch[n::parts])
    log.info("wikinotify: send_mail shares its %d mails with %d idle workers", len(batch),
             parts - 1)
    return batch[::parts]


def _drain(
    app: Flask,
    st: State,
    run: telemetry.Reporting,
    pairs: list[drain.Pair] | None = None,
    share: Callable[[list[drain.Pair]], list[drain.Pair]] | None = None,
) -> drain.DrainReport | None:
    if (problem := mail_problem(app)) is not None:
        log.info("wikinotify: mail cannot be sent; nothing sent. %s", problem)
        return None
    if relay.paused(app):
        log.info("wikinotify: mail is paused after a configuration failure; nothing sent")
        return None
    session = st.db.session()  # the app context's Session, not its scoped proxy
    # Settings are read afresh by every run: a new batch size needs no restart.
    batch = relay.batch(app, instance_settings(session).mail_batch_size)
    # Reported as it grows: a run that fails still counts what it sent.
    report = run.report = drain.DrainReport()
    drain.Drain(
        session,
        st.host,
        st.registry,
        hourly_limit=config("MAIL_HOURLY_LIMIT", app),
        lease=timedelta(seconds=config("MAIL_LEASE", app)),
        smtp_timeout=config("SMTP_TIMEOUT", app),
        report=report,
    ).run(batch, pairs=pairs, share=share)
    relay.after_run(app, report.stopped, batch_used=batch, mails=report.mails)
    return report


def kick_mail() -> bool:
    """The minute cron's mail entry: ask for a mail run through the same hold as every
    kick, so none is enqueued while one is queued or running (a hanging relay)."""
    with running(Job.KICK_MAIL) as (app, _):
        return queue.kick(app, Job.SEND_MAIL)
