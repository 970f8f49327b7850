"""A page was deleted anywhere on the wiki (opt-in); access is checked against the page
as it was (docs/rules.md#deleting-a-page)."""

from __future__ import annotations

from ..catalogue import gettext
from . import candidates
from .base import N_, Category, Channels, EntryView, actor_or_someone

DELETED = N_("%(actor)s deleted %(title)s")

#: A mail's subject: "Onboarding: page deleted by Bob Builder".
PAGE_DELETED = N_("page deleted")


def describe(entry: EntryView) -> str:
    return gettext(DELETED, title=entry.title, actor=actor_or_someone(entry))


category = Category(
    key="pageDeleted",
    events=frozenset({"page:delete"}),
    section="everything",
    title=N_("Deleted pages"),
    description=N_("A page is deleted anywhere on the wiki."),
    defaults=Channels(in_app=False, email=False),
    # Below watchedPage: a watcher who also opted in gets the watched-page entry
    # (docs/rules.md#one-entry-per-person-per-event).
    priority=5,
    recipients=candidates.opted_in("pageDeleted"),
    access_checks=("read:pages",),
    # Told to anyone, of a page a guest could read: a guest sees it go anyway.
    told_to_anyone=True,
    group_key=lambda event: f"pageDeleted:{event.page_id}",
    opt_in=True,
    describe=describe,
    summary=lambda entry: gettext(PAGE_DELETED),
    strings=(DELETED, PAGE_DELETED),
)
