"""wikinotify's vocabulary: every state and kind a column holds, named once.

The CHECK constraints and partial indexes of :mod:`wikinotify.models`, the API's schemas,
the claims and the queries read the values from these enums, so a state is spelled in one
place. Each is a :class:`~enum.StrEnum`: a member is the string the database and the JSON
carry, and compares equal to it.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class EmailState(StrEnum):
    """Where an entry's mail stands (``Notification.email_state``)."""

    NONE = "none"  # no mail: the reader wants none, or the wiki sends none
    PENDING = "pending"  # waiting for its time (``email_after``)
    SENDING = "sending"  # claimed by a mail run until ``email_after``, its lease
    SENT = "sent"
    FAILED = "failed"  # given up after its attempts
    SKIPPED = "skipped"  # cancelled: read, muted, unsubscribed, or refused at send time


#: Mail not sent yet, which reading the entry (or muting, or unsubscribing) cancels:
#: waiting for its time, or claimed by a mail run, whose mail may still not go (a relay's
#: refusal gives the claim back) and must then stay cancelled.
MAIL_NOT_SENT = (EmailState.PENDING, EmailState.SENDING)


class DeliveryState(StrEnum):
    """Where a webhook, chat or push delivery stands (``Delivery.state``)."""

    PENDING = "pending"  # waiting for its time (``next_attempt_at``)
    SENDING = "sending"  # claimed by a delivery run until ``next_attempt_at``, its lease
    DELIVERED = "delivered"
    FAILED = "failed"  # given up after its attempts
    BLOCKED = "blocked"  # its address is one wikinotify never calls (SSRF)
    INELIGIBLE = "ineligible"  # its reader may no longer be told: never sent
    CANCELLED = "cancelled"  # its endpoint was disabled, or a newer challenge replaced it


#: A delivery not made yet: waiting for its time, or claimed by a delivery run.
DELIVERY_NOT_SENT = (DeliveryState.PENDING, DeliveryState.SENDING)


class ErrorClass(StrEnum):
    """Why an attempt failed (``Notification.email_error_class``, ``Delivery.error_class``):
    it decides whether the attempt is made again."""

    TRANSIENT = "transient"  # tried again, until the attempts are spent
    RATE_LIMIT = "rate_limit"  # tried again after the wait asked for
    PERMANENT = "permanent"  # never tried again
    CONFIGURATION = "configuration"  # mail: the relay refuses wikinotify's settings
    GONE = "gone"  # a webhook's 410: its endpoint is disabled
    BLOCKED = "blocked"  # a delivery's address is one wikinotify never calls
    INELIGIBLE = "ineligible"  # a delivery's reader may no longer be told


class SkipReason(StrEnum):
    """Why a mail run dropped an entry's mail at send time (the ``reason`` label of
    ``wikinotify_mail_entries_skipped_total``, docs/operating.md#metrics); the sentence
    the row keeps is :data:`wikinotify.mail.drain.SKIPPED_BECAUSE`'s."""

    ACCOUNT = "account"  # the account is inactive, unverified or gone
    SITE_OFF = "site_off"  # the site's notifications are switched off
    PREFERENCE = "preference"  # the reader turned email off for its category
    NOT_VISIBLE = "not_visible"  # the reader can no longer see the page
    MUTED = "muted"  # the reader muted the page or the person


class Cadence(StrEnum):
    """When a reader's mail goes out (``EmailSchedule.schedule``)."""

    IMMEDIATE = "immediate"  # the short window of docs/rules.md#mail-cadence
    HOURLY = "hourly"
    DAILY = "daily"
    WEEKLY = "weekly"


class Channel(StrEnum):
    """Where wikinotify tells a reader (``Preference.channel``). A value, not a column: a
    new one needs no migration (docs/rules.md#channels), so no constraint checks it."""

    IN_APP = "inApp"
    EMAIL = "email"
    WEBHOOK = "webhook"
    CHAT = "chat"
    PUSH = "push"


class EndpointKind(StrEnum):
    """``Endpoint.kind``, each the :class:`Channel` of its name."""

    WEBHOOK = "webhook"  # a Standard Webhooks receiver
    CHAT = "chat"  # a chat target: an Apprise URL
    PUSH = "push"  # a browser's Web Push subscription (its PushSubscription row)


class EndpointState(StrEnum):
    UNVERIFIED = "unverified"  # until the receiver proves it wants the traffic
    ACTIVE = "active"
    DISABLED = "disabled"  # by a 410, by three days of failures, or by its owner


class MuteKind(StrEnum):
    PAGE = "page"  # nothing about the page
    USER = "user"  # nothing the person does


class Origin(StrEnum):
    """Where an event came from (``Event.origin``, docs/rules.md#origin)."""

    USER = "user"  # a person
    IMPORT = "import"  # an import or a storage sync (git pull)
    BULK = "bulk"  # a bulk operation


def sql_in(column: str, values: Iterable[str]) -> str:
    """``column IN ('a', 'b')``, for a CHECK constraint or a partial index's condition."""
    quoted = ", ".join(f"'{value}'" for value in values)
    return f"{column} IN ({quoted})"
