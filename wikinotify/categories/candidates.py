"""Where categories find their candidates (docs/rules.md#candidates-in-batches), each a
keyset-paginated batch."""

from __future__ import annotations

import sqlalchemy as sa

from ..config import config
from ..host import first_batch
from ..models import Event, Preference
from .base import FanoutContext, RecipientSource


def page_watchers(ctx: FanoutContext, event: Event, after: str | None, limit: int) -> list[str]:
    """The page's watchers; for a deletion, those captured when the event was written
    (the wiki's watch rows are gone with the page by now, docs/rules.md#deleting-a-page)."""
    if event.recipients is not None:
        return first_batch(event.recipients, after=after, limit=limit)
    if event.page_id is None:
        return []
    return ctx.host.page_watchers(event.page_id, after=after, limit=limit)


def page_reviewers(ctx: FanoutContext, event: Event, after: str | None, limit: int) -> list[str]:
    snapshot = dict(event.data.get("snapshot") or {}, id=event.page_id, site_id=event.site_id)
    return ctx.host.page_reviewers(snapshot, after=after, limit=limit)


def mentioned_users(
    ctx: FanoutContext, event: Event, after: str | None, limit: int
) -> list[str]:
    """Handles written in the comment; on an edit, only those not in the previous text.
    At most ``WIKINOTIFY_MENTION_LIMIT`` of them, the first written, so one comment
    naming hundreds of handles cannot flood as many inboxes and mailboxes."""
    text = event.data.get("text") or ""
    mentioned = ctx.host.mentioned_users(text, site_id=event.site_id)
    previous = event.data.get("previous_text")
    if previous:
        before = set(ctx.host.mentioned_users(previous, site_id=event.site_id))
        mentioned = [user_id for user_id in mentioned if user_id not in before]
    told = list(dict.fromkeys(mentioned))[: config("MENTION_LIMIT")]
    return first_batch(told, after=after, limit=limit)


def parent_author(ctx: FanoutContext, event: Event, after: str | None, limit: int) -> list[str]:
    parent_id = event.data.get("parent_id")
    author = ctx.host.comment_author(str(parent_id)) if parent_id else None
    return first_batch([author] if author else [], after=after, limit=limit)


def suggester(ctx: FanoutContext, event: Event, after: str | None, limit: int) -> list[str]:
    """The author of the suggestion a review answered, named by the event
    (``suggester_id``): the reviewer's action is the event, so its actor is someone else."""
    author = event.data.get("suggester_id")
    return first_batch([str(author)] if author else [], after=after, limit=limit)


def opted_in(category_key: str) -> RecipientSource:
    """Everyone who turned ``category_key`` on, on either channel, from the partial index
    on enabled preference rows: the wiki's users table is never scanned
    (docs/rules.md#preferences-are-stored-only-where-they-differ)."""

    def source(ctx: FanoutContext, event: Event, after: str | None, limit: int) -> list[str]:
        query = (
            sa.select(Preference.user_id)
            .where(Preference.category == category_key, Preference.enabled.is_(True))
            .group_by(Preference.user_id)
            .order_by(Preference.user_id)
            .limit(limit)
        )
        if after is not None:
            query = query.where(Preference.user_id > after)
        return list(ctx.session.scalars(query))

    return source


def permission_holders(permission: str) -> RecipientSource:
    """The accounts holding ``permission`` wiki-wide (``manage:system``), read through
    :meth:`~wikinotify.host.Host.accounts_with_permission`: for a category about the wiki
    rather than a page, such as a failed storage sync
    (docs/adopting.md#adding-a-kind-of-notification)."""

    def source(ctx: FanoutContext, event: Event, after: str | None, limit: int) -> list[str]:
        return ctx.host.accounts_with_permission(permission, after=after, limit=limit)

    return source
