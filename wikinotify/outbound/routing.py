"""The fan-out's hook: which endpoints hear of an event, and their delivery rows.

A reader's own endpoints are found once per candidate batch (one query for the batch,
never one per reader); the fan-out decides her webhook and chat channels from them and
her preferences, and :func:`add_deliveries` writes one delivery per (event, endpoint) in
the same transaction as the batch's entries, ``ON CONFLICT DO NOTHING`` on that pair, so a
replayed batch adds none. Only ``active`` endpoints get deliveries: an unverified one gets
nothing until it has answered its challenge.

Site-wide endpoints (an administrator's, ``owner_id`` NULL) hear of an event once, for the
highest-priority category it reaches that they take, on their site (or every site), and
only of what anyone may see (:func:`told_to_anyone`): the receiver is outside the wiki, so
it is told only of a category that says anyone may hear of it
(``Category.told_to_anyone``), and then only of a page a guest (a reader in no group) may
read, whatever the category asks of its own readers. Their entry is stored on the
delivery as the fan-out saw it, in the site's language.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from flask import Flask
from flask_babel import force_locale
from sqlalchemy.orm import Session

from .. import commits, dialects, queue, schemas
from ..categories import Category, Registry
from ..host import Host, SiteFacts, UserFacts
from ..inbox.presentation import Presented, present
from ..mail.compose import absolute
from ..models import (
    Delivery,
    DeliveryState,
    Endpoint,
    EndpointKind,
    EndpointState,
    Event,
    Notification,
    utcnow,
)
from ..state import state
from .standard_webhooks import new_message_id

#: The reader a site-wide endpoint stands for: no account, no group.
GUEST = UserFacts(id="", display_name="", guest=True)

_entry_schema = schemas.NotificationSchema()

#: The work a commit that wrote deliveries does: ask for a delivery run.
KICK = "wikinotify.deliver"


def _kick(app: Flask, _ids: set[str]) -> None:
    queue.kick(app, queue.Job.DELIVER)


commits.work(KICK, _kick)


def told_to_anyone(host: Host, registry: Registry, entry: Notification) -> Presented | None:
    """``entry`` as a site-wide endpoint is told of it, shown to a guest; ``None`` when
    anyone may not hear of it. The one rule, at the fan-out and again just before each
    send (:mod:`.payloads`)."""
    presented = present(host, registry, [entry], GUEST)[0]
    return presented if presented.available else None


def webhook_data(site: SiteFacts, presented: Presented) -> dict[str, Any]:
    """The ``data`` of a webhook about ``presented``: the entry as the API shows it to its
    reader, with its link made absolute on ``site``."""
    data = schemas.dump(_entry_schema, presented)
    data["url"] = absolute(site, presented.url) if presented.url else None
    return data


def takes(kind: str, categories: list[str] | None, category_key: str) -> bool:
    """Whether an endpoint of ``kind`` told of ``categories`` takes ``category_key``: a
    webhook or a chat target takes the categories it names; a browser's push subscription
    names none, and the reader's preferences (the grid's push column) choose alone."""
    return kind == EndpointKind.PUSH or category_key in (categories or [])


#: Active endpoints, their owner, kind and categories (``ix_wikinotify_endpoints_state``).
_ACTIVE = sa.select(Endpoint.id, Endpoint.owner_id, Endpoint.kind, Endpoint.categories).where(
    Endpoint.state == EndpointState.ACTIVE)


def endpoints_of(
    session: Session, user_ids: Sequence[str], category_key: str
) -> dict[str, dict[str, list[int]]]:
    """Each reader's active endpoints that take ``category_key``, by kind:
    ``{user_id: {"webhook": [3], "chat": [7], "push": [9, 12]}}``; one query for the
    batch."""
    if not user_ids:
        return {}
    return _taking(session.execute(_ACTIVE.where(
        dialects.among(session, Endpoint.owner_id, user_ids))), category_key)


def every_endpoint(
    session: Session, category_key: str, limit: int
) -> dict[str, dict[str, list[int]]] | None:
    """Every reader's active endpoints that take ``category_key``, as :func:`endpoints_of`
    would find them batch by batch, read once for a fan-out of many batches; ``None`` when
    more than ``limit`` endpoints are active."""
    rows = dialects.at_most(session, _ACTIVE.where(Endpoint.owner_id.isnot(None)), limit)
    return None if rows is None else _taking(rows, category_key)


def _taking(rows: Iterable[Any], category_key: str) -> dict[str, dict[str, list[int]]]:
    found: dict[str, dict[str, list[int]]] = {}
    for endpoint_id, owner_id, kind, categories in rows:
        if owner_id is not None and takes(kind, categories, category_key):
            found.setdefault(owner_id, {}).setdefault(kind, []).append(endpoint_id)
    return found


def _insert(session: Session, rows: list[dict[str, Any]]) -> None:
    """Insert, one per (endpoint, event), and have the commit ask for a delivery run."""
    statement = dialects.insert(session, Delivery).on_conflict_do_nothing(
        index_elements=[Delivery.endpoint_id, Delivery.event_id],
        index_where=Delivery.event_id.isnot(None),
    )
    session.execute(statement, rows)
    commits.after_commit(session, KICK)


def add_deliveries(
    session: Session,
    event_id: int,
    category_key: str,
    group_key: str,
    targets: Mapping[str, Sequence[int]],
) -> int:
    """One delivery per (event, endpoint) for ``targets`` (reader → her endpoints), each
    naming the reader's entry for this event (under ``group_key``), in the caller's
    transaction; the entries are already written. Returns how many were asked for.

    Plain values, not the event: the fan-out's writer thread calls it, and must not touch
    the rows the fan-out's own session holds."""
    readers = [user_id for user_id, endpoints in targets.items() if endpoints]
    if not readers:
        return 0
    # Each endpoint as it is now, in this transaction: the fan-out decided on endpoints it
    # may have read at its run's start (wikinotify.pipeline.audience.read_for_run), and
    # since then one may have been deleted (by her, or by the delivery run, for a push
    # subscription the service said is gone), turned off or moved to another account. A
    # delivery goes to an endpoint still active and still hers; on PostgreSQL the rows
    # are locked against a delete until the batch commits, whose foreign key would
    # otherwise fail the whole event.
    wanted = sorted({endpoint for user_id in readers for endpoint in targets[user_id]})
    owner_now: dict[int, str | None] = {
        endpoint_id: owner_id for endpoint_id, owner_id in session.execute(
            sa.select(Endpoint.id, Endpoint.owner_id).where(
                dialects.among(session, Endpoint.id, wanted, sa.BigInteger()),
                Endpoint.state == EndpointState.ACTIVE,
            ).with_for_update(read=True, key_share=True))}
    entries: dict[str, int] = {user_id: entry_id for user_id, entry_id in session.execute(
        sa.select(Notification.user_id, Notification.id).where(
            dialects.among(session, Notification.user_id, readers),
            Notification.group_key == group_key,
            # The slot's row, which the batch's upsert just wrote: a row a read mark
            # covered was settled before it (docs/rules.md#read-marks), so the slot's
            # own read_at is the entry's.
            Notification.read_at.is_(None),
        )
    )}
    now = utcnow()
    rows = [
        {"endpoint_id": endpoint_id, "event_id": event_id, "notification_id": entries[user_id],
         "user_id": user_id, "message_id": new_message_id(), "type": category_key,
         "payload": {}, "state": DeliveryState.PENDING, "attempts": 0, "next_attempt_at": now,
         "created_at": now, "updated_at": now}
        for user_id in readers if user_id in entries
        for endpoint_id in targets[user_id] if owner_now.get(endpoint_id) == user_id
    ]
    if rows:
        _insert(session, rows)
    return len(rows)


