"""Inbox entries as the API, the pages and the mails show them: the sentence in the
viewer's language, the link, the page as it is now (or as it was, if gone), and the excerpt
while its comment exists (docs/rules.md#entries, docs/rules.md#the-inbox-page).

Access is checked again here, every time (docs/rules.md#lessons-learned): an entry about a page its
reader can no longer see keeps only what she was told when she could see it (the snapshot's title,
in its sentence), is marked unavailable, and shows no live title, no path, no link and no excerpt.
It stays in the list, so the badge's count and the list agree, and it can still be read or
dismissed.

Shown to a guest, it is shown to anyone (a site-wide webhook's receiver, outside the
wiki): then its category must say anyone may hear of it (``Category.told_to_anyone``),
and the page must be readable by a guest whatever the category asks of its own readers.
To its own reader, an entry about no page is always available.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from ..categories import Category, EntryView, Registry, announcement
from ..categories.base import READ_PAGE
from ..host import Host, PageSnapshot, UserFacts
from ..models import NotificationRow

#: What an entry of a category no longer registered needs: it was about a page, so the
#: page must at least be readable.
UNKNOWN_CATEGORY_CHECKS = (READ_PAGE,)


@dataclass(frozen=True)
class Presented:
    entry: NotificationRow
    text: str
    #: ``None`` when the reader can no longer see the page, or the entry is about none.
    url: str | None
    page: dict[str, Any] | None
    excerpt: str | None
    available: bool = True
    #: When it was last updated, as its reader is shown it (``text``, ``exact``): set
    #: where a list is answered to her (docs/rules.md#whose-time).
    shown_at: dict[str, str] | None = None
    #: The actor's picture, an ``http(s)`` URL from ``Host.avatar_urls``: set where a list
    #: is answered to its reader (:func:`answered`).
    avatar_url: str | None = None
    #: The entry's own text (``Category.body``), ``None`` for most and where unavailable.
    body: str | None = None
    #: Listed first until read (``Category.pinned``): set where a list is answered.
    pinned: bool = False

    @property
    def unread(self) -> bool:
        return self.entry.read_at is None

    @property
    def day(self) -> datetime:
        return self.entry.updated_at

    @property
    def variants(self) -> list[str]:
        return variants_of(self.entry)

    @property
    def actor(self) -> dict[str, Any] | None:
        """Who acted, as the entry stored it (``None`` for an entry about no one)."""
        e = self.entry
        if not e.actor_id:
            return None
        name = e.data.get("actor_name")
        return {"id": e.actor_id, "name": name, "initials": initials(name),
                "avatar_url": self.avatar_url}


def initials(name: str | None) -> str | None:
    """What the bell menu's circle says for an actor without a picture: the first letter of
    the first and of the last word of ``name`` ("Bob Builder": "BB", "Bob": "B"), each with
    its combining marks, upper-cased where the script has cases ("山田 太郎": "山太")."""
    words = (name or "").split()
    if not words:
        return None
    return "".join(_first_letter(w) for w in (words[:1] if len(words) == 1
                                               else (words[0], words[-1])))


def _first_letter(word: str) -> str:
    end = 1
    while end < len(word) and unicodedata.combining(word[end]):
        end += 1
    return word[:end].upper()


def web_url(url: object) -> str | None:
    """``url`` if it is an absolute ``http(s)`` URL, else ``None`` (never ``javascript:``)."""
    if not isinstance(url, str):
        return None
    parts = urlsplit(url.strip())
    return url.strip() if parts.scheme.lower() in ("http", "https") and parts.netloc else None


def answered(host: Host, presented: Sequence[Presented],
             shown_at: Sequence[dict[str, str]]) -> list[Presented]:
    """``presented`` as a list answers its reader: each with its time as she is shown it
    (``shown_at``, in the same order) and its actor's picture, asked of the wiki in one
    call; an entry its reader can no longer see names its actor without one. One copy
    of each entry (a copy costs as much as its sentence)."""
    actor_ids = sorted({p.entry.actor_id for p in presented if p.entry.actor_id and p.available})
    urls = host.avatar_urls(actor_ids) if actor_ids else {}
    return [replace(p, shown_at=shown, avatar_url=web_url(urls.get(p.entry.actor_id)))
            if p.entry.actor_id and p.available else replace(p, shown_at=shown)
            for p, shown in zip(presented, shown_at, strict=True)]


def by_page(presented: Sequence[Presented]) -> list[tuple[str | None, list[Presented]]]:
    """``presented`` (newest activity first) in groups, one per page, under the page's
    title as its reader may see it, newest activity first; entries about no page in a
    group of their own, whose title is ``None`` (docs/rules.md#the-inbox-page)."""
    groups: dict[str | None, list[Presented]] = {}
    for p in presented:
        groups.setdefault(p.entry.page_id, []).append(p)
    return [(_group_title(items[0]) if page_id else None, items)
            for page_id, items in groups.items()]


def _group_title(p: Presented) -> str:
    page = p.page or {}
    return str(page.get("title") or (p.entry.data or {}).get("title") or page.get("path")
               or page.get("id") or "")


def variants_of(entry: NotificationRow) -> list[str]:
    return [v for v in (entry.variants or "").split(",") if v]


@dataclass(frozen=True)
class _Lookups:
    """What one list (or one mail) asks the wiki, each in one batched call."""

    pages: dict[str, PageSnapshot]
    comments: set[str]
    held: dict[str, set[str]]
    #: Whether the viewer is anyone at all (a guest), not one of the entry's readers.
    anyone: bool = False
    #: For entries about no page whose category asks for access (an announcement), the
    #: permissions the viewer holds on each of their sites' home.
    sites: dict[str | None, set[str]] = field(default_factory=dict)
    #: The viewer's groups, which a group announcement's reader must still be in.
    groups: frozenset[str] = frozenset()


def _checks(category: Category | None, anyone: bool) -> tuple[str, ...]:
    """The page permissions the viewer must hold to see an entry of ``category``: its
    own; for anyone, the page's read permission first, whatever the category asks."""
    checks = category.access_checks if category else UNKNOWN_CATEGORY_CHECKS
    return tuple(dict.fromkeys((READ_PAGE, *checks))) if anyone else checks


def _page_as_seen(
    entry: NotificationRow, live_pages: Mapping[str, PageSnapshot]
) -> dict[str, Any]:
    """The page now, if it still exists (links follow a move); else the snapshot
    (docs/rules.md#deleting-a-page)."""
    live = live_pages.get(entry.page_id) if entry.page_id is not None else None
    return dict(live or {**(entry.data or {}), "id": entry.page_id, "site_id": entry.site_id})


def _look_up(
    host: Host, registry: Registry, entries: Sequence[NotificationRow], viewer: UserFacts | None
) -> _Lookups:
    page_ids = sorted({e.page_id for e in entries if e.page_id})
    comment_ids = sorted({e.comment_id for e in entries if e.comment_id})
    live_pages = dict(host.pages(page_ids)) if page_ids else {}
    comments = host.comments_exist(comment_ids) if comment_ids else set()
    checked = {e.page_id: _page_as_seen(e, live_pages) for e in entries if e.page_id}
    anyone = viewer is not None and viewer.guest
    wanted = {p for e in entries if e.page_id
              for p in _checks(registry.get(e.category), anyone)}
    held: dict[str, set[str]] = {}
    if viewer is not None and checked and wanted:
        held = dict(host.held_permissions(viewer.group_ids, wanted, list(checked.values())))
    return _Lookups(live_pages, comments, held, anyone, _sites_held(host, registry, entries,
                                                                   viewer),
                    frozenset() if viewer is None else viewer.group_ids)


def _on_its_sites_home(category: Category | None) -> bool:
    """An announcement is about no page, and its readers are those who may read its site's
    home: asked again each time it is shown (a host's own category about no page is shown
    to its readers as it always was)."""
    return category is not None and category.key == announcement.KEY


def _sites_held(host: Host, registry: Registry, entries: Sequence[NotificationRow],
                viewer: UserFacts | None) -> dict[str | None, set[str]]:
    """What the viewer holds on the home of each site that an entry about no page, of a
    category that asks for access, is on: asked as the fan-out asked it, a page with the
    site's id and no id or path (docs/rules.md#announcements), once per site and permission."""
    wanted: dict[str | None, set[str]] = {}
    for entry in entries:
        category = registry.get(entry.category)
        if not entry.page_id and category is not None and _on_its_sites_home(category):
            wanted.setdefault(entry.site_id, set()).update(category.access_checks)
    if viewer is None:
        return {site_id: set() for site_id in wanted}
    return {site_id: {p for p in permissions if host.check_access(
        viewer.group_ids, p, {"id": None, "site_id": site_id})}
        for site_id, permissions in wanted.items()}


def present(
    host: Host,
    registry: Registry,
    entries: Sequence[NotificationRow],
    viewer: UserFacts | None,
) -> list[Presented]:
    """Show ``entries`` to ``viewer`` (``None``: an account the wiki no longer knows, who
    may see no page; a guest: anyone, see the module's docstring). Three batched look-ups
    for the whole list: live pages, live comments, and the viewer's permissions on those
    pages."""
    lookups = _look_up(host, registry, entries, viewer)
    return [_one(host, registry, e, lookups) for e in entries]


def _may_see(entry: NotificationRow, category: Category | None, lookups: _Lookups) -> bool:
    if lookups.anyone and not (category and category.told_to_anyone):
        return False  # its own readers' alone: its category decided so
    if not entry.page_id:
        # About no page: what its category asks, on its site's home (an announcement's
        # reader who can no longer read the site), to its own readers.
        if lookups.anyone or category is None or not _on_its_sites_home(category):
            return True
        return (set(category.access_checks) <= lookups.sites.get(entry.site_id, set())
                and announcement.still_for(entry.data or {}, lookups.groups))
    return set(_checks(category, lookups.anyone)) <= lookups.held.get(entry.page_id, set())


def view_of(entry: NotificationRow, title: str) -> EntryView:
    """``entry`` as its category's sentence (and a mail's subject) sees it, the page
    named ``title``."""
    snapshot = entry.data or {}
    return EntryView(
        count=entry.count,
        variant=entry.variant,
        variants=tuple(variants_of(entry)),
        title=title,
        actor=snapshot.get("actor_name"),
        snapshot=snapshot,
    )


def actor_names(entry: NotificationRow) -> list[str]:
    """Everyone whose events the entry holds, as it stored them: whoever acted last
    first, then the others by name (:data:`wikinotify.pipeline.upsert.ACTORS`). An entry
    written before it named them all names its last actor alone."""
    data = entry.data or {}
    last = data.get("actor_name")
    stored = data.get("actors")
    others = stored.items() if isinstance(stored, dict) else ()
    named = sorted(name for person, name in others
                   if isinstance(name, str) and name and person != entry.actor_id)
    return ([last] if isinstance(last, str) and last else []) + named


def _one(host: Host, registry: Registry, entry: NotificationRow, lookups: _Lookups) -> Presented:
    snapshot = entry.data or {}
    category = registry.get(entry.category)
    available = _may_see(entry, category, lookups)
    page_ref = _page_as_seen(entry, lookups.pages)
    # The sentence names the page as the reader was told of it; only a page she can
    # still see may fill in a title the snapshot lacks.
    title = snapshot.get("title") or (page_ref.get("title") if available else None) or ""
    view = view_of(entry, title)
    text = category.describe(view) if category else title
    if not available:
        page: dict[str, Any] | None = {
            "id": entry.page_id, "title": snapshot.get("title"), "path": None
        } if entry.page_id else None
        return Presented(entry=entry, text=text, url=None, page=page, excerpt=None,
                         available=False)
    excerpt = snapshot.get("excerpt") if entry.comment_id in lookups.comments else None
    page = (
        {"id": entry.page_id, "title": page_ref.get("title"), "path": page_ref.get("path")}
        if entry.page_id
        else None
    )
    return Presented(
        entry=entry,
        text=text,
        # An entry about no page (a host's own category about the wiki,
        # docs/adopting.md#adding-a-kind-of-notification) has no link.
        url=_link(host, category, entry, page_ref) if entry.page_id else None,
        page=page,
        excerpt=excerpt,
        body=category.body(snapshot) if category else None,
    )


def _link(
    host: Host, category: Category | None, entry: NotificationRow, page_ref: PageSnapshot
) -> str:
    """Where the entry leads: what it announces, when it names it (the comment, the
    suggestion), else the part of the page its category links to."""
    target = category.link_for(entry.variant) if category else None
    submission_id = (entry.data or {}).get("submission_id")
    if target == "comments" and entry.comment_id:
        return host.comment_url(page_ref, entry.comment_id)
    if target == "review" and submission_id:
        return host.suggestion_url(page_ref, str(submission_id))
    return host.page_url(page_ref, section=target)
