"""The fan-out benchmark: one edit to 10,000, 100,000 and 1,000,000 watchers.

Run from the repository root (PostgreSQL and Redis must be up)::

    python -m bench.fanout                          # 10,000 / 100,000 / 1,000,000 watchers
    python -m bench.fanout --quick                  # 1,000 / 10,000 only
    python -m bench.fanout --sizes 10000,100000     # any sizes
    python -m bench.fanout --profile 100000         # then where a fan-out's time goes

For each size it saves one edit through the demo wiki (``demo.wiki.save_page``, which
emits), runs one real ``rq worker -w wikinotify.jobs.appctx.Worker --burst`` process, and
prints the fan-out's recipients per second as a fraction of ceilings measured in the same
run. First the table's own, on exactly the rows the fan-out wrote: (c) one binary COPY of
them into an empty copy of the table (``LIKE … INCLUDING ALL``: every index), and (d) one
``INSERT … SELECT … ON CONFLICT DO NOTHING`` of them into such a copy; the targets are
measured against (c). Then two on the same table with the same indexes, writing the same
rows with the same ON CONFLICT:

(a) the best plain upsert: batches of 500 to 10,000 rows whose per-recipient columns
    travel as four arrays through ``unnest`` and whose event values are bound once, a
    commit per batch (the batch sizes are tried on up to 100,000 rows; the best is then
    timed on all of them);
(b) one binary COPY of every row into a temporary staging table and one
    ``INSERT … SELECT … ON CONFLICT … DO UPDATE`` from it (PostgreSQL's fastest merge);

both with ``synchronous_commit`` off in their transactions, as the fan-out's. Up to
100,000 watchers the fan-out and the ceilings are measured in three rounds, taking turns,
and the table gives the round whose fan-out / ceiling (c) is the median (``--repeat``):
this machine's pace moves by a third from one minute to the next, and such a fan-out
lasts seconds. Then the naive rate (one upsert and one commit per recipient), the
worker's peak memory per size, and what an edit costs the request with and without
``emit``. Then the same on SQLite
(docs/benchmarks.md#the-fan-out): the fan-out into a SQLite file next to SQLite's own executemany
upsert of the same rows into the same table (the same indexes and pragmas, the table emptied
before each), in five rounds taking turns (``--sqlite-repeat``), the round whose ratio is the
median given: the fan-out timed from its claim to its processed mark, the executemany from its
first batch to its last commit.

PostgreSQL work happens in a schema of its own (``wikinotify_bench``) on a Redis queue of
its own. The schema is kept between runs, so a run that was stopped is restarted at the
cost of the fan-outs only (the million accounts and watches are made once, by COPY);
``--fresh`` drops and recreates it.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import sqlalchemy as sa
from flask import Flask
from psycopg.types.json import Jsonb
from rq import Queue
from rq.registry import FailedJobRegistry, FinishedJobRegistry
from sqlalchemy.engine import make_url

import demo
import wikinotify.emit
from bench import report
from bench import workers as bench_workers
from demo import wiki
from demo.cli import seed
from demo.extensions import notify
from demo.models import Page, Revision, Site, User, db
from wikinotify import queue as wq
from wikinotify.categories import FanoutContext
from wikinotify.dialects import SQLITE_PRAGMAS
from wikinotify.instance_settings import instance_settings
from wikinotify.models import Base as WikiNotifyBase
from wikinotify.models import Event, Notification
from wikinotify.pipeline.audience import batch_size
from wikinotify.pipeline.events import dispatch as dispatch_events
from wikinotify.state import state

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RQ = os.path.join(os.path.dirname(sys.executable), "rq")
DEFAULT_DATABASE_URL = report.DEFAULT_DATABASE_URL
DEFAULT_REDIS_URL = report.DEFAULT_REDIS_URL
#: Where the benchmark works (with the run's suffix: two runs at once never meet).
SCHEMA = report.scoped("wikinotify_bench")
QUEUE = report.scoped("wikinotify-bench")
SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 10_000)
#: ``python -m bench --tiny`` (the smoke test): only that it runs.
TINY_SIZES = (200,)
#: SQLite's sizes: a one-machine wiki's audiences.
SQLITE_SIZES = (1_000, 10_000, 100_000)
QUICK_SQLITE_SIZES = (1_000,)
#: Ceiling (a)'s batch sizes, tried on up to SCAN_ROWS rows each.
CEILING_BATCHES = (500, 1_000, 2_000, 5_000, 10_000)
SCAN_ROWS = 100_000
#: The targets (docs/benchmarks.md#the-fan-out): a share of ceiling (c), the table's own COPY of
#: the same rows, and a million watchers in 20 s with one worker.
TARGET_SHARE = 0.65
TARGET_MILLION_SECONDS = 20.0
#: The editor: a seeded account that watches none of the benchmark's pages.
ACTOR = "bob"
#: High enough that no fan-out here is split into several runs (the maximum allowed).
DISPATCH_BUDGET = 3600
#: "The same peak memory" means within this fraction.
RSS_TOLERANCE = 0.05
#: Edits timed before the measured ones, so connection set-up and caches are not counted.
WARMUP_EDITS = 5
#: Rounds of (fan-out, ceilings) per size; the table gives the median round: this machine's
#: pace moves by a third from one minute to the next, and a fan-out of 100,000 lasts
#: seconds. Above REPEAT_UP_TO watchers, one round (a million takes minutes a round).
REPEAT = 3
REPEAT_UP_TO = 100_000
#: SQLite's rounds per size (up to REPEAT_UP_TO): a 10,000-watcher round lasts a fifth of a
#: second, and its ratio moved by a fifth from one round to the next with the same code.
SQLITE_REPEAT = 5


# -- the database and the app --------------------------------------------------------------


def url_in_schema(base_url: str, schema: str) -> str:
    """``base_url`` with every connection's ``search_path`` set to ``schema``."""
    url = make_url(base_url).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


