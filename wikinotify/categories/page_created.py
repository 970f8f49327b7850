"""A page was created anywhere on the wiki (opt-in)."""

from __future__ import annotations

from . import candidates
from .base import N_, Category, Channels

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
    access_check="read:pages",
    # An import of 5,000 pages must not notify everyone who opted in (§6.2).
    group_key=lambda event: f"pageCreated:{event.page_id}",
    opt_in=True,
)
