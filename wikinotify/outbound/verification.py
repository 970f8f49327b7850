"""Endpoint verification: a new webhook proves it wants the traffic before it gets any.

A new (or moved, or re-enabled and never verified) webhook endpoint is sent a signed
``webhook.verification`` event whose data is ``{"challenge": "<random>"}``. It becomes
active when the receiver answers it with a 2xx whose JSON body echoes the challenge:
``{"challenge": "<the same>"}``. A 2xx without the echo fails that delivery for good
(the receiver does not speak this handshake); a transient failure is retried like any
delivery. Until it is active the fan-out creates no deliveries for it, and its owner's
"test" sends the verification again. Chat targets need none: the token in an Apprise URL
is its owner's proof.
"""

from __future__ import annotations

import json
import secrets
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..models import Delivery, DeliveryState, Endpoint, EndpointState, utcnow
from .outcomes import PERMANENT, Outcome
from .standard_webhooks import new_message_id

TYPE = "webhook.verification"

NOT_ECHOED = "the receiver answered without echoing the challenge ({\"challenge\": ...})"


def start(session: Session, endpoint: Endpoint) -> Delivery:
    """A fresh challenge for ``endpoint`` and the delivery that carries it, due now; an
    earlier challenge still waiting is cancelled (only the newest can activate it)."""
    endpoint.challenge = secrets.token_urlsafe(24)
    now = utcnow()
    session.execute(
        sa.update(Delivery)
        .where(Delivery.endpoint_id == endpoint.id, Delivery.type == TYPE,
               Delivery.state == DeliveryState.PENDING)
        .values(state=DeliveryState.CANCELLED, next_attempt_at=None, updated_at=now)
    )
    delivery = Delivery(
        endpoint_id=endpoint.id, user_id=endpoint.owner_id, message_id=new_message_id(),
        type=TYPE, payload={"challenge": endpoint.challenge},
        state=DeliveryState.PENDING,
        next_attempt_at=now,
    )
    session.add(delivery)
    session.flush()
    return delivery


def judge(delivery: Delivery, outcome: Outcome) -> Outcome:
    """A 2xx counts only if its body echoes the challenge the delivery carried."""
    if not outcome.delivered:
        return outcome
    try:
        echoed = json.loads(outcome.body or b"null")
    except (ValueError, UnicodeDecodeError):
        echoed = None
    challenge = (delivery.payload or {}).get("challenge")
    if isinstance(echoed, dict) and challenge and echoed.get("challenge") == challenge:
        return outcome
    return Outcome(status=outcome.status, latency_ms=outcome.latency_ms,
                   error_class=PERMANENT, error=NOT_ECHOED)


def activate(endpoint: Endpoint, now: datetime) -> bool:
    """Make an unverified ``endpoint`` active; whether it was unverified."""
    if endpoint.state != EndpointState.UNVERIFIED:
        return False
    endpoint.state = EndpointState.ACTIVE
    endpoint.verified_at = now
    endpoint.challenge = None
    return True
