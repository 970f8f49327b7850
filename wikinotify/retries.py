"""An administrator's retries of what was given up on: a failed event (a dead letter), a
failed mail, a failed webhook or chat delivery. One path for the API, the page's buttons
and ``flask wikinotify retry`` (docs/operating.md#the-status-command): revive the item,
audit it through ``Host.audit``; the caller commits, then kicks the run that takes it.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from flask import Flask
from sqlalchemy.orm import Session

from . import admin, queue, vitals
from .host import Host
from .mail import claim as mail_claim
from .models import Delivery, Endpoint, Event, Notification
from .outbound import endpoints, engine


class Kind(StrEnum):
    """What may be retried, by the name the routes and the command give it."""

    EVENT = "event"
    MAIL = "mail"
    DELIVERY = "delivery"


@dataclass(frozen=True)
class Actor:
    """Who retries, as the audit records it: a signed-in administrator (``user_id``), or
    the command line, which has no account of the wiki's: ``actor_id`` None (as the
    system's own acts) and ``"via": "cli"`` with the operating-system user in the details."""

    user_id: str | None
    details: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def command_line(cls) -> Actor:
        return cls(None, {"via": "cli", "osUser": os_user()})


def os_user() -> str:
    """Who runs the command: the login name, else the uid (``kubectl exec`` with an
    arbitrary uid has no USER and no passwd entry, and getpass then raises)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def _audited(revive: Callable[[Session, int], bool], action: str,
             key: str) -> Callable[[Session, Host, int, Actor], bool]:
    """Revive with ``revive``, then audit ``action`` with the id under ``key``."""

    def run(session: Session, host: Host, item_id: int, actor: Actor) -> bool:
        if not revive(session, item_id):
            return False
        host.audit(action, actor_id=actor.user_id, kind="admin",
                   details={key: item_id, **actor.details})
        return True

    return run


def _delivery(session: Session, host: Host, delivery_id: int, actor: Actor) -> bool:
    delivery = engine.retry_failed(session, delivery_id)
    endpoint = session.get(Endpoint, delivery.endpoint_id) if delivery is not None else None
    if endpoint is None:  # a delivery goes with its endpoint: not found is not failed
        return False
    endpoints.audit(host, "retryNotificationDelivery", endpoint, actor_id=actor.user_id,
                    by_admin=True, delivery=delivery_id, **actor.details)
    return True


@dataclass(frozen=True)
class Retry:
    """How one kind is retried."""

    #: Make the failed item of this id due again and audit it; ``False`` if none is.
    revive: Callable[[Session, Host, int, Actor], bool]
    #: Ask for the run that takes it, after the commit (it reads what is committed).
    kick: Callable[[Flask], bool]
    #: The id column and the conditions of a failed item its ``revive`` takes (its owning
    #: module's), for retrying them all.
    column: Any
    failed: tuple[Any, ...]
    #: The API's 404 message.
    missing: str


RETRIES = {
    Kind.EVENT: Retry(_audited(admin.retry_event, "retryNotificationEvent", "event"),
                      queue.kick_dispatch, Event.id, (vitals.DEAD_LETTER,),
                      "No such failed event."),
    Kind.MAIL: Retry(_audited(mail_claim.retry_failed, "retryNotificationMail", "mail"),
                     lambda app: queue.kick(app, queue.Job.SEND_MAIL), Notification.id,
                     (mail_claim.RETRYABLE,), "No such failed mail."),
    Kind.DELIVERY: Retry(_delivery, engine.kick, Delivery.id, engine.RETRYABLE,
                         "No such failed delivery."),
}


def retry(session: Session, host: Host, kind: Kind, item_id: int, actor: Actor) -> bool:
    """Revive and audit the failed ``kind`` of ``item_id`` (nothing committed)."""
    return RETRIES[kind].revive(session, host, item_id, actor)


def failed_among(session: Session, kind: Kind, ids: Iterable[int]) -> set[int]:
    """Which of ``ids`` name a failed ``kind`` now."""
    retry_of = RETRIES[kind]
    return set(session.scalars(
        sa.select(retry_of.column).where(*retry_of.failed, retry_of.column.in_(list(ids)))))


def failed_ids(session: Session, kind: Kind, *, batch: int) -> Iterator[list[int]]:
    """The ids of every failed ``kind``, ``batch`` at a time in id order (keyset): what
    ``--all`` walks, whatever the number."""
    retry_of, after = RETRIES[kind], 0
    while True:
        ids = list(session.scalars(
            sa.select(retry_of.column).where(*retry_of.failed, retry_of.column > after)
            .order_by(retry_of.column).limit(batch)))
        if not ids:
            return
        yield ids
        after = ids[-1]
