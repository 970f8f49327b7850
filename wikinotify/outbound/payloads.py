"""What a delivery carries, built just before it is sent, and whether it may still go.

A webhook's body follows Standard Webhooks: ``{"type": "<category>", "timestamp": "<ISO
8601>", "data": {...}}`` where ``data`` is the entry exactly as ``GET /api/notifications``
shows it to its reader (:func:`wikinotify.inbox.presentation.present`, dumped by
:class:`wikinotify.schemas.NotificationSchema`), with an absolute ``url``. A chat message is
the entry's sentence and its link, in the reader's language (the mail's rule: hers, else
the site's). A site-wide delivery carries the entry the fan-out stored on it (as a guest
sees the page), and a test or a verification the data it was queued with; before it
goes, its site must still be on and anyone still allowed to hear of it, by the rule the
fan-out applied (:func:`.routing.told_to_anyone`), and its excerpt goes only while its
comment exists, as a reader's does.

Everything is read again here (docs/rules.md#lessons-learned): what changed since the fan-out (an
account closed, a site switched off, the channel turned off, the page hidden from its
reader, the endpoint disabled) makes the delivery :class:`Ineligible`, and no request is
made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from flask_babel import force_locale
from sqlalchemy.orm import Session

from ..announcements import withdrawn_entries
from ..categories import Category, Registry
from ..host import Host, SiteFacts, UserFacts
from ..inbox.presentation import Presented, present
from ..instance_settings import site_enabled
from ..mail.compose import mail_locale
from ..mail.setup import mail_configured
from ..models import Delivery, Endpoint, EndpointState, Event, Notification
from ..preferences import effective, stored_channels, stored_rows
from .outcomes import Message
from .routing import takes, told_to_anyone, webhook_data

#: Deliveries whose data was fixed when they were queued (no entry to re-read).
SYSTEM_TYPES = ("webhook.verification", "webhook.test", "chat.test")


@dataclass(frozen=True)
class Ineligible:
    """Why a delivery may no longer go; recorded on it, and no request is made."""

    reason: str


def body(type_: str, timestamp: datetime, data: dict[str, Any]) -> str:
    """A Standard Webhooks JSON body."""
    payload = {"type": type_, "timestamp": timestamp.isoformat(), "data": data}
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)


def build(
    session: Session, host: Host, registry: Registry, endpoint: Endpoint, delivery: Delivery
) -> Message | Ineligible:
    """The message ``delivery`` carries now, or why it may not go."""
    if delivery.type in SYSTEM_TYPES:
        if endpoint.state == EndpointState.DISABLED:
            return Ineligible("the endpoint is disabled")
        data = dict(delivery.payload or {})
        text = str(data.get("message") or data.get("challenge") or "")
        return Message(delivery.type, body(delivery.type, delivery.created_at, data),
                       title=_site_title(host, None), text=text)
    if endpoint.state != EndpointState.ACTIVE:
        return Ineligible("the endpoint is no longer active")
    if not takes(endpoint.kind, endpoint.categories, delivery.type):
        return Ineligible("the endpoint no longer takes this category")
    if delivery.notification_id is None:
        return _site_wide(session, host, registry, delivery)
    return _for_reader(session, host, registry, endpoint, delivery)


def _site_title(host: Host, site_id: str | None) -> str:
    site = host.site(site_id) if site_id is not None else None
    if site is None:
        sites = host.sites()
        site = sites[0] if sites else None
    return site.title if site is not None else "wikinotify"


def _site_wide(
    session: Session, host: Host, registry: Registry, delivery: Delivery
) -> Message | Ineligible:
    data = dict(delivery.payload or {})
    # The event as stored (the payload's copy only if retention removed it since).
    event = session.get(Event, delivery.event_id) if delivery.event_id is not None else None
    probe = _probe(registry, delivery, event, data)
    if not site_enabled(session, probe.site_id):
        return Ineligible("notifications are off on this site")
    # The fan-out's own rule, applied again: what anyone may hear of now.
    presented = told_to_anyone(host, registry, probe)
    if presented is None:
        category = registry.get(delivery.type)
        return Ineligible("its category is no longer told to anyone"
                          if category is None or not category.told_to_anyone
                          or probe.page_id is None
                          else "a guest can no longer read this page")
    # The excerpt only while its comment exists, as a reader's delivery shows it.
    data["excerpt"] = presented.excerpt
    text = str(data.get("text") or "")
    if data.get("url"):
        text = f"{text}\n{data['url']}"
    return Message(delivery.type, body(delivery.type, delivery.created_at, data),
                   title=_site_title(host, data.get("site_id")), text=text)


def _probe(
    registry: Registry, delivery: Delivery, event: Event | None, data: dict[str, Any]
) -> Notification:
    """The entry as the fan-out's rule judges it again at send (:func:`told_to_anyone`):
    while the event is kept, its page as the event saw it (a page deleted since is judged
    by everything the wiki's rules look at) and its comment, checked to still exist;
    after retention, only the page the payload names, and no comment to vouch for the
    excerpt, which then goes no further."""
    category = registry.get(delivery.type)
    page = dict(data.get("page") or {})
    if event is not None and category is not None:
        page = {**page, **category.snapshot(event)}
    return Notification(
        category=delivery.type, site_id=event.site_id if event else data.get("site_id"),
        page_id=event.page_id if event else page.get("id"),
        comment_id=event.comment_id if event else None,
        data={**page, "excerpt": data.get("excerpt")}, count=1, variant="", variants="")


def _reader(host: Host, user_id: str | None) -> UserFacts | None:
    if user_id is None:
        return None
    user = host.users([user_id]).get(user_id)
    return user if user is not None and user.can_receive else None


def _site_for(host: Host, entry: Notification) -> SiteFacts | None:
    if entry.site_id is not None:
        return host.site(entry.site_id)
    sites = host.sites()
    return sites[0] if sites else None


def _for_reader(
    session: Session, host: Host, registry: Registry, endpoint: Endpoint, delivery: Delivery
) -> Message | Ineligible:
    user_id = delivery.user_id
    if user_id is None or user_id != endpoint.owner_id:
        return Ineligible("the endpoint's owner is not this entry's reader")
    user = _reader(host, user_id)
    if user is None:
        return Ineligible("the account no longer receives notifications")
    # The reader named in SQL: a delivery can only ever carry its own reader's entry.
    entry = session.scalar(sa.select(Notification).where(
        Notification.id == delivery.notification_id, Notification.user_id == user_id))
    category = registry.get(delivery.type)
    if entry is None or category is None:
        return Ineligible("the entry is gone")
    if withdrawn_entries(session, [entry]):
        return Ineligible("its announcement was withdrawn")
    site = _site_for(host, entry)
    if site is None or not site_enabled(session, entry.site_id):
        return Ineligible("notifications are off on this site")
    if not _wanted(session, user_id, category, endpoint.kind):
        return Ineligible(f"{endpoint.kind} is off for this category")
    with force_locale(mail_locale(user, site)):
        presented = present(host, registry, [entry], user)[0]
        if not presented.available:
            return Ineligible("the reader can no longer see this page")
        return _message(delivery, site, presented)


def _wanted(session: Session, user_id: str, category: Category, kind: str) -> bool:
    """Whether the reader wants ``category`` on her ``kind`` (webhook, chat, push) endpoints as
    her preferences stand now: the one rule, :func:`wikinotify.preferences.effective`."""
    mine = stored_channels(stored_rows(session, user_id), category.key)
    return bool(getattr(effective(category, mine, mail_on=mail_configured()), kind))


def _message(delivery: Delivery, site: SiteFacts, presented: Presented) -> Message:
    data = webhook_data(site, presented)
    url = data["url"]
    text = f"{presented.text}\n{url}" if url else presented.text
    return Message(delivery.type, body(delivery.type, presented.entry.updated_at, data),
                   title=site.title, text=text)