def site_wide_endpoints(session: Session, site_id: str | None) -> list[tuple[int, Any]]:
    """The active site-wide webhooks of ``site_id`` (and of every site): id and categories."""
    rows = session.execute(
        sa.select(Endpoint.id, Endpoint.categories).where(
            Endpoint.owner_id.is_(None), Endpoint.kind == EndpointKind.WEBHOOK,
            Endpoint.state == EndpointState.ACTIVE,
            sa.or_(Endpoint.site_id.is_(None), Endpoint.site_id == site_id),
        )
    )
    return [(endpoint_id, taken) for endpoint_id, taken in rows]


def add_site_wide(
    session: Session,
    host: Host,
    event: Event,
    categories: Sequence[Category],
    entry: Callable[[Category], Notification],
) -> int:
    """Deliveries for the site-wide endpoints that take one of ``categories`` (highest
    priority first), if anyone may hear of it: one per endpoint per event.
    ``entry(category)`` is the entry the event makes through that category, unsaved."""
    endpoints = site_wide_endpoints(session, event.site_id)
    if not endpoints:
        return 0
    site = host.site(event.site_id) if event.site_id is not None else None
    sites = host.sites()
    site = site or (sites[0] if sites else None)
    if site is None:
        return 0
    rows: list[dict[str, Any]] = []
    now = utcnow()
    for endpoint_id, taken in endpoints:
        category = next((c for c in categories if c.key in (taken or [])), None)
        if category is None:
            continue
        with force_locale(site.primary_locale):
            presented = told_to_anyone(host, state().registry, entry(category))
        if presented is None:
            continue  # not for anyone: nothing leaves the wiki
        data = webhook_data(site, presented)
        data["site_id"] = event.site_id
        rows.append({
            "endpoint_id": endpoint_id, "event_id": event.id, "notification_id": None,
            "user_id": None, "message_id": new_message_id(), "type": category.key,
            "payload": data, "state": DeliveryState.PENDING, "attempts": 0, "next_attempt_at": now,
            "created_at": now, "updated_at": now,
        })
    if rows:
        _insert(session, rows)
    return len(rows)
