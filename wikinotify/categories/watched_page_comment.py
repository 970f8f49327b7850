"""Someone commented on a page you watch."""

from __future__ import annotations

from . import candidates
from .base import N_, Category, Channels

category = Category(
    key="watchedPageComment",
    events=frozenset({"comment:new"}),
    section="watching",
    title=N_("Comments on pages you watch"),
    description=N_("Someone comments on a page you watch."),
    defaults=Channels(in_app=True, email=True),
    priority=10,
    recipients=candidates.page_watchers,
    access_check="read:comments",
    group_key=lambda event: f"watchedComment:{event.page_id}",
)
