"""The hourly limit (``WIKINOTIFY_MAIL_HOURLY_LIMIT``): the most mails one person gets in any
hour, over a window that slides."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..models import EmailState, Notification

#: The window ``WIKINOTIFY_MAIL_HOURLY_LIMIT`` counts mails in.
HOUR = timedelta(hours=1)


def recent_mails(
    session: Session, user_ids: Sequence[str], now: datetime
) -> dict[str, set[datetime]]:
    """The mails each of ``user_ids`` got in the last hour, as their times.

    A mail's rows are all marked ``sent`` with one ``emailed_at``, so each distinct
    ``emailed_at`` is one mail.
    """
    rows = session.execute(
        sa.select(Notification.user_id, Notification.emailed_at)
        .where(
            Notification.user_id.in_(user_ids),
            Notification.email_state == EmailState.SENT,
            Notification.emailed_at > now - HOUR,
        )
        .distinct()
    )
    recent: dict[str, set[datetime]] = {}
    for user_id, emailed_at in rows:
        if emailed_at is not None:  # a ``sent`` row within the hour has its emailed_at
            recent.setdefault(user_id, set()).add(emailed_at)
    return recent


def mails_allowed_from(
    recent: Iterable[datetime], now: datetime, hourly_limit: int
) -> datetime | None:
    """When the reader who got the mails ``recent`` may next be mailed, if the last hour
    already holds ``hourly_limit`` of them; ``None`` if they may be mailed now. The
    window slides: the next mail may leave an hour after the ``hourly_limit``-th most
    recent one."""
    within = sorted((t for t in recent if t > now - HOUR), reverse=True)[:hourly_limit]
    if len(within) < hourly_limit:
        return None
    return within[-1] + HOUR
