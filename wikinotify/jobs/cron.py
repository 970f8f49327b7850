"""Schedules for ``rq cron wikinotify.jobs.cron --url $REDIS`` (one such process per
instance). The every-minute dispatch is the safety net behind the debounced kick: an
emit whose kick was lost (Redis down, a web process killed) waits a minute at most. The
every-minute mail run sends what fell due, so a mail leaves within a minute of its
``email_after``; the every-minute delivery run does the same for webhook and chat retries.

What runs when is :data:`wikinotify.queue.SCHEDULE`. ``rq cron`` imports this module and
runs the registrations it makes, so the queue each job goes to must be known as it loads:
it is the wiki's app's, built here the way a worker builds it
(:func:`wikinotify.jobs.appctx.app_context`), so a queue renamed in the app's config
(``WIKINOTIFY_QUEUE``) is the one the workers, the kicks and the cron share.
"""

from __future__ import annotations

from ..queue import SCHEDULE, schedule
from .appctx import app_context

# Loading this module is the cron's start-up, so it alone of wikinotify's modules builds
# the app as it is imported; nothing else imports it.
with app_context() as app:
    for job, when in SCHEDULE:
        schedule(app, job, when)
