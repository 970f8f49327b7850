"""The ``dispatch`` job: drain the outbox (§7). Kicked after every emit (debounced), run
every minute by ``rq cron`` as a safety net, and re-enqueued while events wait."""

from __future__ import annotations

import logging
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from .. import fanout, queue
from ..categories import FanoutContext
from ..config import config, mail_configured
from ..mail import drain
from .appctx import running

log = logging.getLogger(__name__)

#: A claim older than the job timeout plus this margin was abandoned by a dead worker:
#: the default of ``WIKINOTIFY_STALE_CLAIM_SECONDS``.
CLAIM_MARGIN = timedelta(seconds=60)
STALE_CLAIM = timedelta(seconds=queue.JOB_TIMEOUT) + CLAIM_MARGIN


def dispatch() -> dict[str, Any]:
    """Claim a batch of events and fan each out; safe to run twice, or on many workers."""
    with running("dispatch") as (app, st):
        # From here on, an emit needs a run of its own: this one may have claimed already.
        queue.release_kick(app, "dispatch")
        session = st.db.session()  # the app context's Session, not its scoped proxy
        stale_after = timedelta(seconds=config("STALE_CLAIM_SECONDS", app))
        report = fanout.dispatch(
            FanoutContext(host=st.host, session=session),
            st.registry,
            mail_on=mail_configured(app),
            budget=config("DISPATCH_BUDGET", app),
            stale_after=stale_after,
        )
        if fanout.events_waiting(session, stale_after=stale_after):
            queue.kick_dispatch(app)
        # With no email delay, what was just written is due now: no need to wait for the
        # minute cron.
        if drain.mail_waiting(session):
            queue.kick(app, "send_mail")
    log.info("wikinotify: dispatch %s", report)
    return {k: str(v) if k == "started_at" else v for k, v in asdict(report).items()}
