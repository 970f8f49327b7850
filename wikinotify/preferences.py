"""Preferences (§5): per user, per category, per channel; a row only where it differs
from the category's default."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from flask_babel import gettext
from sqlalchemy.orm import Session

from . import dialects
from .categories import Category, Channels
from .models import EmailSchedule, Preference, utcnow

#: Channel name in the API and the table → index in :class:`Channels`.
CHANNEL_FIELDS = {"inApp": "in_app", "email": "email"}


@dataclass(frozen=True)
class CategoryChoice:
    """One category as a user sees it: the effective choice and the defaults."""

    category: Category
    effective: Channels
    defaults: Channels


def stored_rows(session: Session, user_id: str) -> dict[tuple[str, str], bool]:
    """The user's stored (category, channel) → enabled rows."""
    rows = session.execute(
        sa.select(Preference.category, Preference.channel, Preference.enabled).where(
            Preference.user_id == user_id
        )
    )
    return {(category, channel): enabled for category, channel, enabled in rows}


def effective_defaults(category: Category, mail_on: bool) -> Channels:
    """The category's defaults where this instance can send mail; email off otherwise."""
    return Channels(category.defaults.in_app, category.defaults.email and mail_on)


def choices(
    session: Session, user_id: str, categories: Iterable[Category], *, mail_on: bool
) -> list[CategoryChoice]:
    """What ``user_id`` gets for each category: stored rows over defaults, and email off
    everywhere while mail is not configured (§4.2)."""
    stored = stored_rows(session, user_id)
    result = []
    for category in categories:
        in_app = stored.get((category.key, "inApp"), category.defaults.in_app)
        email = stored.get((category.key, "email"), category.defaults.email) and mail_on
        result.append(
            CategoryChoice(category, Channels(in_app, email), effective_defaults(category, mail_on))
        )
    return result


def save(
    session: Session,
    user_id: str,
    categories: Iterable[Category],
    wanted: Mapping[str, Mapping[str, bool]],
    *,
    mail_on: bool,
) -> list[str]:
    """Store ``wanted`` (``{key: {"inApp": bool, "email": bool}}``) for ``user_id``.

    Only rows that differ from the defaults are kept: a value set back to its default
    deletes its row. While mail is not configured, the email channel is left as it was,
    so saving a page that shows email as off does not erase what the user had chosen.
    Returns the keys of the categories whose effective choice changed.
    """
    channels = ["inApp", "email"] if mail_on else ["inApp"]
    stored = stored_rows(session, user_id)
    changed: list[str] = []
    for category in categories:
        category_changed = False
        for channel in channels:
            default = getattr(category.defaults, CHANNEL_FIELDS[channel])
            current = stored.get((category.key, channel), default)
            value = wanted[category.key][channel]
            if value == current:
                continue
            category_changed = True
            _store(session, user_id, category.key, channel, value, default)
        if category_changed:
            changed.append(category.key)
    return changed


def _store(
    session: Session, user_id: str, key: str, channel: str, value: bool, default: bool
) -> None:
    where = (
        Preference.user_id == user_id,
        Preference.category == key,
        Preference.channel == channel,
    )
    if value == default:
        session.execute(sa.delete(Preference).where(*where))
        return
    # One upsert, not a read then an insert: two requests saving at once (four one-click
    # POSTs of the same mail, say) must both succeed.
    now = utcnow()
    insert = dialects.insert(session, Preference.__table__).values(
        user_id=user_id, category=key, channel=channel, enabled=value, updated_at=now
    )
    session.execute(
        insert.on_conflict_do_update(
            index_elements=[Preference.user_id, Preference.category, Preference.channel],
            set_={"enabled": value, "updated_at": now},
        )
    )


def stop_all_email(session: Session, user_id: str, categories: Iterable[Category]) -> list[str]:
    """Turn email off for every category in one go (the foot of the page, and the
    unsubscribe page's "Stop all notification email")."""
    categories = list(categories)
    current = choices(session, user_id, categories, mail_on=True)
    wanted = {c.category.key: {"inApp": c.effective.in_app, "email": False} for c in current}
    return save(session, user_id, categories, wanted, mail_on=True)


def email_schedule(session: Session, user_id: str) -> str:
    """The user's email delivery schedule; ``immediate`` unless they chose otherwise."""
    schedule = session.scalar(
        sa.select(EmailSchedule.schedule).where(EmailSchedule.user_id == user_id)
    )
    return schedule or "immediate"


@dataclass(frozen=True)
class Overview:
    """Everything the preferences page and ``GET /api/preferences`` show."""

    choices: list[CategoryChoice]
    email_available: bool
    site_enabled: bool
    email_schedule: str

    def as_json(self) -> dict[str, Any]:
        return {
            "emailAvailable": self.email_available,
            "siteEnabled": self.site_enabled,
            "emailSchedule": self.email_schedule,
            "categories": [
                {
                    "key": c.category.key,
                    "section": c.category.section,
                    "title": gettext(c.category.title),
                    "description": gettext(c.category.description),
                    "optIn": c.category.opt_in,
                    "inApp": c.effective.in_app,
                    "email": c.effective.email,
                    "defaults": c.defaults.as_json(),
                }
                for c in self.choices
            ],
        }


def overview(
    session: Session,
    categories: Iterable[Category],
    user_id: str,
    *,
    mail_on: bool,
    site_on: bool,
) -> Overview:
    return Overview(
        choices=choices(session, user_id, categories, mail_on=mail_on),
        email_available=mail_on,
        site_enabled=site_on,
        email_schedule=email_schedule(session, user_id),
    )
