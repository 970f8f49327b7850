"""The ``purge`` job: retention, once a day from ``rq cron`` (§12.3)."""

from __future__ import annotations

import logging

from .. import purge as retention
from ..models import utcnow
from ..settings import instance_settings
from ..state import state
from .appctx import app_context

log = logging.getLogger(__name__)


def purge() -> dict[str, int]:
    """Delete entries past retention and processed events older than a day; idempotent."""
    with app_context() as app:
        session = state(app).db.session
        try:
            days = instance_settings(session).retention_days  # read afresh every run
            deleted = retention.purge(session, now=utcnow(), retention_days=days)
        except Exception:
            log.exception("wikinotify: purge failed")
            raise
        finally:
            session.remove()
        log.info("wikinotify: purge deleted %s", deleted)
        return deleted
