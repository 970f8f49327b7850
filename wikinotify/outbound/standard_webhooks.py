"""Standard Webhooks signatures (https://www.standardwebhooks.com/), made by the
``standardwebhooks`` library so that what we sign is exactly what its verifier checks.

``webhook-signature`` is ``v1,<base64 HMAC-SHA256 of "id.timestamp.body">``. For 24 hours
after a rotation it carries a second signature, made with the previous secret, space
separated as the specification allows: a receiver still holding the old secret keeps
verifying until it has the new one.
"""

from __future__ import annotations

import base64
import secrets
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from standardwebhooks import Webhook

from ..models import Endpoint
from . import secrets_box

PREFIX = "whsec_"
#: How long the secret before a rotation keeps signing beside the new one.
ROTATION_OVERLAP = timedelta(hours=24)


def new_secret() -> str:
    """A fresh signing secret, ``whsec_`` and 32 random bytes in base64 (the form the
    specification and every Standard Webhooks library read)."""
    return PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def new_message_id() -> str:
    """A ``webhook-id``: unique, and the same on every retry of one delivery, so a
    receiver can drop what it already has."""
    return f"msg_{uuid.uuid4().hex}"


def signing_secrets(endpoint: Endpoint, now: datetime) -> list[str]:
    """The secrets that sign ``endpoint``'s requests at ``now``: its own, and the one
    before the last rotation while that one's overlap lasts."""
    found = []
    if endpoint.secret_encrypted is not None:
        found.append(secrets_box.unseal(endpoint.secret_encrypted))
    until = endpoint.previous_secret_until
    if endpoint.previous_secret_encrypted is not None and until is not None and now < until:
        found.append(secrets_box.unseal(endpoint.previous_secret_encrypted))
    return found


def headers(
    message_id: str, timestamp: datetime, body: str, secrets_: Sequence[str]
) -> dict[str, str]:
    """The three Standard Webhooks headers for ``body``, signed with each secret."""
    signatures = [Webhook(secret).sign(message_id, timestamp, body) for secret in secrets_]
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(timestamp.timestamp())),
        "webhook-signature": " ".join(signatures),
    }
