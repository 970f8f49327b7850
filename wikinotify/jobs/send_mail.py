"""The ``send_mail`` job: the mail drain (§10.3). Run every minute by ``rq cron``, kicked
when a fan-out leaves mail due at once, and re-enqueued while mail is due."""

from __future__ import annotations

import logging
from dataclasses import asdict

from .. import drain, queue
from ..settings import instance_settings
from ..state import config, mail_configured
from .appctx import running

log = logging.getLogger(__name__)


def send_mail() -> dict:
    """Send what is due, one mail per (user, site); safe to run twice, or on many workers."""
    with running("send_mail") as (app, st):
        queue.release_kick(app, "send_mail")
        if not mail_configured(app):
            log.info("wikinotify: mail is not configured; nothing sent")
            return {}
        session = st.db.session
        # Settings are read afresh by every run: a new batch size needs no restart.
        batch = instance_settings(session).mail_batch_size
        limit = config("MAIL_HOURLY_LIMIT", app)
        report = drain.Drain(session, st.host, st.registry, hourly_limit=limit).run(batch)
        if drain.mail_waiting(session):
            queue.kick(app, "send_mail")
    log.info("wikinotify: send_mail %s", report)
    return {k: str(v) if k == "started_at" else v for k, v in asdict(report).items()}
