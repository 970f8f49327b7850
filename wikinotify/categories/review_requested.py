"""A suggestion waits for your review (docs/rules.md#reviewers)."""

from __future__ import annotations

from ..catalogue import gettext
from . import candidates
from .base import N_, Category, Channels, EntryView, Np_, actor_or_someone, counted

SUGGESTED = N_("%(actor)s suggested a change to %(title)s")
REVISED = N_("%(actor)s revised their suggestion for %(title)s")

#: A mail's subject: "Onboarding: 2 review requests by Bob Builder".
REQUESTS = Np_("%(num)d review request", "%(num)d review requests")


def describe(entry: EntryView) -> str:
    template = REVISED if entry.variant == "updated" else SUGGESTED
    return gettext(template, title=entry.title, actor=actor_or_someone(entry))


category = Category(
    key="reviewRequested",
    events=frozenset({"submission:new", "submission:update"}),
    section="reviews",
    title=N_("Review requests"),
    description=N_("Someone suggests a change to a page your group reviews."),
    defaults=Channels(in_app=True, email=True),
    # Alone on its events, so it never competes; 35 keeps it above replies should a
    # future category share them, since someone is waiting on the reviewer.
    priority=35,
    recipients=candidates.page_reviewers,
    # The approval rule naming the group is the grant (docs/rules.md#reviewers).
    access_checks=(),
    # Its readers' alone: an open suggestion, and who made it, is shown only to
    # reviewers and its author, whoever may read the page.
    told_to_anyone=False,
    group_key=lambda event: f"review:{event.submission_id}",
    digest=False,
    describe=describe,
    summary=counted(REQUESTS),
    link_section="review",
    strings=(SUGGESTED, REVISED, REQUESTS),
)
