"""The scrape (docs/operating.md#metrics): every metric read at the moment Prometheus asks,
so any web process answers for all of them, whatever gunicorn and RQ fork.

The counters come from the hash every process adds to (:mod:`wikinotify.counters`); the
gauges from the database and Redis as they are now. A collector of wikinotify's own,
registered on a registry of its own, never on ``prometheus_client``'s global one: the
host's metrics stay the host's, and nothing here lives from one scrape to the next.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from flask import Flask
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.exceptions import RedisError

from . import counters, queue
from .inbox import stream_places

log = logging.getLogger(__name__)

#: The gauge that says which of the scrape's sources answered (1) or not (0).
SOURCE_UP = "wikinotify_metrics_source_up"


class WikinotifyCollector(Collector):
    """Every wikinotify metric, read when collected."""

    def __init__(self, app: Flask) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(SOURCE_UP, "Whether the scrape could read this source: "
                               "1, or 0 and its metrics are missing from the scrape.",
                               labels=["source"])
        try:
            yield from self._redis()
            up.add_metric(["redis"], 1)
        except (RedisError, OSError) as error:
            log.warning("wikinotify: the metrics could not read Redis: %s", error)
            up.add_metric(["redis"], 0)
        yield up

    def _redis(self) -> Iterator[Metric]:
        client = queue.connection(self.app)
        counted = counters.read(self.app, client)
        streams = stream_places.open_streams(self.app, client)
        yield from _counters(counted)
        yield GaugeMetricFamily("wikinotify_open_streams",
                                "Live streams (GET /stream) open now, on every web process.",
                                value=streams)


def _counters(counted: dict[str, int]) -> Iterator[Metric]:
    for counter in counters.COUNTERS:
        family = CounterMetricFamily(counter.name, counter.help, labels=counter.label_names)
        for values in counter.series():
            family.add_metric(list(values), counted.get(counter.field(*values), 0))
        yield family


def exposition(app: Flask) -> bytes:
    """The scrape, in Prometheus's text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WikinotifyCollector(app))
    return generate_latest(registry)
