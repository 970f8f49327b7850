"""Someone wrote your @handle in a comment."""

from __future__ import annotations

from ..catalogue import gettext
from . import candidates
from .base import N_, Category, Channels, EntryView, Np_, actor_or_someone, counted

MENTIONED = N_("%(actor)s mentioned you on %(title)s")

#: A mail's subject: "Onboarding: 2 mentions by Bob Builder".
MENTIONS = Np_("%(num)d mention", "%(num)d mentions")


def describe(entry: EntryView) -> str:
    return gettext(MENTIONED, title=entry.title, actor=actor_or_someone(entry))


category = Category(
    key="mention",
    events=frozenset({"comment:new", "comment:edit"}),
    section="discussions",
    title=N_("Mentions"),
    description=N_("Someone mentions you with @ in a comment."),
    defaults=Channels(in_app=True, email=True),
    priority=40,
    recipients=candidates.mentioned_users,
    access_checks=("read:pages", "read:comments"),
    # Its reader's alone: who called on whom is said to one person, not the world.
    told_to_anyone=False,
    # Per comment: two mentions in two comments are two things to answer
    # (docs/rules.md#coalescing-is-idempotency).
    group_key=lambda event: f"mention:{event.comment_id}",
    digest=False,
    describe=describe,
    summary=counted(MENTIONS),
    link_section="comments",
    strings=(MENTIONED, MENTIONS),
)
