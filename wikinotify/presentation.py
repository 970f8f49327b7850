"""Inbox entries as the API and the pages show them: the sentence in the viewer's language,
the link, the page as it is now (or as it was, if gone), and the excerpt while its comment
exists (§8.2, §9.2)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .categories import EntryView, Registry
from .host import Host
from .models import Notification


@dataclass(frozen=True)
class Presented:
    entry: Notification
    text: str
    url: str
    page: dict[str, Any] | None
    excerpt: str | None

    @property
    def unread(self) -> bool:
        return self.entry.read_at is None

    @property
    def day(self) -> datetime:
        return self.entry.updated_at

    def as_json(self) -> dict[str, Any]:
        e = self.entry
        return {
            "id": e.id,
            "category": e.category,
            "variant": e.variant,
            "variants": variants_of(e),
            "count": e.count,
            "text": self.text,
            "readAt": e.read_at,
            "createdAt": e.created_at,
            "updatedAt": e.updated_at,
            "actor": {"id": e.actor_id, "name": e.data.get("actor_name")} if e.actor_id else None,
            "page": self.page,
            "url": self.url,
            "excerpt": self.excerpt,
        }


def variants_of(entry: Notification) -> list[str]:
    return [v for v in (entry.variants or "").split(",") if v]


def present(host: Host, registry: Registry, entries: Sequence[Notification]) -> list[Presented]:
    """Two batched look-ups for the whole page of entries: live pages and live comments."""
    page_ids = sorted({e.page_id for e in entries if e.page_id})
    comment_ids = sorted({e.comment_id for e in entries if e.comment_id})
    live_pages = host.pages(page_ids) if page_ids else {}
    live_comments = host.comments_exist(comment_ids) if comment_ids else set()
    return [_one(host, registry, e, live_pages, live_comments) for e in entries]


def _one(host, registry, entry: Notification, live_pages, live_comments) -> Presented:
    snapshot = entry.data or {}
    category = registry.get(entry.category)
    # The link follows a move while the page exists, and uses the snapshot once it is gone.
    page_now = live_pages.get(entry.page_id) if entry.page_id else None
    page_ref = dict(page_now or {**snapshot, "id": entry.page_id, "site_id": entry.site_id})
    section = category.link_section if category else None
    title = snapshot.get("title") or page_ref.get("title") or ""
    view = EntryView(
        count=entry.count,
        variant=entry.variant,
        variants=tuple(variants_of(entry)),
        title=title,
        actor=snapshot.get("actor_name"),
        snapshot=snapshot,
    )
    excerpt = snapshot.get("excerpt") if entry.comment_id in live_comments else None
    page = (
        {"id": entry.page_id, "title": page_ref.get("title"), "path": page_ref.get("path")}
        if entry.page_id
        else None
    )
    return Presented(
        entry=entry,
        text=category.describe(view) if category else title,
        url=host.page_url(page_ref, section=section),
        page=page,
        excerpt=excerpt,
    )
