"""What one delivery attempt came to, and the message it carried: the types a sender
returns and takes (:mod:`.engine` documents the contract), and the classes of the answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from ..models import Delivery, DeliveryState, Endpoint, ErrorClass, utcnow

#: The most of a receiver's answer any sender reads (a webhook's, a chat service's): what
#: an answer says is in its first bytes (a verification's echo, a service's error), and a
#: receiver that answers more must not cost the worker its memory.
ANSWER_LIMIT = 64 * 1024
#: The longest ``Retry-After`` honoured; a longer one is read as this.
MAX_RETRY_AFTER = timedelta(hours=24)

# The names the senders and the engine use. A blocked or ineligible delivery ends in the
# state of its class's name.
DELIVERED = DeliveryState.DELIVERED
TRANSIENT = ErrorClass.TRANSIENT
RATE_LIMIT = ErrorClass.RATE_LIMIT
PERMANENT = ErrorClass.PERMANENT
GONE = ErrorClass.GONE
BLOCKED = ErrorClass.BLOCKED
INELIGIBLE = ErrorClass.INELIGIBLE
#: The classes that are tried again.
RETRIED = (TRANSIENT, RATE_LIMIT)


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to. ``error_class`` is ``None`` when it was delivered."""

    status: int | None = None
    latency_ms: int | None = None
    error_class: str | None = None
    error: str | None = None
    #: Seconds the receiver asked us to wait (``Retry-After``), if it did.
    retry_after: float | None = None
    #: The start of the receiver's answer (a verification's echo is read from it).
    body: bytes = b""

    @property
    def delivered(self) -> bool:
        return self.error_class is None


@dataclass(frozen=True)
class Message:
    """What a delivery carries, built just before it is sent."""

    type: str
    #: The JSON body of a webhook request (Standard Webhooks' ``type``/``timestamp``/``data``).
    body: str
    #: A chat message's title and text (the entry's sentence and link), in the reader's
    #: language.
    title: str
    text: str


Sender = Callable[[Endpoint, Delivery, Message], Outcome]


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """A ``Retry-After`` header (delta-seconds or an HTTP date) as seconds from now,
    at most :data:`MAX_RETRY_AFTER`; ``None`` if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or utcnow())).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER.total_seconds())


def from_status(
    status: int,
    *,
    latency_ms: int | None,
    retry_after: str | None = None,
    location: str | None = None,
    body: bytes = b"",
) -> Outcome:
    """The class of an HTTP answer (see the module's docstring)."""
    common: dict[str, Any] = {"status": status, "latency_ms": latency_ms, "body": body}
    if 200 <= status < 300:
        return Outcome(**common)
    if status == 410:
        return Outcome(**common, error_class=GONE, error="410 Gone: the receiver is gone")
    if status == 429:
        return Outcome(**common, error_class=RATE_LIMIT, error="429 Too Many Requests",
                       retry_after=retry_after_seconds(retry_after))
    if status == 408 or status >= 500:
        return Outcome(**common, error_class=TRANSIENT, error=f"the receiver answered {status}",
                       retry_after=retry_after_seconds(retry_after))
    if 300 <= status < 400:
        where = f" to {location[:200]}" if location else ""
        return Outcome(**common, error_class=PERMANENT,
                       error=f"redirected{where} ({status}); redirects are not followed")
    return Outcome(**common, error_class=PERMANENT, error=f"the receiver answered {status}")


def unreachable(error: str, *, latency_ms: int | None = None) -> Outcome:
    """No answer: refused, reset, timed out. Tried again."""
    return Outcome(latency_ms=latency_ms, error_class=TRANSIENT, error=error)


def blocked(reason: str) -> Outcome:
    """The SSRF guard refused an address; no request was made."""
    return Outcome(error_class=BLOCKED, error=reason)


