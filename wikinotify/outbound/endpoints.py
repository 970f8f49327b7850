"""Webhook endpoints and chat targets as their owners manage them: create, change, rotate
the signing secret, test, delete, and list the deliveries (docs/channels.md#webhooks;
docs/rules.md#channels).

An endpoint belongs to a user (her own notifications, a channel beside in-app and email)
or to the site (``owner_id`` NULL: an administrator's site-wide endpoint). Every statement
names the owner in its SQL: a user reaches an endpoint by (id, her id), an administrator
also the site's by (id, NULL owner). Someone else's endpoint is never found, so it answers
as one that does not exist.

A webhook's signing secret is returned once, in the answer that made it (creation or a
rotation), and never again; a chat target's URL (which holds the service's token) is never
returned at all after it is saved, only Apprise's masked form of it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa
from marshmallow import ValidationError
from sqlalchemy.orm import Session

from .. import dialects
from ..config import config
from ..host import Host
from ..models import (
    DELIVERY_NOT_SENT,
    Delivery,
    DeliveryState,
    Endpoint,
    EndpointKind,
    EndpointState,
    utcnow,
)
from . import chat, secrets_box, ssrf, standard_webhooks, verification

#: Deliveries per page of ``GET /api/webhooks/<id>/deliveries``.
DELIVERIES_PAGE = 50
#: States in which an endpoint counts as set up (the preferences grid shows its column).
SET_UP = (EndpointState.UNVERIFIED, EndpointState.ACTIVE)
#: The audit action of a change to an endpoint: its owner's, or the delivery engine's own
#: (a verification answered, a receiver gone).
UPDATED = "updateNotificationEndpoint"
#: The owner key of the site's own endpoints (``owner_id`` NULL), which count together as
#: one owner's, for the cap and for the delivery engine's turns; no account's id is empty.
SITE = ""


class Refused(ValidationError):
    """A value the endpoint cannot take: a ``ValidationError`` naming the field, so the
    API answers it as the schema's own refusals (a 400 naming the field)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__({field: [message]})
        self.field = field
        self.reason = message


class TooMany(Exception):
    """One endpoint more than ``WIKINOTIFY_ENDPOINTS_PER_ACCOUNT`` allows its owner: the
    API answers it with a 409 ``too_many_endpoints``."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"at most {limit} webhooks and chat targets per account")
        self.limit = limit


@dataclass(frozen=True)
class Caller:
    """Who manages endpoints: a signed-in user, and whether she may also manage the site's."""

    user_id: str
    admin: bool = False


@dataclass(frozen=True)
class DeliveryPage:
    items: list[Delivery]
    next_cursor: str | None


def owner_key(owner_id: str | None) -> str:
    """The key an endpoint of ``owner_id`` counts under: its owner's id, or :data:`SITE`."""
    return SITE if owner_id is None else owner_id


def scope_of(endpoint: Endpoint) -> str:
    """``site`` for a site-wide endpoint, ``user`` for an account's own."""
    return "site" if endpoint.owner_id is None else "user"


def _owned_by(owner_id: str | None) -> sa.ColumnElement[bool]:
    return Endpoint.owner_id.is_(None) if owner_id is None else Endpoint.owner_id == owner_id


def _reachable(caller: Caller) -> sa.ColumnElement[bool]:
    """The endpoints ``caller`` may manage: hers, and the site's for an administrator."""
    mine = Endpoint.owner_id == caller.user_id
    return sa.or_(mine, Endpoint.owner_id.is_(None)) if caller.admin else mine


# -- checks -------------------------------------------------------------------------------


def check_url(url: str) -> str:
    """A webhook URL that may be saved: http(s) with no credentials, whose host resolves
    only to addresses the SSRF guard lets through (or the operator's
    ``WIKINOTIFY_OUTBOUND_ALLOW`` names). :class:`Refused` naming ``url`` otherwise."""
    url = url.strip()
    try:
        ssrf.check(url, allowed=ssrf.allowed())
    except ssrf.Blocked as blocked:
        raise Refused("url", f"This URL is refused: {blocked.reason}.") from None
    return url


