"""A reviewer approved or rejected your suggestion. Only its author hears of it."""

from __future__ import annotations

from ..catalogue import gettext
from . import candidates
from .base import N_, Category, Channels, EntryView, actor_or_someone

APPROVED = N_("%(actor)s approved your suggestion for %(title)s")
REJECTED = N_("%(actor)s rejected your suggestion for %(title)s")


#: A mail's subject: "Onboarding: suggestion approved by Bob Builder".
SUGGESTION_APPROVED = N_("suggestion approved")
SUGGESTION_REJECTED = N_("suggestion rejected")


def summary(entry: EntryView) -> str:
    rejected = entry.variant == "rejected"
    return gettext(SUGGESTION_REJECTED if rejected else SUGGESTION_APPROVED)


def describe(entry: EntryView) -> str:
    template = REJECTED if entry.variant == "rejected" else APPROVED
    return gettext(template, title=entry.title, actor=actor_or_someone(entry))


category = Category(
    key="suggestionReviewed",
    events=frozenset({"submission:review"}),
    section="reviews",
    title=N_("Answers to your suggestions"),
    description=N_("A reviewer approves or rejects a change you suggested."),
    defaults=Channels(in_app=True, email=True),
    # Alone on its events; level with a reply, being the answer to something you asked.
    priority=30,
    recipients=candidates.suggester,
    # The page must still be readable: a suggester locked out since is not told.
    access_checks=("read:pages",),
    # Its reader's alone: a verdict on her suggestion is hers, even on a public page.
    told_to_anyone=False,
    # Per suggestion: a revised, reopened and reviewed again one is the same entry.
    group_key=lambda event: f"suggestionReviewed:{event.submission_id}",
    # Immediate, like a reply or a review request (docs/rules.md#digests): addressed to you alone,
    # about your own work, at most once per review, and a rejection is the cue to revise while
    # the reviewer still has the page in mind. Nothing a digest would save anyone from.
    digest=False,
    describe=describe,
    summary=summary,
    # An approved suggestion is the page now; a rejected one is only on the suggestions.
    variant_links={"rejected": "review"},
    strings=(APPROVED, REJECTED, SUGGESTION_APPROVED, SUGGESTION_REJECTED),
)
