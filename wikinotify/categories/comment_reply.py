"""Someone replied to your comment. Only the parent's author hears of it
(docs/rules.md#corner-cases)."""

from __future__ import annotations

from ..catalogue import ngettext
from . import candidates
from .base import N_, Category, Channels, EntryView, Np_, actor_or_someone, counted

REPLIED = Np_(
    "%(actor)s replied to your comment on %(title)s",
    "%(num)d replies to your comment on %(title)s, last by %(actor)s",
)


#: A mail's subject: "Onboarding: 2 replies by Bob Builder".
REPLIES = Np_("%(num)d reply", "%(num)d replies")


def describe(entry: EntryView) -> str:
    return ngettext(*REPLIED, entry.count, title=entry.title, actor=actor_or_someone(entry))


category = Category(
    key="commentReply",
    events=frozenset({"comment:new"}),
    section="discussions",
    title=N_("Replies to you"),
    description=N_("Someone replies to one of your comments."),
    defaults=Channels(in_app=True, email=True),
    priority=30,
    recipients=candidates.parent_author,
    access_checks=("read:pages", "read:comments"),
    # Its reader's alone: addressed to one person, like a mention.
    told_to_anyone=False,
    group_key=lambda event: f"reply:{event.data.get('parent_id')}",
    digest=False,
    describe=describe,
    summary=counted(REPLIES),
    link_section="comments",
    strings=(REPLIED, REPLIES),
)