def libpq_url(sqlalchemy_url: str) -> str:
    """The same URL for psycopg itself (no ``+psycopg`` driver suffix)."""
    url = make_url(sqlalchemy_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


def recreate_schema(base_url: str, schema: str) -> None:
    engine = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    engine.dispose()


def build_app(database_url: str, redis_url: str) -> Flask:
    return demo.create_app(
        {
            "SECRET_KEY": "bench-secret",
            "SQLALCHEMY_DATABASE_URI": database_url,
            "WIKINOTIFY_REDIS_URL": redis_url,
            "WIKINOTIFY_QUEUE": QUEUE,
            "WIKINOTIFY_MAIL_ENABLED": True,
            "WIKINOTIFY_DISPATCH_BUDGET": DISPATCH_BUDGET,
        }
    )


#: The instance's email delay here. Mail is on, so the fan-out decides and writes the email
#: columns as in production, but none is due while the benchmark runs: the dispatch job
#: kicks a send_mail job when mail is due, and it would join the worker's burst.
EMAIL_DELAY_SECONDS = 24 * 3600


def create_tables_and_seed(app: Flask) -> None:
    with app.app_context():
        db.create_all()
        WikiNotifyBase.metadata.create_all(db.engine)
        seed()
        instance_settings(db.session).email_delay_seconds = EMAIL_DELAY_SECONDS
        db.session.commit()


@dataclass
class Target:
    """What a worker run needs: the app (on PostgreSQL or on SQLite) and its Redis."""

    app: Flask
    redis_url: str

    @property
    def queue(self) -> Queue:
        return Queue(QUEUE, connection=wq.connection(self.app))


@dataclass
class Bench(Target):
    """What every step shares: a psycopg connection and the accounts made so far."""

    pg: psycopg.Connection
    accounts: list[int] = field(default_factory=list)


def fresh_bench(database_url: str, redis_url: str, schema: str, config: dict[str, Any]) -> Bench:
    """``schema`` made afresh, the demo wiki's app on it (its tables made, seeded) with
    ``config`` beside its database and Redis, and a psycopg connection into the schema."""
    base = database_url
    if base.startswith(("postgresql://", "postgres://")):
        base = "postgresql+psycopg://" + base.split("://", 1)[1]
    recreate_schema(base, schema)
    url = url_in_schema(base, schema)
    app = demo.create_app({"SECRET_KEY": "bench-secret", "SQLALCHEMY_DATABASE_URI": url,
                           "WIKINOTIFY_REDIS_URL": redis_url, **config})
    create_tables_and_seed(app)
    return Bench(app=app, pg=psycopg.connect(libpq_url(url)), redis_url=redis_url)


# -- accounts, pages and watches (bulk, with COPY) ------------------------------------------


def ensure_accounts(bench: Bench, count: int) -> None:
    """Top the benchmark's verified accounts in Everyone up to ``count``."""
    if not bench.accounts:  # a kept schema: its accounts are reused
        rows = bench.pg.execute(
            "SELECT id FROM demo_users WHERE username ~ '^w[0-9]+$' ORDER BY id").fetchall()
        bench.pg.commit()
        bench.accounts.extend(row[0] for row in rows)
    missing = count - len(bench.accounts)
    if missing <= 0:
        return
    with bench.pg.cursor() as cur:
        first = cur.execute("SELECT coalesce(max(id), 0) + 1 FROM demo_users").fetchone()[0]
        everyone = cur.execute("SELECT id FROM demo_groups WHERE name = 'Everyone'").fetchone()[0]
        ids = range(first, first + missing)
        users = "COPY demo_users (id, username, email, display_name, password_hash, verified, "
        users += "active, is_system, is_admin) FROM STDIN"
        with cur.copy(users) as copy:
            for i in ids:
                copy.write_row((i, f"w{i}", f"w{i}@example.com", f"Watcher {i}", "!",
                                True, True, False, False))
        with cur.copy("COPY demo_user_groups (user_id, group_id) FROM STDIN") as copy:
            for i in ids:
                copy.write_row((i, everyone))
        # Explicit ids skip the sequence; move it on so the ORM's next account fits.
        cur.execute("SELECT setval(pg_get_serial_sequence('demo_users', 'id'), %s)", (ids[-1],))
    bench.pg.commit()
    bench.accounts.extend(ids)


def add_page(bench: Bench, path: str, watchers: Sequence[int]) -> None:
    """A page and its watchers; kept as it is if a kept schema has it with as many."""
    found = bench.pg.execute(
        "SELECT p.id, (SELECT count(*) FROM demo_watches w WHERE w.page_id = p.id) "
        "FROM demo_pages p WHERE p.path = %s", (path,)).fetchone()
    bench.pg.commit()
    if found is not None and found[1] == len(watchers):
        return
    if found is not None:
        sys.exit(f"page {path} has {found[1]:,} watchers, not {len(watchers):,}: use --fresh")
    page_id, site_id = new_page(bench, path)
    with bench.pg.cursor() as cur:
        with cur.copy("COPY demo_watches (page_id, user_id, site_id) FROM STDIN") as copy:
            for user_id in watchers:
                copy.write_row((page_id, user_id, site_id))
    bench.pg.commit()
    analyze(bench)


def new_page(target: Target, path: str) -> tuple[int, int]:
    """A page of the default site written directly (no emit: creating it is no one's
    action); its id and its site's."""
    with target.app.app_context():
        site = db.session.scalar(sa.select(Site).where(Site.is_default.is_(True)))
        page = Page(site_id=site.id, path=path, title=path, content="v0", tags=[])
        page.revisions.append(Revision(title=path, content="v0"))
        db.session.add(page)
        db.session.commit()
        return page.id, site.id


def analyze(bench: Bench) -> None:
    """What autovacuum gives a live wiki after a bulk load: fresh planner statistics
    (without them PostgreSQL may plan the 5,000-id lookups as if the tables were empty)
    and a visibility map, without which the host's index-only lookups (an account's
    groups, a page's watchers) read every row's page as well."""
    bench.pg.autocommit = True
    try:
        tables = [row[0] for row in bench.pg.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
        if tables:  # the benchmark's schema only, not every database's table
            bench.pg.execute(f"VACUUM (ANALYZE) {', '.join(tables)}")
    finally:
        bench.pg.autocommit = False


def page_path(size: int) -> str:
    return f"bench/fanout-{size}"


# -- the outbox, the queue and the worker ---------------------------------------------------


def reset_outbox(bench: Bench) -> None:
    """No entries, no events, no queued job and no kick held: each run starts alike."""
    bench.pg.execute("TRUNCATE wikinotify_notifications")
    bench.pg.execute("DELETE FROM wikinotify_events")
    bench.pg.commit()
    clear_queue(bench)


def clear_queue(target: Target) -> None:
    """No queued job and no kick held."""
    target.queue.empty()
    wq.connection(target.app).delete(wq.kick_key(target.app, "dispatch"))


def truncate_entries(bench: Bench) -> None:
    bench.pg.execute("TRUNCATE wikinotify_notifications")
    bench.pg.commit()


def edit(bench: Bench, path: str, content: str) -> None:
    """One edit through the wiki's own code, which emits and (after commit) kicks."""
    with bench.app.app_context():
        site = db.session.scalar(sa.select(Site).where(Site.is_default.is_(True)))
        actor = db.session.scalar(sa.select(User).where(User.username == ACTOR))
        wiki.save_page(site, actor, path, path, content)


def worker_env(app: Flask) -> dict[str, str]:
    """The settings a deployment's worker gets: FLASK_* variables (see tests/conftest.py)."""
    env = dict(os.environ)
    for key in ("SECRET_KEY", "SQLALCHEMY_DATABASE_URI", "WIKINOTIFY_REDIS_URL",
                "WIKINOTIFY_QUEUE", "WIKINOTIFY_MAIL_ENABLED", "WIKINOTIFY_DISPATCH_BUDGET"):
        value = app.config[key]
        env[f"FLASK_{key}"] = value if isinstance(value, str) else json.dumps(value)
    env.pop("FLASK_APP", None)  # the worker finds wsgi.py in the working directory
    return env


# Peak memory: RQ's default Worker forks a work horse per job, and the horse is what builds
# the app and runs the fan-out. This wrapper's only child is `rq worker`; once it has been
# waited for, RUSAGE_CHILDREN's ru_maxrss is the largest peak RSS of any process in that
# tree (Linux keeps the maximum, not the sum), i.e. max(worker parent, horse). The horse is
# forked from the parent and then imports and builds the app, so the figure is the horse's.
# A wrapper per run, because the benchmark's own RUSAGE_CHILDREN only ever grows.
_RSS_WRAPPER = """
import resource, signal, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
code = child.wait()
with open(sys.argv[1], "w") as out:
    out.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""
#: The workers' class, as docs/operating.md runs them: RQ's forking worker with the app
#: built once, before the first fork, so a range's job does not build it again.
WORKER_CLASS = "wikinotify.jobs.appctx.Worker"
#: How often, with several workers, the benchmark looks whether the event is done.
POLL_SECONDS = 0.2


@dataclass
class WorkerRun:
    wall: float  # the worker processes, start to exit
    job_seconds: float  # RQ's started_at → ended_at of their jobs (the app build included)
    jobs: list[str]  # the functions of the jobs they ran
    peak_rss_kb: int  # the largest of any one worker
    processes: int = 1  # how many worker processes ran


def run_worker(bench: Target, workers: int = 1, done: Callable[[], bool] | None = None,
               watch: Callable[[], None] | None = None) -> WorkerRun:
    """One ``rq worker --burst`` on the benchmark's queue, until the queue is empty; or
    ``workers`` of them, not in burst mode (one that started on an empty queue would leave
    before the split event's ranges are queued), stopped once ``done()`` says so.
    ``watch()`` is called every :data:`POLL_SECONDS` meanwhile."""
    finished = FinishedJobRegistry(queue=bench.queue)
    before = set(finished.get_job_ids())
    burst = ["--burst"] if workers == 1 else []
    with tempfile.TemporaryDirectory(prefix="wikinotify-bench-rss-") as directory:
        files = [os.path.join(directory, f"worker{n}") for n in range(workers)]
        start = time.perf_counter()
        running = [bench_workers.start(
            [sys.executable, "-c", _RSS_WRAPPER, name, RQ, "worker", "-w", WORKER_CLASS,
             *burst, "--url", bench.redis_url, QUEUE],
            cwd=ROOT, env=worker_env(bench.app), stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE) for name in files]
        assert workers == 1 or done is not None, "several workers run until done() says so"
        while all(w.poll() is None for w in running) and not (done and workers > 1 and done()):
            if watch:
                watch()
            time.sleep(POLL_SECONDS)
        # A burst worker has ended by itself; several are asked for a warm shutdown
        # (the wrapper forwards it to its rq worker).
        errors = [error for _, error in bench_workers.stop(running)]
        wall = time.perf_counter() - start
        peaks = []
        for name in files:
            with open(name) as rss:
                peaks.append(int(rss.read() or 0))
    for worker, error in zip(running, errors, strict=True):
        if worker.returncode != 0:
            sys.exit(f"rq worker failed:\n{error[-4000:]}")
    fail_on_failed_jobs(bench)
    jobs = [bench.queue.fetch_job(i) for i in set(finished.get_job_ids()) - before]
    jobs = [job for job in jobs if job is not None]
    seconds = sum((job.ended_at - job.started_at).total_seconds() for job in jobs)
    names = sorted(job.func_name.rsplit(".", 1)[-1] for job in jobs)
    return WorkerRun(wall=wall, job_seconds=seconds, jobs=names, peak_rss_kb=max(peaks),
                     processes=workers)


def fail_on_failed_jobs(bench: Target) -> None:
    failed = FailedJobRegistry(queue=bench.queue)
    for job_id in failed.get_job_ids():
        job = bench.queue.fetch_job(job_id)
        sys.exit(f"job {job.func_name} failed in the worker:\n{job.latest_result().exc_string}")


# -- the fan-out ---------------------------------------------------------------------------


@dataclass
class FanoutResult:
    size: int
    seconds: float  # the event's claimed_at → processed_at
    worker: WorkerRun

    @property
    def rate(self) -> float:
        return self.size / self.seconds


def measure_fanout(bench: Bench, size: int, workers: int = 1) -> FanoutResult:
    reset_outbox(bench)
    # Timed, so that a kept schema's page (whose text an earlier run set) changes again.
    edit(bench, page_path(size), f"An edit for {size} watchers at {time.time()}")
    if bench.queue.count != 1:
        sys.exit(f"expected the edit to enqueue one dispatch job, found {bench.queue.count}")
    claims: list[datetime] = []

    def watch() -> None:
        # A split event's claim is released once its ranges are written: its first one
        # is the start of the fan-out.
        if not claims:
            claims.extend(row[0] for row in bench.pg.execute(
                "SELECT claimed_at FROM wikinotify_events WHERE claimed_at IS NOT NULL"))
            bench.pg.commit()

    worker = run_worker(bench, workers, done=lambda: event_done(bench), watch=watch)
    check_jobs(worker)
    seconds = check_fanout(bench, size, claims[0] if claims else None)
    return FanoutResult(size=size, seconds=seconds, worker=worker)


def check_jobs(worker: WorkerRun) -> None:
    """Dispatch jobs, and the range jobs of the event if it was split
    (docs/benchmarks.md#the-fan-out): what they wrote is checked by :func:`check_fanout`."""
    if "dispatch" not in worker.jobs or set(worker.jobs) - {wq.Job.DISPATCH, wq.Job.FANOUT_RANGE}:
        sys.exit(f"expected dispatch and range jobs only, the workers ran {worker.jobs}")


def event_done(bench: Bench) -> bool:
    done = bench.pg.execute(
        "SELECT count(*) FROM wikinotify_events WHERE processed_at IS NOT NULL").fetchone()[0]
    bench.pg.commit()
    return bool(done)


def check_fanout(bench: Bench, size: int, claimed: datetime | None = None) -> float:
    """That one event reached exactly ``size`` people; how long it took, from the claim of
    its dispatch run to the commit that marked it processed (by the last of its ranges)."""
    row = bench.pg.execute(
        "SELECT id, claimed_at, processed_at, cursor FROM wikinotify_events"
    ).fetchall()
    if len(row) != 1 or row[0][2] is None or row[0][3] is not None:
        sys.exit(f"expected one finished event with no cursor, found {row}")
    event_id, claimed_at, processed_at, _ = row[0]
    written = bench.pg.execute(
        "SELECT count(*) FROM wikinotify_notifications WHERE last_event_id = %s", (event_id,)
    ).fetchone()[0]
    bench.pg.commit()
    if written != size:
        sys.exit(f"the fan-out wrote {written} entries for {size} watchers")
    start = claimed_at or claimed
    if start is None:
        sys.exit("the event's claim was never seen")
    return (processed_at - start).total_seconds()


# -- the ceilings -------------------------------------------------------------------------

#: The columns the fan-out writes (pipeline.rows.entry_rows), with their PostgreSQL types.
COLUMNS = (
    ("user_id", "text"), ("site_id", "text"), ("category", "text"), ("variant", "text"),
    ("variants", "text"), ("group_key", "text"), ("page_id", "text"), ("comment_id", "text"),
    ("actor_id", "text"), ("data", "jsonb"), ("count", "int"), ("last_event_id", "bigint"),
    ("in_app", "boolean"), ("email_state", "text"), ("email_after", "timestamptz"),
    ("email_attempts", "int"), ("created_at", "timestamptz"), ("updated_at", "timestamptz"),
)
_NAMES = ", ".join(name for name, _ in COLUMNS)
_DECIDED = "n.email_state IN ('pending', 'sending', 'sent', 'failed')"
# The same conflict target, SET and WHERE as pipeline.upsert.upsert's
# (docs/rules.md#coalescing-is-idempotency), so both references do the work the fan-out's statement
# does; `%%` is a literal % for psycopg.
_ON_CONFLICT = f"""
ON CONFLICT (user_id, group_key) WHERE read_at IS NULL DO UPDATE SET
    count = n.count + 1,
    variant = excluded.variant,
    variants = CASE WHEN n.variants LIKE '%%,' || excluded.variant || ',%%' THEN n.variants
                    ELSE n.variants || excluded.variant || ',' END,
    data = excluded.data, actor_id = excluded.actor_id, comment_id = excluded.comment_id,
    last_event_id = excluded.last_event_id, in_app = excluded.in_app,
    updated_at = excluded.updated_at,
    email_state = CASE WHEN {_DECIDED} THEN n.email_state ELSE excluded.email_state END,
    email_after = CASE WHEN {_DECIDED} THEN n.email_after ELSE excluded.email_after END
WHERE n.last_event_id <> excluded.last_event_id
"""
ROW_UPSERT = (
    f"INSERT INTO wikinotify_notifications AS n ({_NAMES}) VALUES ("
    + ", ".join(f"%s::{kind}" for _, kind in COLUMNS)
    + ")"
    + _ON_CONFLICT
)


def template_row(bench: Bench) -> dict[str, Any]:
    """One entry the fan-out wrote: the references write the same values but the user."""
    row = bench.pg.execute(f"SELECT {_NAMES} FROM wikinotify_notifications LIMIT 1").fetchone()
    bench.pg.commit()
    values = dict(zip((name for name, _ in COLUMNS), row, strict=True))
    values["data"] = Jsonb(values["data"])
    return values


def naive_rate(bench: Bench, template: dict[str, Any], user_ids: Sequence[int]) -> float:
    """Rows/s of one upsert and one commit per recipient (psycopg prepares the statement
    after a few runs, so this is the naive way at its best)."""
    truncate_entries(bench)
    start = time.perf_counter()
    with bench.pg.cursor() as cur:
        for user_id in user_ids:
            values = [str(user_id) if name == "user_id" else template[name] for name, _ in COLUMNS]
            cur.execute(ROW_UPSERT, values)
            bench.pg.commit()
    seconds = time.perf_counter() - start
    truncate_entries(bench)
    return len(user_ids) / seconds


#: The columns that differ from one recipient to the next (pipeline.upsert.PER_RECIPIENT); the
#: rest are the event's, bound once per statement as the fan-out binds them.
PER_RECIPIENT = ("user_id", "in_app", "email_state", "email_after")
_SHARED = tuple((name, kind) for name, kind in COLUMNS if name not in PER_RECIPIENT)
_KINDS = dict(COLUMNS)
_ORDER = ", ".join([*(name for name, _ in _SHARED), *PER_RECIPIENT])
_SHARED_VALUES = ", ".join(f"%s::{kind}" for _, kind in _SHARED)
BOUND_ONCE_UPSERT = (
    f"INSERT INTO wikinotify_notifications AS n ({_ORDER}) SELECT {_SHARED_VALUES}, p.* "
    "FROM unnest(" + ", ".join(f"%s::{_KINDS[name]}[]" for name in PER_RECIPIENT) + ") AS p"
    + _ON_CONFLICT
)
STAGE = "wikinotify_bench_stage"
CREATE_STAGE = (
    f"CREATE TEMP TABLE {STAGE} ("
    + ", ".join(f"{name} {_KINDS[name]}" for name in PER_RECIPIENT) + ") ON COMMIT DROP"
)
COPY_STAGE = f"COPY {STAGE} ({', '.join(PER_RECIPIENT)}) FROM STDIN (FORMAT BINARY)"
MERGE_STAGE = (
    f"INSERT INTO wikinotify_notifications AS n ({_ORDER}) SELECT {_SHARED_VALUES}, s.* "
    f"FROM {STAGE} AS s" + _ON_CONFLICT
)


#: What the fan-out sets in each of its write transactions (pipeline.upsert.upsert), so the
#: ceilings are measured under the same transaction settings.
ASYNC_COMMIT = "SET LOCAL synchronous_commit = off"


def bound_once_rate(bench: Bench, template: dict[str, Any], user_ids: Sequence[int],
                    batch: int) -> float:
    """Ceiling (a): rows/s of upserts of ``batch`` rows whose per-recipient columns travel
    as four arrays through unnest and whose event values are bound once, a commit each."""
    truncate_entries(bench)
    shared = [template[name] for name, _ in _SHARED]
    start = time.perf_counter()
    with bench.pg.cursor() as cur:
        for first in range(0, len(user_ids), batch):
            users = [str(u) for u in user_ids[first : first + batch]]
            arrays = [users, *([template[name]] * len(users) for name in PER_RECIPIENT[1:])]
            cur.execute(ASYNC_COMMIT)
            cur.execute(BOUND_ONCE_UPSERT, [*shared, *arrays])
            bench.pg.commit()
    seconds = time.perf_counter() - start
    truncate_entries(bench)
    return len(user_ids) / seconds


def copy_merge_rate(bench: Bench, template: dict[str, Any], user_ids: Sequence[int]) -> float:
    """Ceiling (b): rows/s of one binary COPY of every row's per-recipient columns into a
    temporary staging table and one INSERT … SELECT … ON CONFLICT DO UPDATE from it."""
    truncate_entries(bench)
    shared = [template[name] for name, _ in _SHARED]
    start = time.perf_counter()
    with bench.pg.cursor() as cur:
        cur.execute(ASYNC_COMMIT)
        cur.execute(CREATE_STAGE)
        with cur.copy(COPY_STAGE) as copy:
            copy.set_types([_KINDS[name] for name in PER_RECIPIENT])
            rest = tuple(template[name] for name in PER_RECIPIENT[1:])
            for user_id in user_ids:
                copy.write_row((str(user_id), *rest))
        cur.execute(MERGE_STAGE, shared)
        bench.pg.commit()
    seconds = time.perf_counter() - start
    truncate_entries(bench)
    return len(user_ids) / seconds


# -- the table's own ceilings: the rows the fan-out wrote, written again -------------------

#: An empty copy of the entries table, with every index, constraint and default of it.
COPY_TABLE = "wikinotify_bench_table_ceiling"
CREATE_COPY_TABLE = (f"CREATE TABLE {COPY_TABLE} (LIKE wikinotify_notifications INCLUDING ALL)")
DROP_COPY_TABLE = f"DROP TABLE IF EXISTS {COPY_TABLE}"
#: The rows as the fan-out left them, every column (the ids included: no sequence is used).
_ALL_COLUMNS = (
    "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute "
    "WHERE attrelid = 'wikinotify_notifications'::regclass AND attnum > 0 AND NOT attisdropped"
)


@dataclass
class TableCeilings:
    """What the entries table itself takes, on exactly the rows the fan-out wrote: (c) a
    binary COPY of them into an empty copy of the table, with all its indexes, and (d) a
    server-side merge of them into such a copy (INSERT … SELECT … ON CONFLICT DO NOTHING)."""

    copy: float
    merge: float


def export_rows(bench: Bench, directory: str) -> tuple[str, str, int]:
    """The fan-out's rows as binary COPY data in a file: its path, the columns, how many."""
    columns = bench.pg.execute(_ALL_COLUMNS).fetchone()[0]
    path = os.path.join(directory, "rows.copy")
    count = 0
    with bench.pg.cursor() as cur, open(path, "wb") as out, cur.copy(
            f"COPY (SELECT {columns} FROM wikinotify_notifications) TO STDOUT "
            "(FORMAT BINARY)") as copy:
        for chunk in copy:
            out.write(chunk)
    count = bench.pg.execute("SELECT count(*) FROM wikinotify_notifications").fetchone()[0]
    bench.pg.commit()
    return path, columns, count


def _fresh_copy_table(bench: Bench) -> None:
    bench.pg.execute(DROP_COPY_TABLE)
    bench.pg.execute(CREATE_COPY_TABLE)
    bench.pg.commit()


def table_copy_rate(bench: Bench, path: str, columns: str, count: int) -> float:
    """Ceiling (c): rows/s of one binary COPY of the file into an empty copy of the table,
    in one transaction (its commit included)."""
    _fresh_copy_table(bench)
    start = time.perf_counter()
    with bench.pg.cursor() as cur, open(path, "rb") as rows:
        cur.execute(ASYNC_COMMIT)
        with cur.copy(f"COPY {COPY_TABLE} ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
            while chunk := rows.read(1 << 20):
                copy.write(chunk)
        bench.pg.commit()
    seconds = time.perf_counter() - start
    copied = bench.pg.execute(f"SELECT count(*) FROM {COPY_TABLE}").fetchone()[0]
    bench.pg.execute(DROP_COPY_TABLE)
    bench.pg.commit()
    if copied != count:
        sys.exit(f"ceiling (c) copied {copied} rows, not {count}")
    return count / seconds


def table_merge_rate(bench: Bench, columns: str, count: int) -> float:
    """Ceiling (d): rows/s of one INSERT … SELECT of the fan-out's rows, as they are in its
    table, into an empty copy of it, ON CONFLICT (the coalescing index) DO NOTHING."""
    _fresh_copy_table(bench)
    start = time.perf_counter()
    bench.pg.execute(ASYNC_COMMIT)
    bench.pg.execute(
        f"INSERT INTO {COPY_TABLE} ({columns}) SELECT {columns} FROM wikinotify_notifications "
        "ON CONFLICT (user_id, group_key) WHERE read_at IS NULL DO NOTHING")
    bench.pg.commit()
    seconds = time.perf_counter() - start
    bench.pg.execute(DROP_COPY_TABLE)
    bench.pg.commit()
    return count / seconds


def measure_table_ceilings(bench: Bench, size: int, log: Callable[[str], None]) -> TableCeilings:
    """Ceilings (c) and (d) on the rows the fan-out just wrote (before anything else
    empties its table)."""
    with tempfile.TemporaryDirectory(prefix="wikinotify-bench-rows-") as directory:
        path, columns, count = export_rows(bench, directory)
        log(f"{size:,} watchers: ceiling (c), binary COPY into an empty copy of the table")
        copy = table_copy_rate(bench, path, columns, count)
    log(f"{size:,} watchers: ceiling (d), INSERT … SELECT … ON CONFLICT DO NOTHING into one")
    merge = table_merge_rate(bench, columns, count)
    return TableCeilings(copy=copy, merge=merge)


@dataclass
class Ceilings:
    #: Ceiling (a)'s rate per batch size, each on the first ``scanned`` rows.
    by_batch: dict[int, float]
    scanned: int
    #: The best of them, then timed on all the rows (when there are more than scanned).
    batch: int
    a: float
    b: float
    #: Ceilings (c) and (d): the table's own (see :class:`TableCeilings`).
    table: TableCeilings = field(default_factory=lambda: TableCeilings(0.0, 0.0))

    @property
    def c(self) -> float:
        return self.table.copy

    @property
    def d(self) -> float:
        return self.table.merge


def scan_batches(bench: Bench, template: dict[str, Any], user_ids: Sequence[int],
                 batches: Sequence[int], log: Callable[[str], None]) -> dict[int, float]:
    """Ceiling (a)'s rate for each batch size, on up to :data:`SCAN_ROWS` rows: which size
    the rounds then time. Nothing to try with one size."""
    if len(batches) == 1:
        return {batches[0]: 0.0}
    by_batch = {}
    for batch in batches:
        log(f"{len(user_ids):,} watchers: ceiling (a), trying {batch:,}-row batches")
        by_batch[batch] = bound_once_rate(bench, template, user_ids[:SCAN_ROWS], batch)
    return by_batch


def measure_ceilings(bench: Bench, template: dict[str, Any], user_ids: Sequence[int],
                     by_batch: dict[int, float], log: Callable[[str], None]) -> Ceilings:
    """Both ceilings on every row: (a) at the batch size the scan found best, timed
    afresh (so every round's (a) is one timing, not the best of several)."""
    best = max(by_batch, key=by_batch.__getitem__)
    log(f"{len(user_ids):,} watchers: ceiling (a), {best:,}-row batches, every row")
    a = bound_once_rate(bench, template, user_ids, best)
    log(f"{len(user_ids):,} watchers: ceiling (b), COPY and one merge")
    b = copy_merge_rate(bench, template, user_ids)
    return Ceilings(by_batch=by_batch, scanned=min(len(user_ids), SCAN_ROWS), batch=best,
                    a=a, b=b)


# -- what an edit costs the request ---------------------------------------------------------


@dataclass
class RequestCost:
    watchers: int
    without_ms: list[float] = field(default_factory=list)
    with_ms: list[float] = field(default_factory=list)
    kick_ms: list[float] = field(default_factory=list)
    kicks_enqueued: int = 0
    statements_without: list[str] = field(default_factory=list)
    statements_with: list[str] = field(default_factory=list)


def _no_emit(kind: str, **fields: Any) -> None:
    """``emit`` switched off: the edit as it was before notifications."""


@contextmanager
def emit_disabled() -> Iterator[None]:
    # An instance attribute shadows WikiNotify.emit (a staticmethod) for demo.wiki's calls.
    # Not the site switch: emit reads that with a SELECT, so "off" would still cost one.
    notify.emit = _no_emit
    try:
        yield
    finally:
        del notify.emit


@contextmanager
def timed_kicks(cost: RequestCost) -> Iterator[None]:
    """Time the Redis kick that emit's after-commit hook makes (it is inside the request)."""
    original = wikinotify.emit.kick_dispatch

    def kick(app: Flask, also: Callable[[Any], None] | None = None) -> bool:
        start = time.perf_counter()
        enqueued = original(app, also=also)
        cost.kick_ms.append((time.perf_counter() - start) * 1000)
        cost.kicks_enqueued += bool(enqueued)
        return enqueued

    wikinotify.emit.kick_dispatch = kick
    try:
        yield
    finally:
        wikinotify.emit.kick_dispatch = original


_TABLE = re.compile(r"\b(?:FROM|INTO|UPDATE)\s+\"?(\w+)", re.IGNORECASE)


def describe_statement(sql: str) -> str:
    """``INSERT wikinotify_events``: the verb and the first table of a statement."""
    verb = sql.split(None, 1)[0].upper()
    table = _TABLE.search(sql)
    return f"{verb} {table.group(1) if table else '?'}"


@contextmanager
def recording_statements(engine: sa.Engine, into: list[str]) -> Iterator[None]:
    def record(conn, cursor, statement, parameters, context, executemany) -> None:
        into.append(describe_statement(statement))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def timed_edit(path: str, content: str, statements: list[str]) -> float:
    """One edit as a request makes it (the account and site loaded, the page saved and
    committed, the kick sent), in milliseconds; ``statements`` gets its SQL."""
    statements.clear()
    with recording_statements(db.engine, statements):
        start = time.perf_counter()
        site = db.session.scalar(sa.select(Site).where(Site.is_default.is_(True)))
        actor = db.session.scalar(sa.select(User).where(User.username == ACTOR))
        wiki.save_page(site, actor, path, path, content)
        elapsed = time.perf_counter() - start
    db.session.remove()  # a request's session ends with the request
    return elapsed * 1000


def measure_request(bench: Bench, path: str, watchers: int, rounds: int) -> RequestCost:
    """Edits with and without emit, alternating so drift hits both alike."""
    reset_outbox(bench)
    cost = RequestCost(watchers=watchers)
    with bench.app.app_context():
        for n in range(WARMUP_EDITS + rounds):
            with emit_disabled():
                ms = timed_edit(path, f"without emit {n}", cost.statements_without)
            if n >= WARMUP_EDITS:
                cost.without_ms.append(ms)
            with timed_kicks(cost):
                ms = timed_edit(path, f"with emit {n}", cost.statements_with)
            if n >= WARMUP_EDITS:
                cost.with_ms.append(ms)
    reset_outbox(bench)  # the queued events must never reach a worker
    return cost


# -- profiling (in-process) -----------------------------------------------------------------


def profile_fanout(bench: Bench, size: int, top: int, out: str | None = None) -> None:
    """Run the fan-out of one edit to ``size`` watchers under cProfile in this process,
    with the same code a worker runs (``wikinotify.pipeline.events.dispatch``), and print where the
    time goes."""
    reset_outbox(bench)
    edit(bench, page_path(size), f"An edit to profile for {size} watchers at {time.time()}")
    bench.queue.empty()  # run here, not by a worker
    # One run fans the whole audience out: a split would hand ranges to workers.
    split_at = bench.app.config["WIKINOTIFY_FANOUT_RANGE_SIZE"]
    bench.app.config["WIKINOTIFY_FANOUT_RANGE_SIZE"] = 0
    with bench.app.app_context():
        st = state(bench.app)
        ctx = FanoutContext(host=st.host, session=st.db.session)
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        dispatch_events(ctx, st.registry, mail_on=True, budget=DISPATCH_BUDGET,
                        stale_after=timedelta(hours=1))
        profiler.disable()
        seconds = time.perf_counter() - start
        db.session.remove()
    bench.app.config["WIKINOTIFY_FANOUT_RANGE_SIZE"] = split_at
    check_fanout(bench, size)
    reset_outbox(bench)
    print(f"\nprofile: the fan-out of one edit to {size:,} watchers in this process under "
          f"cProfile: {seconds:.2f} s ({size / seconds:,.0f} rows/s with the profiler's "
          "overhead); cumulative time of each phase:")
    stats = pstats.Stats(profiler)
    if out:
        stats.dump_stats(out)
    for label, where, name in PHASES:
        spent = cumulative(stats, where, name)
        print(f"  {spent:7.2f} s {spent / seconds:4.0%}  {label}")
    print(f"\nthe {top} functions with the most time of their own:")
    stats.strip_dirs().sort_stats("tottime").print_stats(top)


#: (label, file the function is in, function): the phases a fan-out's time splits into.
PHASES = (
    ("the fan-out (events.dispatch)", "wikinotify/pipeline/events.py", "dispatch"),
    ("  the candidates (audience.next_candidates)", "wikinotify/pipeline/audience.py",
     "next_candidates"),
    ("  deciding who is told (audience.decide)", "wikinotify/pipeline/audience.py", "decide"),
    ("    the accounts' facts (host.users)", "demo/host.py", "users"),
    ("    mutes (mutes.muters_among)", "wikinotify/preferences/mutes.py", "muters_among"),
    ("    stored preferences (audience.stored_preferences)", "wikinotify/pipeline/audience.py",
     "stored_preferences"),
    ("  building the rows (rows.entry_rows)", "wikinotify/pipeline/rows.py", "entry_rows"),
    ("  writing them (upsert.upsert)", "wikinotify/pipeline/upsert.py", "upsert"),
    ("    SQLAlchemy: compiling", "sqlalchemy/sql/compiler.py", "visit_insert"),
    ("    psycopg: converting the query's placeholders", "psycopg/_queries.py", "convert"),
    ("    psycopg: dumping arrays", "psycopg/types/array.py", "dump"),
    ("  the commits (Session.commit)", "sqlalchemy/orm/session.py", "commit"),
    ("  telling open pages (live.changed, Redis)", "wikinotify/inbox/live.py", "changed"),
    ("  waiting for PostgreSQL (every statement)", "psycopg/connection.py", "wait"),
)


def cumulative(stats: pstats.Stats, where: str, name: str) -> float:
    """Seconds spent in (and under) the functions ``name`` of files ending in ``where``."""
    return sum(
        entry[3]
        for (filename, _, function), entry in stats.stats.items()  # type: ignore[attr-defined]
        if function == name and filename.replace(os.sep, "/").endswith(where)
    )


# -- SQLite, the embedded default (docs/benchmarks.md#the-fan-out) --------------------------


@dataclass
class Lite(Target):
    """The same steps on a SQLite file: a sqlite3 connection to seed and read it, and its
    accounts."""

    db: sqlite3.Connection
    accounts: list[int] = field(default_factory=list)


def set_up_sqlite(directory: str, redis_url: str) -> Lite:
    path = os.path.join(directory, "fanout.db")
    app = build_app(f"sqlite:///{path}", redis_url)
    create_tables_and_seed(app)
    lite = Lite(app=app, db=sqlite3.connect(path), redis_url=redis_url)
    # SQLite's own upsert (the limit) on the same settings as the app's connections.
    for name, value in SQLITE_PRAGMAS:
        lite.db.execute(f"PRAGMA {name} = {value}")
    reset_sqlite_outbox(lite)
    return lite


def ensure_sqlite_accounts(lite: Lite, count: int) -> None:
    missing = count - len(lite.accounts)
    if missing <= 0:
        return
    first = lite.db.execute("SELECT coalesce(max(id), 0) + 1 FROM demo_users").fetchone()[0]
    everyone = lite.db.execute("SELECT id FROM demo_groups WHERE name = 'Everyone'").fetchone()[0]
    ids = range(first, first + missing)
    lite.db.executemany(
        "INSERT INTO demo_users (id, username, email, display_name, password_hash, verified, "
        "active, is_system, is_admin) VALUES (?, ?, ?, ?, '!', 1, 1, 0, 0)",
        ((i, f"w{i}", f"w{i}@example.com", f"Watcher {i}") for i in ids))
    lite.db.executemany("INSERT INTO demo_user_groups (user_id, group_id) VALUES (?, ?)",
                        ((i, everyone) for i in ids))
    lite.db.commit()
    lite.accounts.extend(ids)


def add_sqlite_page(lite: Lite, path: str, watchers: Sequence[int]) -> None:
    page_id, site_id = new_page(lite, path)
    lite.db.executemany("INSERT INTO demo_watches (page_id, user_id, site_id) VALUES (?, ?, ?)",
                        ((page_id, user_id, site_id) for user_id in watchers))
    lite.db.commit()
    lite.db.execute("ANALYZE")


def reset_sqlite_outbox(lite: Lite) -> None:
    lite.db.execute("DELETE FROM wikinotify_notifications")
    lite.db.execute("DELETE FROM wikinotify_events")
    lite.db.commit()
    clear_queue(lite)


def measure_sqlite_fanout(lite: Lite, size: int) -> FanoutResult:
    reset_sqlite_outbox(lite)
    with lite.app.app_context():
        site = db.session.scalar(sa.select(Site).where(Site.is_default.is_(True)))
        actor = db.session.scalar(sa.select(User).where(User.username == ACTOR))
        wiki.save_page(site, actor, page_path(size), page_path(size),
                       f"An edit for {size} at {time.time()}")
    claims: list[str] = []

    def watch() -> None:  # as measure_fanout's: a split event's claim is released
        if not claims:
            claims.extend(row[0] for row in lite.db.execute(
                "SELECT claimed_at FROM wikinotify_events WHERE claimed_at IS NOT NULL"))

    worker = run_worker(lite, watch=watch)
    check_jobs(worker)
    with lite.app.app_context():
        events = db.session.scalars(sa.select(Event)).all()
        if len(events) != 1 or events[0].processed_at is None or events[0].cursor is not None:
            sys.exit(f"SQLite: expected one finished event with no cursor, found {events}")
        event = events[0]
        written = db.session.scalar(sa.select(sa.func.count()).select_from(Notification).where(
            Notification.last_event_id == event.id))
        # SQLite keeps naive UTC text; the model gives it its zone back.
        claimed = event.claimed_at or (
            datetime.fromisoformat(claims[0]).replace(tzinfo=UTC) if claims else None)
        if claimed is None:
            sys.exit("SQLite: the event's claim was never seen")
        seconds = (event.processed_at - claimed).total_seconds()
        db.session.remove()
    if written != size:
        sys.exit(f"SQLite: the fan-out wrote {written} entries for {size} watchers")
    return FanoutResult(size=size, seconds=seconds, worker=worker)


def _sqlite_upsert() -> str:
    """ROW_UPSERT in SQLite's words (no casts; ``?`` placeholders; the JSON as text)."""
    on_conflict = _ON_CONFLICT.replace("%%", "%").replace("AS n", "")
    names = [name for name, _ in COLUMNS]
    return (f"INSERT INTO wikinotify_notifications AS n ({_NAMES}) VALUES ("
            + ", ".join("?" for _ in names) + ")" + on_conflict)


def sqlite_raw_rate(lite: Lite, user_ids: Sequence[int], batch: int) -> float:
    """SQLite's own upsert: the fan-out's rows and ON CONFLICT by one executemany of
    ``batch`` rows with a commit each, on the same file."""
    row = lite.db.execute(
        f"SELECT {_NAMES} FROM wikinotify_notifications LIMIT 1").fetchone()
    lite.db.execute("DELETE FROM wikinotify_notifications")
    lite.db.commit()
    statement = _sqlite_upsert()
    template = dict(zip((name for name, _ in COLUMNS), row, strict=True))
    start = time.perf_counter()
    for first in range(0, len(user_ids), batch):
        rows = [tuple(str(u) if name == "user_id" else template[name] for name, _ in COLUMNS)
                for u in user_ids[first : first + batch]]
        lite.db.executemany(statement, rows)
        lite.db.commit()
    seconds = time.perf_counter() - start
    lite.db.executemany(statement, [tuple(template[name] for name, _ in COLUMNS)])
    lite.db.commit()  # leave one row for the next template
    return len(user_ids) / seconds


@dataclass
class SqliteResult:
    fanout: FanoutResult
    by_batch: dict[int, float]
    raw: float
    #: Every round's (fan-out rows/s, raw rows/s), when there were several.
    rounds: list[tuple[float, float]] = field(default_factory=list)


def measure_sqlite(lite: Lite, size: int, batches: Sequence[int],
                   log: Callable[[str], None], repeat: int = 1) -> SqliteResult:
    """The fan-out and SQLite's own upsert at ``size``: the best batch size found on the
    first rows (after the first fan-out, whose row the raw upsert copies), then
    ``repeat`` rounds of the two taking turns (up to :data:`REPEAT_UP_TO` watchers), the
    round whose ratio is the median given, as for PostgreSQL: a fan-out of a second
    swings with the machine's other load."""
    ensure_sqlite_accounts(lite, size)
    add_sqlite_page(lite, page_path(size), lite.accounts[:size])
    rounds: list[tuple[FanoutResult, float]] = []
    by_batch: dict[int, float] = {}
    best = 0
    for number in range(repeat if size <= REPEAT_UP_TO else 1):
        log(f"SQLite, {size:,} watchers: fan-out through a worker, round {number + 1}")
        result = measure_sqlite_fanout(lite, size)
        if not by_batch:
            for batch in batches:
                log(f"SQLite, {size:,} watchers: raw executemany upsert, {batch:,}-row batches")
                by_batch[batch] = sqlite_raw_rate(lite, lite.accounts[: min(size, SCAN_ROWS)],
                                                  batch)
            best = max(by_batch, key=by_batch.__getitem__)
        log(f"SQLite, {size:,} watchers: raw executemany upsert, round {number + 1}")
        rounds.append((result, sqlite_raw_rate(lite, lite.accounts[:size], best)))
    reset_sqlite_outbox(lite)
    ordered = sorted(rounds, key=lambda pair: pair[0].rate / pair[1])
    result, raw = ordered[(len(ordered) - 1) // 2]
    return SqliteResult(fanout=result, by_batch=by_batch, raw=raw,
                        rounds=[(f.rate, r) for f, r in rounds] if len(rounds) > 1 else [])


# -- output --------------------------------------------------------------------------------


@dataclass
class SizeResult:
    """One size's figures, all from one round: the round whose fan-out / ceiling (c) is
    the median of the rounds' (each round's ratio is measured in the same minutes, so
    the machine's changing pace cancels in it), with the largest peak memory of any
    round; and every round's rates."""

    fanout: FanoutResult
    ceilings: Ceilings
    naive: float
    naive_rows: int
    #: Each round's (fan-out rate, ceilings (a) to (d)), in the order measured.
    rounds: list[tuple[float, float, float, float, float]] = field(default_factory=list)

    @classmethod
    def of(cls, runs: Sequence[tuple[FanoutResult, Ceilings]], naive: float,
           naive_rows: int) -> SizeResult:
        by_ratio = sorted(runs, key=lambda run: run[0].rate / run[1].c)
        fanout, ceilings = by_ratio[(len(by_ratio) - 1) // 2]
        peak = max(f.worker.peak_rss_kb for f, _ in runs)
        return cls(fanout=replace(fanout, worker=replace(fanout.worker, peak_rss_kb=peak)),
                   ceilings=ceilings, naive=naive, naive_rows=naive_rows,
                   rounds=[(f.rate, c.a, c.b, c.c, c.d) for f, c in runs])


def mb(kb: int) -> float:
    return kb / 1024


def print_header(bench: Bench, workers: int) -> None:
    version = bench.pg.execute("SHOW server_version").fetchone()[0]
    sync = bench.pg.execute("SHOW synchronous_commit").fetchone()[0]
    bench.pg.commit()
    print(f"wikinotify fan-out benchmark: PostgreSQL {version} (synchronous_commit={sync}; "
          f"off in the fan-out's and the ceilings' write transactions), {os.cpu_count()} CPUs, "
          f"Python {sys.version.split()[0]}, schema {SCHEMA}, queue {QUEUE}")
    how = "one `rq worker --burst`" if workers == 1 else f"{workers} `rq worker`s"
    print(f"one edit (demo.wiki.save_page) fanned out by {how} (-w {WORKER_CLASS}; "
          f"{batch_size(True):,} candidates in the first batch, {batch_size(False):,} in "
          "each after it; an audience over "
          f"{bench.app.config['WIKINOTIFY_FANOUT_RANGE_SIZE']:,} split into ranges when more "
          "than one worker listens); rates in rows/s\n")


def print_table(results: Sequence[SizeResult], baseline: WorkerRun) -> None:
    head = (f"{'watchers':>9} | {'fan-out s':>9} | {'fan-out':>8} | {'(c) COPY':>8} | "
            f"{'fan/c':>5} | {'(d) merge':>9} | {'fan/d':>5} | {'ceiling (a)':>17} | "
            f"{'fan/a':>5} | {'ceiling (b)':>11} | {'fan/b':>5} | {'naive':>7} | "
            f"{'worker peak RSS':>15}")
    print(head)
    print("-" * len(head))
    print(f"{'0':>9} | {'':>9} | {'':>8} | {'':>8} | {'':>5} | {'':>9} | {'':>5} | {'':>17} | "
          f"{'':>5} | {'':>11} | {'':>5} | {'':>7} | "
          f"{mb(baseline.peak_rss_kb):>12.1f} MB  (empty outbox: the worker's baseline)")
    for r in results:
        f, c = r.fanout, r.ceilings
        star = "*" if r.naive_rows < f.size else " "
        print(f"{f.size:>9,} | {f.seconds:>9.2f} | {f.rate:>8,.0f} | {c.c:>8,.0f} | "
              f"{f.rate / c.c:>5.0%} | {c.d:>9,.0f} | {f.rate / c.d:>5.0%} | "
              f"{c.a:>8,.0f} ({c.batch:>6,}) | {f.rate / c.a:>5.0%} | {c.b:>11,.0f} | "
              f"{f.rate / c.b:>5.0%} | {r.naive:>6,.0f}{star} | "
              f"{mb(f.worker.peak_rss_kb):>12.1f} MB")
    for r in results:
        if r.naive_rows < r.fanout.size:
            print(f"  * naive measured on the first {r.naive_rows:,} of {r.fanout.size:,} rows "
                  "(--naive-cap) and taken as the rate for all of them")
    for r in results:
        if len(r.rounds) > 1:
            each = "; ".join(f"{fan:,.0f}: {fan / c:.0%} of (c), {fan / a:.0%} of (a)"
                             for fan, a, _, c, _ in r.rounds)
            print(f"  {r.fanout.size:>9,}: {len(r.rounds)} rounds, the row above is the one "
                  f"whose fan/c is their median (peak RSS: the largest of any);\n"
                  f"  {'':>9}  each round's fan-out: {each}")
    print("ceiling (c): the rows the fan-out wrote, every column, one binary COPY into an empty "
          "copy of the table (LIKE … INCLUDING ALL: every index), one commit\n"
          "ceiling (d): the same rows, one INSERT … SELECT from the fan-out's table into such a "
          "copy, ON CONFLICT (the coalescing index) DO NOTHING")
    print("ceiling (a): the best plain upsert, per-recipient columns as four arrays through "
          "unnest, the event's values bound once,\n  a commit per batch (batch size in "
          "brackets); by batch size, on the first rows:")
    for r in results:
        c = r.ceilings
        tried = ", ".join(f"{b:,}: {rate:,.0f}" for b, rate in c.by_batch.items() if rate)
        print(f"  {r.fanout.size:>9,} ({c.scanned:,} rows, once, in the first round) "
              f"{tried or 'one size given'}")
    print("ceiling (b): one binary COPY of all the rows into a temporary staging table and one "
          "INSERT … SELECT … ON CONFLICT DO UPDATE\nnaive: the same upsert one row and one "
          "commit at a time (synchronous_commit as the server has it)")
    print("\nfan-out s: the event's claimed_at → processed_at (claim commit to the last batch, "
          "as stamped by the worker);\n  not counted there, but part of each worker process:")
    for r in results:
        w = r.fanout.worker
        print(f"  {r.fanout.size:>9,}: worker process {w.wall:6.2f} s wall (start-up, app "
              f"build, fan-out, exit); job {', '.join(w.jobs)} {w.job_seconds:6.2f} s in RQ")


def print_sqlite(results: Sequence[SqliteResult]) -> None:
    pragmas = ", ".join(f"{name}={value}" for name, value in SQLITE_PRAGMAS)
    print(f"\nSQLite {sqlite3.sqlite_version} (a file; the app's connections and the raw one: "
          f"{pragmas}): the same "
          "edit fanned out by one worker, next to SQLite's own upsert (executemany of the "
          "same rows, a commit per batch, best batch size)")
    head = (f"{'watchers':>9} | {'fan-out s':>9} | {'fan-out':>8} | {'raw upsert':>10} | "
            f"{'fan/raw':>7} | {'worker peak RSS':>15}")
    print(head)
    print("-" * len(head))
    for r in results:
        f = r.fanout
        print(f"{f.size:>9,} | {f.seconds:>9.2f} | {f.rate:>8,.0f} | {r.raw:>10,.0f} | "
              f"{f.rate / r.raw:>7.0%} | {mb(f.worker.peak_rss_kb):>12.1f} MB")
    for r in results:
        if r.rounds:
            each = "; ".join(f"{fan:,.0f} vs {raw:,.0f}: {fan / raw:.0%}" for fan, raw in r.rounds)
            print(f"  {r.fanout.size:,}: {len(r.rounds)} rounds, the row above is the median "
                  f"fan/raw; each round's fan-out vs raw: {each}")


def print_request_costs(costs: Sequence[RequestCost]) -> None:
    print("\nrequest cost of one edit (the account and site loaded, save_page, commit; with "
          "emit the Redis kick after commit is included), median of "
          f"{len(costs[0].with_ms)} alternating edits each:")
    for c in costs:
        without, with_ = statistics.median(c.without_ms), statistics.median(c.with_ms)
        print(f"  {c.watchers:>7,} watchers: {without:6.2f} ms without emit, {with_:6.2f} ms "
              f"with emit ({with_ - without:+.2f} ms, {with_ / without - 1:+.0%})")
        print(f"  {'':>16}  statements: {len(c.statements_without)} without emit, "
              f"{len(c.statements_with)} with ({statement_diff(c)})")
        print(f"  {'':>16}  Redis kick: median {statistics.median(c.kick_ms):.2f} ms (SET NX "
              f"held {wq.KICK_HOLD_MS / 1000:g} s; {c.kicks_enqueued} of {len(c.kick_ms)} kicks "
              "also enqueued a dispatch job)")


def statement_diff(cost: RequestCost) -> str:
    extra = Counter(cost.statements_with)
    extra.subtract(Counter(cost.statements_without))
    parts = [f"{n:+d} {name}" for name, n in sorted(extra.items()) if n]
    return ", ".join(parts) or "no difference"


def print_targets(results: Sequence[SizeResult], costs: Sequence[RequestCost]) -> None:
    print("\ntargets:")
    for r in results:
        if r.fanout.size < 100_000:
            continue
        share = r.fanout.rate / r.ceilings.c
        verdict = "met" if share >= TARGET_SHARE else "MISSED"
        print(f"  fan-out >= {TARGET_SHARE:.0%} of ceiling (c), the table's COPY, at "
              f"{r.fanout.size:,}: {share:.0%}, {verdict}")
    for r in results:
        if r.fanout.size == 1_000_000:
            seconds = r.fanout.seconds
            verdict = "met" if seconds <= TARGET_MILLION_SECONDS else "MISSED"
            print(f"  1,000,000 watchers in at most {TARGET_MILLION_SECONDS:.0f} s with "
                  f"{r.fanout.worker.processes} worker(s): {seconds:.1f} s, {verdict}")
    by_size = {r.fanout.size: r.fanout.worker.peak_rss_kb for r in results}
    if len(by_size) > 1:
        small, large = min(by_size.values()), max(by_size.values())
        same = large - small <= RSS_TOLERANCE * small
        sizes = ", ".join(f"{size:,}" for size in by_size)
        print(f"  same worker peak memory at {sizes}: {mb(small):.1f} to {mb(large):.1f} MB "
              f"({mb(large - small):+.1f} MB), {'met' if same else 'MISSED'} "
              f"(tolerance {RSS_TOLERANCE:.0%})")
    diffs = {statement_diff(c) for c in costs}
    one_insert = all("+1 INSERT wikinotify_events" in d for d in diffs) and len(diffs) == 1
    watchers = " and ".join(f"{c.watchers:,}" for c in costs)
    print(f"  an edit with emit costs the same at {watchers} watchers: "
          f"{' / '.join(sorted(diffs))}; {'met' if one_insert else 'MISSED'}")


def figures(results: Sequence[SizeResult],
            sqlite_results: Sequence[SqliteResult]) -> list[dict[str, Any]]:
    """The figures ``python -m bench`` tabulates (see bench/report.py)."""
    found: list[dict[str, Any]] = []
    for r in results:
        f, c, n = r.fanout, r.ceilings, f"{r.fanout.size:,} watchers"
        pg = f"PostgreSQL, {f.worker.processes} worker{'s' if f.worker.processes > 1 else ''}"
        if len(r.rounds) > 1:
            pg += f", median of {len(r.rounds)} rounds"
        found += [
            report.figure("fanout", f"{n}, {pg}", f.rate, "rows/s", c.c,
                          "ceiling (c): the same rows, binary COPY into an empty copy of the "
                          "table"),
            report.figure("fanout", f"{n}, {pg}", f.rate, "rows/s", c.d,
                          "ceiling (d): the same rows, INSERT … SELECT … ON CONFLICT DO NOTHING "
                          "into an empty copy"),
            report.figure("fanout", f"{n}, {pg}", f.rate, "rows/s", c.a,
                          f"ceiling (a): unnest upsert, {c.batch:,}-row batches"),
            report.figure("fanout", f"{n}, {pg}", f.rate, "rows/s", c.b,
                          "ceiling (b): binary COPY + one merge"),
            report.figure("fanout", f"{n}, {pg}, seconds", f.seconds, "s",
                          *((TARGET_MILLION_SECONDS, "target") if f.size >= 1_000_000 else ())),
            report.figure("fanout", f"{n}, worker peak RSS", mb(f.worker.peak_rss_kb), "MB"),
        ]
    for q in sqlite_results:
        found.append(report.figure("fanout", f"{q.fanout.size:,} watchers, SQLite", q.fanout.rate,
                                   "rows/s", q.raw, "SQLite executemany upsert"))
    return found


# -- the run -------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=_sizes,
                        help="watcher counts, comma-separated "
                        "(default 10000,100000,1000000; 0: none)")
    parser.add_argument("--quick", action="store_true", help="1,000 and 10,000 watchers only")
    parser.add_argument("--sqlite-sizes", type=_sizes,
                        help="SQLite's watcher counts (default 1000,10000,100000; 0: none)")
    parser.add_argument("--workers", type=int, default=1,
                        help="rq workers fanning out on PostgreSQL (default 1; a large event "
                        "is split into ranges they share)")
    parser.add_argument("--repeat", type=_positive, default=REPEAT,
                        help=f"rounds of fan-out and ceilings per size up to {REPEAT_UP_TO:,} "
                        f"watchers, whose medians are given (default {REPEAT})")
    parser.add_argument("--sqlite-repeat", type=_positive, default=SQLITE_REPEAT,
                        help=f"SQLite's rounds of fan-out and executemany per size up to "
                        f"{REPEAT_UP_TO:,} watchers, taking turns (default {SQLITE_REPEAT})")
    parser.add_argument("--batches", type=_sizes, default=list(CEILING_BATCHES),
                        help="the ceilings' batch sizes tried (default 500,1000,2000,5000,10000)")
    parser.add_argument("--fresh", action="store_true",
                        help="drop the benchmark's schema first (else its accounts are reused)")
    parser.add_argument("--rounds", type=int, default=50,
                        help="edits timed per request-cost figure (default 50)")
    parser.add_argument("--naive-cap", type=int, default=10_000,
                        help="rows the naive one-commit-per-row way writes at most (10,000)")
    parser.add_argument("--profile", type=int, metavar="WATCHERS",
                        help="then profile a fan-out to WATCHERS in-process (cProfile)")
    parser.add_argument("--profile-only", action="store_true",
                        help="with --profile: skip the measurements")
    parser.add_argument("--profile-top", type=int, default=30, help="functions shown (30)")
    parser.add_argument("--profile-out", help="also save the profile's stats to this file")
    report.service_args(parser)
    args = parser.parse_args(argv)
    if args.sizes is None:
        args.sizes = QUICK_SIZES if args.quick else SIZES
    args.sizes = [n for n in args.sizes if n]
    if args.sqlite_sizes is None:
        args.sqlite_sizes = QUICK_SQLITE_SIZES if args.quick else SQLITE_SIZES
    args.sqlite_sizes = [n for n in args.sqlite_sizes if n]
    if args.profile_only:
        args.sizes, args.sqlite_sizes = [], []
    return args


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a whole number of at least 1, not {text!r}")
    return int(text)


def _sizes(text: str) -> list[int]:
    return [int(n) for n in text.split(",")]


def set_up(args: argparse.Namespace) -> Bench:
    base = args.database_url
    if base.startswith(("postgresql://", "postgres://")):
        base = "postgresql+psycopg://" + base.split("://", 1)[1]
    url = url_in_schema(base, SCHEMA)
    app = build_app(url, args.redis_url)
    if args.fresh or not schema_is_set_up(base):
        recreate_schema(base, SCHEMA)
        create_tables_and_seed(app)
        engine = sa.create_engine(base)
        with engine.begin() as conn:
            conn.execute(sa.text(f"COMMENT ON SCHEMA \"{SCHEMA}\" IS '{tables_digest()}'"))
        engine.dispose()
    bench = Bench(app=app, pg=psycopg.connect(libpq_url(url)), redis_url=args.redis_url)
    reset_outbox(bench)
    # Failures left by an earlier run on this queue would be reported as this run's.
    failed = FailedJobRegistry(queue=bench.queue)
    for job_id in failed.get_job_ids():
        failed.remove(job_id, delete_job=True)
    return bench


def tables_digest() -> str:
    """A digest of the tables this code expects, kept as the schema's comment once it is
    seeded: a kept schema made by other code (a column added since) is made again."""
    tables = [*db.metadata.sorted_tables, *WikiNotifyBase.metadata.sorted_tables]
    shape = sorted(f"{t.name}.{c.name}:{c.type!r}" for t in tables for c in t.columns)
    return hashlib.sha256("\n".join(shape).encode()).hexdigest()


def schema_is_set_up(base_url: str) -> bool:
    """Whether an earlier run of this code left the schema made and seeded."""
    engine = sa.create_engine(base_url)
    try:
        with engine.connect() as conn:
            comment = conn.scalar(sa.text(
                "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace "
                "WHERE nspname = :schema"), {"schema": SCHEMA})
            return comment == tables_digest()
    finally:
        engine.dispose()


def measure_size(bench: Bench, size: int, args: argparse.Namespace,
                 log: Callable[[str], None]) -> SizeResult:
    ensure_accounts(bench, size)
    add_page(bench, page_path(size), bench.accounts[:size])
    rounds = args.repeat if size <= REPEAT_UP_TO else 1
    runs = []
    by_batch: dict[int, float] = {}
    for n in range(rounds):
        of = f", round {n + 1} of {rounds}" if rounds > 1 else ""
        log(f"{size:,} watchers: fan-out through {args.workers} worker(s){of}")
        result = measure_fanout(bench, size, args.workers)
        template = template_row(bench)  # one row the fan-out wrote, before the ceilings
        table = measure_table_ceilings(bench, size, log)  # its very rows, before (a) and (b)
        if not by_batch:
            by_batch = scan_batches(bench, template, bench.accounts[:size], args.batches, log)
        ceilings = measure_ceilings(bench, template, bench.accounts[:size], by_batch, log)
        runs.append((result, replace(ceilings, table=table)))
    naive_rows = min(size, args.naive_cap)
    log(f"{size:,} watchers: naive upsert ({naive_rows:,} rows)")
    naive = naive_rate(bench, template, bench.accounts[:naive_rows])
    return SizeResult.of(runs, naive, naive_rows)


def _log(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


def measure(
    args: argparse.Namespace, log: Callable[[str], None] = _log
) -> tuple[list[SizeResult], list[SqliteResult]]:
    bench = set_up(args)
    try:
        log("the worker's baseline (a dispatch job with an empty outbox)")
        wq.enqueue(bench.app, "dispatch")
        baseline = run_worker(bench)
        costs = []
        if args.rounds:
            ensure_accounts(bench, 10)
            add_page(bench, "bench/request-10", bench.accounts[:10])
            log("request cost at 10 watchers")
            costs.append(measure_request(bench, "bench/request-10", 10, args.rounds))
        results = [measure_size(bench, size, args, log) for size in args.sizes]
        if args.rounds and args.sizes:
            largest = max(args.sizes)
            log(f"request cost at {largest:,} watchers")
            costs.append(measure_request(bench, page_path(largest), largest, args.rounds))
        sqlite_results = []
        if args.sqlite_sizes:
            with tempfile.TemporaryDirectory(prefix="wikinotify-bench-") as directory:
                lite = set_up_sqlite(directory, args.redis_url)
                try:
                    sqlite_results = [measure_sqlite(lite, n, args.batches, log,
                                                     args.sqlite_repeat)
                                      for n in args.sqlite_sizes]
                finally:
                    lite.db.close()
        if results:
            print_header(bench, args.workers)
            print_table(results, baseline)
        if costs and results:
            print_request_costs(costs)
            print_targets(results, costs)
        if sqlite_results:
            print_sqlite(sqlite_results)
        sys.stdout.flush()
        if args.profile:
            log(f"profiling the fan-out to {args.profile:,} watchers in-process")
            ensure_accounts(bench, args.profile)
            add_page(bench, page_path(args.profile), bench.accounts[: args.profile])
            profile_fanout(bench, args.profile, args.profile_top, args.profile_out)
        return results, sqlite_results
    finally:
        bench.pg.close()


def run(quick: bool, json_out: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """For ``python -m bench``: the figures of a run at the default (or quick, or tiny)
    sizes; ``json_out`` gets them under ``"fanout"`` too."""
    # One worker: the million's target is one worker's (docs/benchmarks.md#the-fan-out).
    argv = ["--rounds", "5", "--workers", "1"]
    if report.tiny():
        argv = ["--rounds", "0", "--repeat", "1", "--sqlite-repeat", "1",
                "--sizes", ",".join(map(str, TINY_SIZES)),
                "--sqlite-sizes", "200", "--naive-cap", "100", "--batches", "500"]
    elif quick:
        argv.append("--quick")
    found = figures(*measure(parse_args(argv)))
    if json_out is not None:
        json_out["fanout"] = found
    return found


def main(argv: Sequence[str] | None = None) -> int:
    measure(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
