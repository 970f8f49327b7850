"""What RQ's registries say runs: a worker and an ``rq cron`` registered in the real Redis,
through RQ's own calls (``register_birth`` / ``register_death``), for tests of what
wikinotify reads from them (its vitals) without a process that runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rq import Queue, Worker
from rq.cron import CronScheduler

from wikinotify import jobs
from wikinotify.queue import connection, queue_names


@contextmanager
def registered_worker(app, queues: list[str] | None = None) -> Iterator[Worker]:
    """A worker on ``queues`` (default: every wikinotify queue) as ``rq worker`` registers
    itself on start-up, gone from the registry on leaving."""
    client = connection(app)
    names = queues if queues is not None else queue_names(app)
    worker = Worker([Queue(name, connection=client) for name in names], connection=client)
    worker.register_birth()
    try:
        yield worker
    finally:
        worker.register_death()


@contextmanager
def registered_cron(app, queue: str | None = None, func=None) -> Iterator[CronScheduler]:
    """An ``rq cron`` with one job, ``func`` (default: wikinotify's fan-out kick) on
    ``queue`` (default: the app's fan-out queue), as it registers itself on start-up and
    heartbeats; gone from the registry on leaving."""
    client = connection(app)
    scheduler = CronScheduler(connection=client)
    scheduler.register(func or jobs.dispatch, queue or queue_names(app)[0], cron="* * * * *")
    scheduler.register_birth()
    scheduler.heartbeat()
    try:
        yield scheduler
    finally:
        scheduler.register_death()
