"""Instance settings (docs/rules.md#instance-settings) and the per-site switch
(docs/rules.md#the-site-switch)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from . import dialects
from .models import InstanceSettings, SiteSwitch, new_unsubscribe_secret, utcnow


def instance_settings(session: Session) -> InstanceSettings:
    """The settings row, created with a fresh unsubscribe secret if the install has none.

    ``flask db upgrade`` writes the row; this covers a schema built with ``create_all``.
    Concurrent first calls are safe: the row's id is fixed, so only one insert can win.
    """
    row = session.get(InstanceSettings, 1)
    if row is None:
        insert = dialects.insert(session, InstanceSettings).on_conflict_do_nothing().values(
            id=1, unsubscribe_secret=new_unsubscribe_secret(), updated_at=utcnow()
        )
        session.execute(insert)
        row = session.get_one(InstanceSettings, 1)
    return row


#: Asked on every request of the inbox: made once, then only bound.
_SWITCH = sa.select(SiteSwitch.enabled).where(SiteSwitch.site_id == sa.bindparam("site_id"))


def site_enabled(session: Session, site_id: str | None) -> bool:
    """Whether notifications are on for ``site_id``; instance-scoped (None) always are."""
    if site_id is None:
        return True
    enabled = session.scalar(_SWITCH, {"site_id": site_id})
    return enabled is not False


def set_site_enabled(session: Session, site_id: str, enabled: bool) -> None:
    """Turn notifications on or off for one site, keeping entries and preferences."""
    switch = session.get(SiteSwitch, site_id)
    if switch is None:
        session.add(SiteSwitch(site_id=site_id, enabled=enabled))
    else:
        switch.enabled = enabled
