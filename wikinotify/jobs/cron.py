"""Schedules for ``rq cron wikinotify.jobs.cron --url $REDIS`` (one such process per
instance). The every-minute dispatch is the safety net behind the debounced kick: an
emit whose kick was lost (Redis down, a web process killed) waits a minute at most."""

from __future__ import annotations

import os

from rq import cron

from wikinotify.jobs import dispatch
from wikinotify.queue import FAILURE_TTL, JOB_TIMEOUT

#: The queue the workers listen on (``WIKINOTIFY_QUEUE`` in the app).
QUEUE = os.environ.get("WIKINOTIFY_QUEUE", "wikinotify")

cron.register(
    dispatch, QUEUE, cron="* * * * *", job_timeout=JOB_TIMEOUT, failure_ttl=FAILURE_TTL
)
