"""Someone commented on a page you watch."""

from __future__ import annotations

from ..catalogue import ngettext
from . import candidates
from .base import N_, Category, Channels, EntryView, Np_, actor_or_someone, counted

COMMENTED = Np_(
    "%(actor)s commented on %(title)s",
    "%(num)d new comments on %(title)s, last by %(actor)s",
)

#: A mail's subject: "Onboarding: 2 comments by Bob Builder".
COMMENTS = Np_("%(num)d comment", "%(num)d comments")


def describe(entry: EntryView) -> str:
    return ngettext(*COMMENTED, entry.count, title=entry.title, actor=actor_or_someone(entry))


category = Category(
    key="watchedPageComment",
    events=frozenset({"comment:new"}),
    section="watching",
    title=N_("Comments on pages you watch"),
    description=N_("Someone comments on a page you watch."),
    defaults=Channels(in_app=True, email=True),
    priority=10,
    recipients=candidates.page_watchers,
    access_checks=("read:pages", "read:comments"),
    # Told to anyone, of a page (and comments) a guest may read: its talk is public.
    told_to_anyone=True,
    group_key=lambda event: f"watchedComment:{event.page_id}",
    describe=describe,
    summary=counted(COMMENTS),
    link_section="comments",
    strings=(COMMENTED, COMMENTS),
)
