"""The ``purge`` job: retention, once a day from ``rq cron`` (docs/rules.md#retention)."""

from __future__ import annotations

from .. import telemetry
from ..inbox import live, retention
from ..instance_settings import instance_settings
from ..models import utcnow
from ..queue import Job
from .appctx import running


def purge() -> dict[str, int]:
    """Delete entries past retention and processed events older than a day; idempotent."""
    with running(Job.PURGE) as (app, st), telemetry.reporting(app, Job.PURGE) as run:
        session = st.db.session()  # the app context's Session, not its scoped proxy
        days = instance_settings(session).retention_days  # read afresh every run
        deleted = run.report = retention.purge(session, now=utcnow(), retention_days=days)
        # Whoever lost an unread entry has a new summary; the purge does not track who,
        # so every badge version is renewed (once a day).
        live.changed_everyone(app)
    return deleted
