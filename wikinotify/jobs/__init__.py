"""RQ jobs, run by a plain ``rq worker --url $REDIS wikinotify wikinotify-mail
wikinotify-deliveries`` in the wiki's directory.

Each job is a module-level function that takes no ORM objects, reloads what it needs,
is safe to run twice, and logs and re-raises so RQ records a failure. Their names
(:class:`wikinotify.queue.Job`), the queue each runs on, RQ's limits and the way onto a
queue (``enqueue``, and ``schedule`` for ``rq cron``) are in one place, :mod:`wikinotify.queue`.
"""

from __future__ import annotations

from .deliver import deliver, kick_deliveries
from .dispatch import dispatch, fanout_range
from .purge import purge
from .send_mail import kick_mail, send_mail
from .settle_marks import settle_read_marks

__all__ = [
    "deliver", "dispatch", "fanout_range", "kick_deliveries", "kick_mail", "purge", "send_mail",
    "settle_read_marks",
]
