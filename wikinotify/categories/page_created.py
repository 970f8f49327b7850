"""A page was created anywhere on the wiki (opt-in)."""

from __future__ import annotations

from ..catalogue import gettext
from . import candidates
from .base import N_, Category, Channels, EntryView, actor_or_someone

CREATED = N_("%(actor)s created %(title)s")
CREATED_DRAFT = N_("%(actor)s created %(title)s as a draft")


#: A mail's subject: "Onboarding: page created by Bob Builder".
PAGE_CREATED = N_("page created")
PAGE_CREATED_DRAFT = N_("page created as a draft")


def _draft(entry: EntryView) -> bool:
    return entry.snapshot.get("publish_state") == "unpublished"


def describe(entry: EntryView) -> str:
    # Fires whatever the publish state, saying which (docs/rules.md#corner-cases).
    template = CREATED_DRAFT if _draft(entry) else CREATED
    return gettext(template, title=entry.title, actor=actor_or_someone(entry))


def summary(entry: EntryView) -> str:
    return gettext(PAGE_CREATED_DRAFT if _draft(entry) else PAGE_CREATED)


category = Category(
    key="pageCreated",
    events=frozenset({"page:create"}),
    section="everything",
    title=N_("New pages"),
    description=N_("A page is created anywhere on the wiki, drafts included."),
    defaults=Channels(in_app=False, email=False),
    # Alone on page:create; low, like the other firehose.
    priority=5,
    recipients=candidates.opted_in("pageCreated"),
    access_checks=("read:pages",),
    # Told to anyone, of a page a guest may read: a guest could find it anyway.
    told_to_anyone=True,
    # An import of 5,000 pages must not notify everyone who opted in (docs/rules.md#origin).
    group_key=lambda event: f"pageCreated:{event.page_id}",
    opt_in=True,
    describe=describe,
    summary=summary,
    strings=(CREATED, CREATED_DRAFT, PAGE_CREATED, PAGE_CREATED_DRAFT),
)