def check_chat_target(url: str) -> tuple[str, str]:
    """An Apprise URL that may be saved (one Apprise can send to, whose host, for a
    self-hosted service, the SSRF guard admits) and the masked form its owner is shown.
    :class:`Refused` naming ``url`` otherwise."""
    url = url.strip()
    try:
        return url, chat.check_target(url, ssrf.allowed())
    except chat.InvalidChatTarget as invalid:
        raise Refused("url", f"This chat URL is refused: {invalid}.") from None
    except ssrf.Blocked as blocked:
        raise Refused("url", f"This chat URL is refused: {blocked.reason}.") from None


def check_categories(wanted: Iterable[str], known: Iterable[str]) -> list[str]:
    """``wanted`` without repeats, in the order given; :class:`Refused` on a key that is
    not a category the owner may choose."""
    known = set(known)
    chosen: list[str] = []
    for index, key in enumerate(wanted):
        if key not in known:
            raise Refused(f"categories.{index}",
                          f"No category this endpoint may be told of has the key {key!r}.")
        if key not in chosen:
            chosen.append(key)
    if not chosen:
        raise Refused("categories", "Choose at least one category.")
    return chosen


# -- reading ------------------------------------------------------------------------------


def list_endpoints(session: Session, owner_id: str | None, kind: str) -> list[Endpoint]:
    """``owner_id``'s endpoints of ``kind`` (the site's for ``None``), oldest first."""
    query = sa.select(Endpoint).where(_owned_by(owner_id), Endpoint.kind == kind)
    return list(session.scalars(query.order_by(Endpoint.id)))


def find(session: Session, caller: Caller, endpoint_id: int, kind: str) -> Endpoint | None:
    """The endpoint ``endpoint_id`` if ``caller`` may manage it; ``None`` otherwise, the
    same for someone else's as for one that does not exist."""
    query = sa.select(Endpoint).where(
        Endpoint.id == endpoint_id, Endpoint.kind == kind, _reachable(caller)
    )
    return session.scalar(query)


def channels_set_up(session: Session, user_id: str) -> set[str]:
    """The outbound channels ``user_id`` has an endpoint for (not disabled): one query."""
    query = sa.select(Endpoint.kind).where(
        Endpoint.owner_id == user_id, Endpoint.state.in_(SET_UP)
    )
    return set(session.scalars(query.distinct()))


