"""When a notification's email is due (§10.2)."""

from __future__ import annotations

from datetime import datetime, timedelta

from ..categories import Category
from ..host import UserFacts
from ..models import InstanceSettings


def email_after_for(
    user: UserFacts, now: datetime, instance: InstanceSettings, category: Category
) -> datetime:
    """The one function that says when an entry's email goes out.

    Today: a short window after the entry first appears (``email_delay``), so that a burst
    of saves joins one mail. It is the seam hourly, daily and weekly digests attach to
    (§10.5): they change this function and nothing else, and ``category.digest`` says
    which categories they may hold back.
    """
    return now + timedelta(seconds=instance.email_delay_seconds)
