"""Someone replied to your comment. Only the parent's author hears of it (§14)."""

from __future__ import annotations

from . import candidates
from .base import N_, Category, Channels

category = Category(
    key="commentReply",
    events=frozenset({"comment:new"}),
    section="discussions",
    title=N_("Replies to you"),
    description=N_("Someone replies to one of your comments."),
    defaults=Channels(in_app=True, email=True),
    priority=30,
    recipients=candidates.parent_author,
    access_check="read:comments",
    group_key=lambda event: f"reply:{event.data.get('parent_id')}",
    digest=False,
)
