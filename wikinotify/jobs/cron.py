"""Schedules for ``rq cron wikinotify.jobs.cron --url $REDIS`` (one such process per
instance). The every-minute dispatch is the safety net behind the debounced kick: an
emit whose kick was lost (Redis down, a web process killed) waits a minute at most. The
every-minute mail run sends what fell due, so a mail leaves within a minute of its
``email_after``; the every-minute delivery run does the same for webhook and chat retries."""

from __future__ import annotations

import os

from rq import cron

from wikinotify.jobs import dispatch, kick_deliveries, kick_mail, purge
from wikinotify.queue import FAILURE_TTL, JOB_TIMEOUT

#: The queue the workers listen on (``WIKINOTIFY_QUEUE`` in the app).
QUEUE = os.environ.get("WIKINOTIFY_QUEUE", "wikinotify")

# The mail entry is kick_mail, a tiny job that asks for a mail run through the kick's
# Redis SET NX hold (held while a run is queued or running): one atomic check that every
# worker and every kick shares, where checking the mail queue and its started-job registry
# would be two reads another process could act between.
for job in (dispatch, kick_mail, kick_deliveries):
    cron.register(job, QUEUE, cron="* * * * *", job_timeout=JOB_TIMEOUT, failure_ttl=FAILURE_TTL)
# Retention, daily at 03:17 (off the hour, where other housekeeping tends to pile up).
cron.register(purge, QUEUE, cron="17 3 * * *", job_timeout=JOB_TIMEOUT, failure_ttl=FAILURE_TTL)
