"""The ``deliver`` job: webhook and chat deliveries (docs/channels.md#webhooks), on the deliveries
queue. Kicked when a fan-out writes deliveries or an owner asks for a test, asked for every
minute by ``rq cron`` (through :func:`kick_deliveries`) for the retries that fall due, and
re-enqueued while deliveries are due. Bounded per run by ``WIKINOTIFY_DELIVERY_BATCH``."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from .. import queue, telemetry
from ..outbound import engine
from ..queue import Job
from .appctx import running


def deliver() -> dict[str, Any]:
    """Send what is due; safe to run twice, or on many workers (each claim skips the
    rows another run holds)."""
    with running(Job.DELIVER) as (app, st), telemetry.reporting(app, Job.DELIVER) as run:
        # From here on, a new delivery needs a run of its own: this one may be past it.
        queue.release_kick(app, Job.DELIVER)
        session = st.db.session()  # the app context's Session, not its scoped proxy
        report = run.report = engine.RunReport()  # reported as it grows, however it ends
        engine.run(app, session, st.host, st.registry, report)
        if engine.waiting(session):
            engine.kick(app)
    return {k: str(v) if k == "started_at" else v for k, v in asdict(report).items()}


def kick_deliveries() -> bool:
    """The minute cron's entry: ask for a delivery run through the kick's hold."""
    with running(Job.KICK_DELIVERIES) as (app, _):
        return engine.kick(app)
