"""An administrator's announcement to everyone on a site or to some of its groups
(docs/rules.md#announcements).

Written on Admin → Notifications → Announcements or through ``POST
/api/admin/announcements``; the route emits one event of :data:`KIND`, and the fan-out
walks its audience through :meth:`~wikinotify.host.Host.announcement_audience`, in keyset
batches, split into ranges like any other large audience. The event row is the
announcement's record: its snapshot holds the title, the body and whether it is important,
its ``audience`` whom it is for, and a withdrawal is stamped on it
(:mod:`wikinotify.announcements`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from ..catalogue import gettext
from ..models import Event
from .base import N_, READ_PAGE, Category, Channels, EntryView, FanoutContext

#: The category's key, the preference rows' ``category``.
KEY = "announcement"
#: The event kind the announcement routes emit.
KIND = "announcement:publish"
#: Where the event's data says the announcement was withdrawn (an ISO time).
WITHDRAWN = "withdrawn_at"
#: Where a group announcement's snapshot (so each entry's) names its groups: its reader
#: must still be in one of them whenever it is shown or mailed.
SNAPSHOT_GROUPS = "groups"

ANNOUNCED = N_("Announcement: %(title)s")
IMPORTANT = N_("Important announcement: %(title)s")


def describe(entry: EntryView) -> str:
    template = IMPORTANT if entry.snapshot.get("important") else ANNOUNCED
    return gettext(template, title=entry.title)


def body(snapshot: Mapping[str, Any]) -> str | None:
    text = snapshot.get("body")
    return text if isinstance(text, str) and text else None


def audience_groups(data: Mapping[str, Any]) -> frozenset[str] | None:
    """The groups an event's announcement is for; ``None``: everyone on its site."""
    audience = data.get("audience") or {}
    if audience.get("everyone"):
        return None
    return frozenset(str(group) for group in audience.get("groups") or ())


def still_for(snapshot: Mapping[str, Any], group_ids: frozenset[str]) -> bool:
    """Whether a reader in ``group_ids`` is still in the audience an entry's ``snapshot``
    names (everyone when it names no groups)."""
    groups = snapshot.get(SNAPSHOT_GROUPS)
    return groups is None or not group_ids.isdisjoint(str(group) for group in groups)


def _withdrawn(ctx: FanoutContext, event: Event) -> bool:
    """Asked again before each batch (one row by its key), so withdrawing an announcement
    stops a fan-out that is still running, its ranges' too."""
    data = ctx.session.scalar(sa.select(Event.data).where(Event.id == event.id))
    return bool((data or {}).get(WITHDRAWN))


def recipients(ctx: FanoutContext, event: Event, after: str | None, limit: int) -> list[str]:
    if _withdrawn(ctx, event):
        return []
    return ctx.host.announcement_audience(
        event.site_id, audience_groups(event.data), after=after, limit=limit)


def important(event: Event) -> bool:
    return bool((event.data.get("snapshot") or {}).get("important"))


category = Category(
    key=KEY,
    events=frozenset({KIND}),
    section="everything",
    title=N_("Announcements"),
    description=N_("What the wiki's administrators announce to everyone or to your groups. "
                   "Those marked important always reach your inbox."),
    # In the inbox and by mail, on the reader's schedule (a digest may hold it).
    defaults=Channels(in_app=True, email=True),
    priority=60,
    recipients=recipients,
    # Told to the readers of its site only: "a page" with the site's id and no path,
    # which the host answers as its home (docs/rules.md#announcements).
    access_checks=(READ_PAGE,),
    # An administrator's words to the wiki's own readers, not to receivers outside it.
    told_to_anyone=False,
    # Each announcement its own entry: never folded into another.
    group_key=lambda event: f"{KEY}:{event.id}",
    in_app_required=important,
    pinned=True,
    body=body,
    describe=describe,
    strings=(ANNOUNCED, IMPORTANT),
)
