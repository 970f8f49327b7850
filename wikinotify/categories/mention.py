"""Someone wrote your @handle in a comment."""

from __future__ import annotations

from . import candidates
from .base import N_, Category, Channels

category = Category(
    key="mention",
    events=frozenset({"comment:new", "comment:edit"}),
    section="discussions",
    title=N_("Mentions"),
    description=N_("Someone mentions you with @ in a comment."),
    defaults=Channels(in_app=True, email=True),
    priority=40,
    recipients=candidates.mentioned_users,
    access_check="read:comments",
    # Per comment: two mentions in two comments are two things to answer (§8.3).
    group_key=lambda event: f"mention:{event.comment_id}",
    digest=False,
)
