"""wikinotify's Prometheus counters (docs/operating.md#metrics), kept in Redis.

A gunicorn worker, an RQ worker and each work horse it forks are processes of their own,
and a horse ends with its job: a counter kept in a process would be lost with it, or
counted apart by each. So every counter is a field of one Redis hash that every process
adds to (``HINCRBY``, once per job run, its run's totals in one round trip), and the
``/metrics`` route reads it whole at scrape time (:mod:`wikinotify.metrics`).

Each counter's labels take their values from wikinotify's vocabulary
(:mod:`wikinotify.models.vocabulary`), never from free text, so the series are few and
known: every one is shown, at 0 until it is first counted, so that an alert's rate has
a series to start from.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from flask import Flask
from redis import Redis
from redis.client import Pipeline
from redis.exceptions import RedisError

from . import queue
from .models.vocabulary import Channel, DeliveryState, ErrorClass, SkipReason

log = logging.getLogger(__name__)

#: Between a counter's name and its label values in a field of the hash; no name or
#: vocabulary value holds it.
SEPARATOR = "|"


@dataclass(frozen=True)
class Counter:
    """One counter: its name (without Prometheus's ``_total``), what it counts, and its
    labels with every value each may take."""

    name: str
    help: str
    labels: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def field(self, *values: str) -> str:
        """The hash field of this counter's series with label ``values``, in order."""
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name} takes {len(self.labels)} label values")
        for (label, allowed), value in zip(self.labels, values, strict=True):
            if value not in allowed:
                raise ValueError(f"{value!r} is not a {label} of {self.name}")
        return SEPARATOR.join((self.name, *values))

    @property
    def label_names(self) -> list[str]:
        return [label for label, _ in self.labels]

    def series(self) -> Iterable[tuple[str, ...]]:
        """Every combination of label values."""
        return itertools.product(*(allowed for _, allowed in self.labels))


def _values(*members: Iterable[StrEnum]) -> tuple[str, ...]:
    return tuple(str(m) for group in members for m in group)


EVENTS_EMITTED = Counter(
    "wikinotify_events_emitted",
    "Events written to the outbox and committed, counted by the web process after the "
    "commit (in the kick's own Redis round trip).")
EVENTS_FANNED_OUT = Counter(
    "wikinotify_events_fanned_out",
    "Events whose fan-out finished (a split event when its last range did).")
EVENT_FAILURES = Counter(
    "wikinotify_event_failures",
    "Failed attempts at fanning out an event or one range of it (each backs off, or "
    "makes a dead letter).")
EVENTS_DEAD = Counter(
    "wikinotify_events_dead_lettered",
    "Events given up after their attempts: dead letters an administrator retries.")
ENTRIES_WRITTEN = Counter(
    "wikinotify_entries_written",
    "Inbox entries the fan-out wrote, new or coalesced into an unread one.")
MAILS_SENT = Counter(
    "wikinotify_mails_sent",
    "Notification mails the SMTP relay accepted (one mail carries one or more entries).")
MAIL_FAILURES = Counter(
    "wikinotify_mail_failures",
    "Mails that failed to be built or sent, by the failure's class (a transient one is "
    "tried again; docs/rules.md#the-mail-run).",
    (("error_class", _values((ErrorClass.TRANSIENT, ErrorClass.RATE_LIMIT,
                              ErrorClass.PERMANENT, ErrorClass.CONFIGURATION))),))
MAIL_SKIPPED = Counter(
    "wikinotify_mail_entries_skipped",
    "Entries whose mail the mail run dropped at send time, by why.",
    (("reason", _values(SkipReason)),))
DELIVERIES = Counter(
    "wikinotify_deliveries",
    "Webhook, chat and push delivery attempts, by channel and the state the attempt left "
    "the delivery in (pending: to be tried again).",
    (("channel", _values((Channel.WEBHOOK, Channel.CHAT, Channel.PUSH))),
     ("state", _values((DeliveryState.DELIVERED, DeliveryState.PENDING,
                        DeliveryState.FAILED, DeliveryState.BLOCKED,
                        DeliveryState.INELIGIBLE)))))

#: Every counter, in the order the scrape shows them.
COUNTERS = (EVENTS_EMITTED, EVENTS_FANNED_OUT, EVENT_FAILURES, EVENTS_DEAD, ENTRIES_WRITTEN,
            MAILS_SENT, MAIL_FAILURES, MAIL_SKIPPED, DELIVERIES)


def key(app: Flask) -> str:
    """The hash every counter is a field of."""
    return queue.redis_key(app, "metrics")


def adding(app: Flask, counts: Mapping[str, int]) -> Callable[[Pipeline], None]:
    """What adds ``counts`` (hash field → how many) to a pipeline: for a caller whose own
    round trip to Redis carries them (the kick after an emit)."""
    def add(pipe: Pipeline) -> None:
        for field, n in counts.items():
            if n:
                pipe.hincrby(key(app), field, n)
    return add


def add(app: Flask, counts: Mapping[str, int], client: Redis | None = None) -> None:
    """Add ``counts`` to the counters in one round trip. Never raises: a Redis error is
    logged and the figures are lost, never the job that counted them."""
    if not any(counts.values()):
        return
    try:
        pipe = (client or queue.connection(app)).pipeline(transaction=False)
        adding(app, counts)(pipe)
        pipe.execute()
    except (RedisError, OSError) as error:
        log.warning("wikinotify: could not add to the metrics' counters (%s); these "
                    "figures are lost", error)


def read(app: Flask, client: Redis | None = None) -> dict[str, int]:
    """Every counted field and its count. Raises what Redis raises."""
    client = client or queue.connection(app)
    counted: dict[bytes, bytes] = client.hgetall(key(app))  # type: ignore[assignment]
    return {field.decode(): int(n) for field, n in counted.items()}
