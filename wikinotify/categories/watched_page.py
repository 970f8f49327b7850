"""A page you watch was edited, moved, (un)published, scheduled or deleted."""

from __future__ import annotations

from . import candidates
from .base import ALL_ORIGINS, N_, Category, Channels

category = Category(
    key="watchedPage",
    events=frozenset({"page:edit", "page:rename", "page:delete"}),
    section="watching",
    title=N_("Pages you watch"),
    description=N_("A page you watch is edited, moved, published or deleted."),
    defaults=Channels(in_app=True, email=True),
    priority=20,
    recipients=candidates.page_watchers,
    access_check="read:pages",
    # A git pull rewriting a watched page is news too; it reads "via storage sync".
    origins=ALL_ORIGINS,
    group_key=lambda event: f"watchedPage:{event.page_id}",
)
