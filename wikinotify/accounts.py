"""What wikinotify keeps about an account, and forgetting it (§14: a user deleted with
entries pending takes them along). The wiki's tables are not referenced by foreign key, so
the wiki calls :meth:`WikiNotify.forget_user` where it deletes an account."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .models import EmailSchedule, Notification, Preference, SeenMark


def forget_user(session: Session, user_id: str) -> None:
    """Delete the account's entries (and the mail they were waiting for), preferences,
    schedule and seen time, in the caller's transaction."""
    for model in (Notification, Preference, EmailSchedule, SeenMark):
        session.execute(sa.delete(model).where(model.user_id == user_id))
