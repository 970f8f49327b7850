"""The scrape (docs/operating.md#metrics): every metric read at the moment Prometheus asks,
so any web process answers for all of them, whatever gunicorn and RQ fork.

The counters come from the hash every process adds to (:mod:`wikinotify.counters`); the
gauges from the database and Redis as they are now, through the same reading Admin →
Notifications and ``flask wikinotify status`` show (:func:`wikinotify.vitals.measure`).

A collector of wikinotify's own, registered on a registry of its own, never on
``prometheus_client``'s global one: the host's metrics stay the host's, and nothing here
lives from one scrape to the next.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator

import sqlalchemy as sa
from flask import Flask
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.exceptions import RedisError
from sqlalchemy.orm import Session

from . import counters, queue
from .config import config
from .inbox import stream_places
from .models import utcnow
from .vitals import COUNT_CAP, CRON_SILENCE, Vitals, measure

log = logging.getLogger(__name__)

#: The gauge that says which of the scrape's sources answered (1) or not (0).
SOURCE_UP = "wikinotify_metrics_source_up"


class WikinotifyCollector(Collector):
    """Every wikinotify metric, read when collected."""

    def __init__(self, app: Flask, session: Session) -> None:
        self.app = app
        self.session = session
        #: Whether each source answered, for :data:`SOURCE_UP`.
        self.up: dict[str, bool] = {}

    def collect(self) -> Iterator[Metric]:
        self.up = {"redis": True, "database": True}
        yield from _thresholds(self.app)
        yield from self._from_redis()
        yield from self._vitals()
        up = GaugeMetricFamily(SOURCE_UP, "Whether the scrape could read this source: "
                               "1, or 0 and its metrics are missing from the scrape.",
                               labels=["source"])
        for source, answered in self.up.items():
            up.add_metric([source], int(answered))
        yield up

    def _from_redis(self) -> Iterator[Metric]:
        # The readiness client: a Redis that hangs costs the scrape a bounded wait.
        client = queue.probe_client(self.app)
        try:
            counted = counters.read(self.app, client)
            streams = stream_places.open_streams(client, self.app)
        except (RedisError, OSError) as error:
            log.warning("wikinotify: the metrics could not read Redis: %s", error)
            self.up["redis"] = False
            return
        yield from _counters(counted)
        yield _gauge("wikinotify_open_streams",
                     "Live streams (GET /stream) open now, on every web process.", streams)

    def _vitals(self) -> Iterator[Metric]:
        try:
            vitals = measure(self.session, self.app, now=utcnow())
        except sa.exc.SQLAlchemyError as error:
            log.warning("wikinotify: the metrics could not read the database: %s", error)
            self.session.rollback()
            self.up["database"] = False
            return
        yield from _database_gauges(vitals)
        if not vitals.redis_reachable:
            self.up["redis"] = False
            return
        yield from _redis_gauges(vitals)


def _gauge(name: str, help: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help, value=value)


def _thresholds(app: Flask) -> Iterator[Metric]:
    # What the alerting rules compare with (docs/prometheus-rules.yml): the wiki's own
    # setting and the status command's bound, never a copy of their defaults.
    yield _gauge("wikinotify_backlog_warning_seconds",
                 "WIKINOTIFY_BACKLOG_WARNING: the age of the oldest waiting event past "
                 "which wikinotify warns.", config("BACKLOG_WARNING", app))
    yield _gauge("wikinotify_cron_silence_seconds",
                 "Seconds without a heartbeat of rq cron past which wikinotify warns.",
                 CRON_SILENCE)


def _database_gauges(vitals: Vitals) -> Iterator[Metric]:
    capped = f" (counted up to {COUNT_CAP})"
    yield _gauge("wikinotify_events_waiting",
                 "Events waiting for fan-out" + capped + ".", vitals.events_waiting)
    yield _gauge("wikinotify_outbox_oldest_waiting_age_seconds",
                 "Seconds the oldest event waiting for fan-out has waited (0: none waits).",
                 vitals.oldest_waiting_age or 0.0)
    yield _gauge("wikinotify_dead_letters",
                 "Events whose fan-out failed on every attempt, waiting for an "
                 "administrator's retry" + capped + ".", vitals.dead_letters)
    yield _gauge("wikinotify_mail_entries_pending",
                 "Entries whose mail is not out yet (pending, or claimed by a mail run)"
                 + capped + ".", vitals.mail_entries_pending)
    yield _gauge("wikinotify_mail_entries_due",
                 "Of those, the entries a mail run would take now" + capped + ".",
                 vitals.mail_entries_due)
    yield _gauge("wikinotify_mail_failed_24h",
                 "Mails given up on in the last 24 hours (a digest is one)" + capped + ".",
                 vitals.mail_failed_24h)
    yield _gauge("wikinotify_deliveries_waiting",
                 "Webhook and chat deliveries not made yet" + capped + ".",
                 vitals.deliveries_waiting)
    yield _gauge("wikinotify_deliveries_failed_24h",
                 "Webhook and chat deliveries (verifications aside) given up on in the last "
                 f"24 hours, among the latest {COUNT_CAP}.", vitals.deliveries_failed_24h)


def _redis_gauges(vitals: Vitals) -> Iterator[Metric]:
    jobs = GaugeMetricFamily("wikinotify_queue_jobs", "Jobs queued on each of wikinotify's "
                             "RQ queues.", labels=["queue"])
    starved = GaugeMetricFamily("wikinotify_queue_starved", "1 if work waits on the queue "
                                "and no worker serves it.", labels=["queue"])
    for name in vitals.queues:
        jobs.add_metric([name], vitals.queue_lengths.get(name, 0))
        starved.add_metric([name], int(name in vitals.starved_queues))
    yield jobs
    yield starved
    yield _gauge("wikinotify_workers", "RQ workers serving at least one of wikinotify's "
                 "queues.", vitals.workers)
    age = vitals.cron_last_seen_age
    yield _gauge("wikinotify_cron_last_seen_age_seconds",
                 "Seconds since wikinotify's rq cron last heartbeat (+Inf: never seen).",
                 math.inf if age is None else age)


def _counters(counted: dict[str, int]) -> Iterator[Metric]:
    for counter in counters.COUNTERS:
        family = CounterMetricFamily(counter.name, counter.help, labels=counter.label_names)
        for values in counter.series():
            family.add_metric(list(values), counted.get(counter.field(*values), 0))
        yield family


def exposition(app: Flask, session: Session) -> bytes:
    """The scrape, in Prometheus's text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WikinotifyCollector(app, session))
    return generate_latest(registry)