def deliveries(
    session: Session, caller: Caller, endpoint_id: int, *, before: int | None = None,
    limit: int = DELIVERIES_PAGE,
) -> DeliveryPage:
    """The deliveries of endpoint ``endpoint_id``, if ``caller`` may manage it, newest
    first, ``limit`` at a time: keyset on the id, so a page never shifts under delivery
    rows being added. The owner is named in the query itself (joined through the
    endpoint), not only in the look-up that found the endpoint."""
    query = (
        sa.select(Delivery)
        .join(Endpoint, Endpoint.id == Delivery.endpoint_id)
        .where(Delivery.endpoint_id == endpoint_id, _reachable(caller))
    )
    if before is not None:
        query = query.where(Delivery.id < before)
    rows = list(session.scalars(query.order_by(Delivery.id.desc()).limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return DeliveryPage(rows, str(rows[-1].id) if more else None)


# -- writing ------------------------------------------------------------------------------


def _make_room(session: Session, owner_id: str | None) -> None:
    """Refuse a new endpoint (:class:`TooMany`) to an owner who has as many as
    ``WIKINOTIFY_ENDPOINTS_PER_ACCOUNT`` already, webhooks and chat targets together,
    disabled ones too (they can be enabled again).

    The count is taken under a lock of the owner's, held until the transaction ends, so
    that two requests at once cannot both take the last place."""
    dialects.write_lock(session, Endpoint.__table__,
                        f"wikinotify_endpoints:{owner_key(owner_id)}")
    limit = config("ENDPOINTS_PER_ACCOUNT")
    # A browser's push subscription has a bound of its own (WIKINOTIFY_PUSH_PER_ACCOUNT).
    held = session.scalar(sa.select(sa.func.count()).where(
        _owned_by(owner_id), Endpoint.kind != EndpointKind.PUSH))
    if (held or 0) >= limit:
        raise TooMany(limit)


def create_webhook(
    session: Session,
    owner_id: str | None,
    *,
    url: str,
    categories: list[str],
    description: str = "",
    site_id: str | None = None,
) -> tuple[Endpoint, str]:
    """A new webhook endpoint (checked values only) and its signing secret, which the
    caller shows once. It starts unverified, with its verification delivery waiting.
    :class:`TooMany` when its owner has no room for one more."""
    _make_room(session, owner_id)
    secret = standard_webhooks.new_secret()
    endpoint = Endpoint(
        kind=EndpointKind.WEBHOOK, owner_id=owner_id, site_id=site_id, url=url,
        categories=categories, description=description, secret_encrypted=secrets_box.seal(secret),
        state=EndpointState.UNVERIFIED,
    )
    session.add(endpoint)
    session.flush()
    verification.start(session, endpoint)
    return endpoint, secret


def create_chat(
    session: Session, owner_id: str, *, url: str, hint: str, categories: list[str],
    description: str = "",
) -> Endpoint:
    """A new chat target (a checked Apprise URL), stored sealed and shown masked. Active at
    once: the URL's token is the owner's proof that the chat is hers. :class:`TooMany`
    when its owner has no room for one more."""
    _make_room(session, owner_id)
    endpoint = Endpoint(
        kind=EndpointKind.CHAT, owner_id=owner_id, target_encrypted=secrets_box.seal(url),
        target_hint=hint, categories=categories, description=description,
        state=EndpointState.ACTIVE, verified_at=utcnow(),
    )
    session.add(endpoint)
    session.flush()
    return endpoint


def update(session: Session, endpoint: Endpoint, changes: dict[str, Any]) -> list[str]:
    """Apply checked ``changes`` (``url``, ``categories``, ``description``, ``enabled``);
    the names of those that changed something, in that order.

    A new URL is a new receiver, which must prove it wants the traffic: the endpoint is
    unverified again and the deliveries meant for the old one are cancelled. Disabling
    cancels what waits too (re-enabling does not replay it); re-enabling a verified
    endpoint at the same URL makes it active, an unverified one verifies again."""
    changed = _changed(endpoint, changes)
    for name in ("categories", "description"):
        if name in changes:
            setattr(endpoint, name, changes[name])
    moved = "url" in changes and changes["url"] != endpoint.url
    if moved:
        endpoint.url = changes["url"]
        endpoint.verified_at = None
        # A delivery belongs to the URL it was made for: the failed ones go too, so no
        # retry sends them to a receiver that never asked for them.
        _cancel_waiting(session, endpoint, also_failed=True)
    enabled = changes.get("enabled")
    if enabled is False:
        _disable(session, endpoint, "Disabled by its owner.")
    elif (moved and endpoint.state != EndpointState.DISABLED) or (
        enabled and endpoint.state == EndpointState.DISABLED
    ):
        # A disabled endpoint that moves stays disabled; enabled later, it verifies then.
        _cancel_waiting(session, endpoint)
        _reenable(session, endpoint)
    return changed


def _changed(endpoint: Endpoint, changes: dict[str, Any]) -> list[str]:
    now = {"url": endpoint.url, "categories": endpoint.categories,
           "description": endpoint.description, "enabled": endpoint.state != EndpointState.DISABLED}
    return [name for name in now if name in changes and changes[name] != now[name]]


def audited(endpoint: Endpoint) -> dict[str, Any]:
    """What an audit record says of ``endpoint``: never a secret, never a chat target's
    URL (only its masked form), and of a webhook's URL only the host, since its path may
    hold a token of the receiver's."""
    if endpoint.kind == EndpointKind.CHAT:
        target = endpoint.target_hint
    else:
        target = urlsplit(endpoint.url or "").hostname
    return {"endpoint": endpoint.id, "channel": endpoint.kind, "scope": scope_of(endpoint),
            "target": target, "state": endpoint.state}


def audit(host: Host, action: str, endpoint: Endpoint, *, actor_id: str | None,
          by_admin: bool = False, **more: Any) -> None:
    """Record a change to ``endpoint`` in the wiki's audit log through ``host``, before
    its commit: a site-wide endpoint's, or any made ``by_admin`` (Admin → Notifications),
    as an administrator's act, an account's own as a profile change; ``actor_id`` None for
    the delivery engine's own, made in a worker with no one signed in. Never a secret
    (:func:`audited`)."""
    host.audit(action, actor_id=actor_id,
               kind="admin" if by_admin or scope_of(endpoint) == "site" else "profile",
               details={**audited(endpoint), **more})


def _disable(session: Session, endpoint: Endpoint, reason: str) -> None:
    endpoint.state = EndpointState.DISABLED
    endpoint.disabled_reason = reason
    _cancel_waiting(session, endpoint)


def _reenable(session: Session, endpoint: Endpoint) -> None:
    endpoint.disabled_reason = None
    endpoint.failing_since = None
    if endpoint.kind == EndpointKind.CHAT or endpoint.verified_at is not None:
        endpoint.state = EndpointState.ACTIVE
        return
    endpoint.state = EndpointState.UNVERIFIED
    verification.start(session, endpoint)


def _cancel_waiting(session: Session, endpoint: Endpoint, *, also_failed: bool = False) -> None:
    states = (*DELIVERY_NOT_SENT, DeliveryState.FAILED) if also_failed else DELIVERY_NOT_SENT
    session.execute(
        sa.update(Delivery)
        .where(Delivery.endpoint_id == endpoint.id, Delivery.state.in_(states))
        .values(state=DeliveryState.CANCELLED, next_attempt_at=None, updated_at=utcnow())
    )


def delete(session: Session, endpoint: Endpoint) -> None:
    """Delete the endpoint and its deliveries (said here, not left to the foreign key's
    cascade, which SQLite applies only with its foreign keys switched on)."""
    session.execute(sa.delete(Delivery).where(Delivery.endpoint_id == endpoint.id))
    session.delete(endpoint)


class RotationPending(Exception):
    """A rotation asked for while the previous secret still signs: refused, because the
    endpoint keeps one previous secret, and replacing it would drop, at once, the secret
    the receiver may still be verifying with."""

    def __init__(self, until: datetime) -> None:
        super().__init__(f"the previous secret still signs until {until.isoformat()}")
        self.until = until


def rotate_secret(session: Session, endpoint: Endpoint, *, now: datetime | None = None) -> str:
    """A new signing secret, returned once; the old one keeps signing beside it for
    :data:`~.standard_webhooks.ROTATION_OVERLAP`, so a receiver can switch without losing a
    delivery.
    :class:`RotationPending` while the secret an earlier rotation replaced still signs."""
    now = now or utcnow()
    until = endpoint.previous_secret_until
    if endpoint.previous_secret_encrypted is not None and until is not None and until > now:
        raise RotationPending(until)
    secret = standard_webhooks.new_secret()
    endpoint.previous_secret_encrypted = endpoint.secret_encrypted
    endpoint.previous_secret_until = now + standard_webhooks.ROTATION_OVERLAP
    endpoint.secret_encrypted = secrets_box.seal(secret)
    return secret


def send_test(session: Session, endpoint: Endpoint, text: str) -> Delivery | None:
    """Queue a test delivery: ``webhook.test`` (or ``chat.test``) carrying ``text``.

    An unverified webhook is sent its verification again instead (nothing else goes to
    it until it answers; a new challenge cancels the one waiting); a disabled endpoint
    gets nothing (``None``). At most one test waits per endpoint: asked again before it
    went, the one waiting is the answer, so pressing the button cannot queue a flood."""
    if endpoint.state == EndpointState.DISABLED:
        return None
    if endpoint.state == EndpointState.UNVERIFIED:
        return verification.start(session, endpoint)
    waiting = session.scalar(
        sa.select(Delivery).where(
            Delivery.endpoint_id == endpoint.id, Delivery.type == f"{endpoint.kind}.test",
            Delivery.state.in_(DELIVERY_NOT_SENT),
        ).limit(1)
    )
    if waiting is not None:
        return waiting
    delivery = Delivery(
        endpoint_id=endpoint.id, user_id=endpoint.owner_id,
        message_id=standard_webhooks.new_message_id(),
        type=f"{endpoint.kind}.test", payload={"message": text},
        state=DeliveryState.PENDING,
        next_attempt_at=utcnow(),
    )
    session.add(delivery)
    session.flush()
    return delivery


def parse_cursor(raw: str | None) -> int | None:
    """A deliveries cursor (an id this API gave out); :class:`Refused` naming ``cursor``."""
    if raw is None:
        return None
    if not re.fullmatch(r"[1-9][0-9]{0,17}", raw):
        raise Refused("cursor", "Not a cursor this API gave out.")
    return int(raw)

