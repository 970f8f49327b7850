"""The fan-out benchmark: one edit to 1,000, 10,000 and 100,000 watchers on PostgreSQL.

Run from the repository root (PostgreSQL and Redis must be up)::

    python -m bench.fanout                      # 1,000 / 10,000 / 100,000 watchers
    python -m bench.fanout --quick              # 1,000 / 10,000 only
    python -m bench.fanout --profile 10000      # then where a fan-out's time goes

For each size it saves one edit through the demo wiki (``demo.wiki.save_page``, which
emits), runs one real ``rq worker --burst`` process, and prints the fan-out's recipients
per second next to two rates measured in the same run on the same table: the raw upsert
(500-row batches sent as arrays through ``unnest``) and the naive one (one INSERT and one
COMMIT per recipient), with the worker's peak memory. Then it prints what an edit costs the
request with and without ``emit``, at 10 watchers and at the largest size.

Everything happens in a schema of its own (``wikinotify_bench``, dropped and recreated at
start, left behind for inspection) and on a Redis queue of its own.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
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
from demo import wiki
from demo.cli import seed
from demo.extensions import notify
from demo.models import Page, Revision, Site, User, db
from wikinotify import fanout
from wikinotify import queue as wq
from wikinotify.categories import FanoutContext
from wikinotify.fanout import WRITE_BATCH
from wikinotify.instance_settings import instance_settings
from wikinotify.models import Base as WikiNotifyBase
from wikinotify.state import state

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RQ = os.path.join(os.path.dirname(sys.executable), "rq")
DEFAULT_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
SCHEMA = "wikinotify_bench"
QUEUE = "wikinotify-bench"
SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000, 10_000)
#: The editor: a seeded account that watches none of the benchmark's pages.
ACTOR = "bob"
#: High enough that no fan-out here is split into several runs (the maximum allowed).
DISPATCH_BUDGET = 3600
#: "The same peak memory" means within this fraction.
RSS_TOLERANCE = 0.05
#: Edits timed before the measured ones, so connection set-up and caches are not counted.
WARMUP_EDITS = 5


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
class Bench:
    """What every step shares: the app, a psycopg connection and the accounts made so far."""

    app: Flask
    pg: psycopg.Connection
    redis_url: str
    accounts: list[int] = field(default_factory=list)

    @property
    def queue(self) -> Queue:
        return Queue(QUEUE, connection=wq.connection(self.app))


# -- accounts, pages and watches (bulk, with COPY) ------------------------------------------


def ensure_accounts(bench: Bench, count: int) -> None:
    """Top the benchmark's verified accounts in Everyone up to ``count``."""
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
    """A page written directly (no emit: creating it is no one's action) and its watchers."""
    with bench.app.app_context():
        site = db.session.scalar(sa.select(Site).where(Site.is_default.is_(True)))
        page = Page(site_id=site.id, path=path, title=path, content="v0", tags=[])
        page.revisions.append(Revision(title=path, content="v0"))
        db.session.add(page)
        db.session.commit()
        page_id, site_id = page.id, site.id
    with bench.pg.cursor() as cur:
        with cur.copy("COPY demo_watches (page_id, user_id, site_id) FROM STDIN") as copy:
            for user_id in watchers:
                copy.write_row((page_id, user_id, site_id))
    bench.pg.commit()
    analyze(bench)


def analyze(bench: Bench) -> None:
    """Fresh planner statistics after a bulk load, as autovacuum would give a live wiki;
    without them PostgreSQL may plan the 1,000-id lookups as if the tables were empty."""
    bench.pg.autocommit = True
    try:
        bench.pg.execute("ANALYZE")
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
    bench.queue.empty()
    wq.connection(bench.app).delete(wq.kick_key(bench.app, "dispatch"))


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
import resource, subprocess, sys
code = subprocess.call(sys.argv[2:])
with open(sys.argv[1], "w") as out:
    out.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""


@dataclass
class WorkerRun:
    wall: float  # the worker process, start to exit
    job_seconds: float  # RQ's started_at → ended_at of its jobs (the app build included)
    jobs: list[str]  # the functions of the jobs it ran
    peak_rss_kb: int


def run_worker(bench: Bench) -> WorkerRun:
    """One ``rq worker --burst`` on the benchmark's queue, until the queue is empty."""
    finished = FinishedJobRegistry(queue=bench.queue)
    before = set(finished.get_job_ids())
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        command = [sys.executable, "-c", _RSS_WRAPPER, rss.name,
                   RQ, "worker", "--burst", "--url", bench.redis_url, QUEUE]
        start = time.perf_counter()
        result = subprocess.run(command, cwd=ROOT, env=worker_env(bench.app),
                                capture_output=True, text=True, timeout=3600)
        wall = time.perf_counter() - start
        peak_kb = int(rss.read() or 0)
    if result.returncode != 0:
        sys.exit(f"rq worker failed:\n{result.stderr[-4000:]}")
    fail_on_failed_jobs(bench)
    jobs = [bench.queue.fetch_job(i) for i in set(finished.get_job_ids()) - before]
    jobs = [job for job in jobs if job is not None]
    seconds = sum((job.ended_at - job.started_at).total_seconds() for job in jobs)
    names = sorted(job.func_name.rsplit(".", 1)[-1] for job in jobs)
    return WorkerRun(wall=wall, job_seconds=seconds, jobs=names, peak_rss_kb=peak_kb)


def fail_on_failed_jobs(bench: Bench) -> None:
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


def measure_fanout(bench: Bench, size: int) -> FanoutResult:
    reset_outbox(bench)
    edit(bench, page_path(size), f"An edit for {size} watchers")
    if bench.queue.count != 1:
        sys.exit(f"expected the edit to enqueue one dispatch job, found {bench.queue.count}")
    worker = run_worker(bench)
    if worker.jobs != ["dispatch"]:
        sys.exit(f"expected the worker to run one dispatch job, it ran {worker.jobs}")
    seconds = check_fanout(bench, size)
    return FanoutResult(size=size, seconds=seconds, worker=worker)


def check_fanout(bench: Bench, size: int) -> float:
    """That one event reached exactly ``size`` people in one run; how long it took."""
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
    return (processed_at - claimed_at).total_seconds()


# -- the two reference rates ---------------------------------------------------------------

#: The columns the fan-out writes (fanout._rows), with their PostgreSQL types.
COLUMNS = (
    ("user_id", "text"), ("site_id", "text"), ("category", "text"), ("variant", "text"),
    ("variants", "text"), ("group_key", "text"), ("page_id", "text"), ("comment_id", "text"),
    ("actor_id", "text"), ("data", "jsonb"), ("count", "int"), ("last_event_id", "bigint"),
    ("in_app", "boolean"), ("email_state", "text"), ("email_after", "timestamptz"),
    ("email_attempts", "int"), ("created_at", "timestamptz"), ("updated_at", "timestamptz"),
)
_NAMES = ", ".join(name for name, _ in COLUMNS)
_DECIDED = "n.email_state IN ('pending', 'sending', 'sent', 'failed')"
# The same conflict target, SET and WHERE as fanout.upsert's (§8.3), so both references
# do the work the fan-out's statement does; `%%` is a literal % for psycopg.
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
UNNEST_UPSERT = (
    f"INSERT INTO wikinotify_notifications AS n ({_NAMES}) SELECT * FROM unnest("
    + ", ".join(f"%s::{kind}[]" for _, kind in COLUMNS)
    + ")"
    + _ON_CONFLICT
)
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


def raw_rate(bench: Bench, template: dict[str, Any], user_ids: Sequence[int]) -> float:
    """Rows/s of 500-row unnest upserts, one commit per batch, as the fan-out commits."""
    truncate_entries(bench)
    start = time.perf_counter()
    with bench.pg.cursor() as cur:
        for first in range(0, len(user_ids), WRITE_BATCH):
            batch = [str(u) for u in user_ids[first : first + WRITE_BATCH]]
            arrays = [batch if name == "user_id" else [template[name]] * len(batch)
                      for name, _ in COLUMNS]
            cur.execute(UNNEST_UPSERT, arrays)
            bench.pg.commit()
    seconds = time.perf_counter() - start
    truncate_entries(bench)
    return len(user_ids) / seconds


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

    def kick(app: Flask) -> bool:
        start = time.perf_counter()
        enqueued = original(app)
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


def profile_fanout(bench: Bench, size: int, top: int) -> None:
    """Run the fan-out of one edit to ``size`` watchers under cProfile in this process,
    with the same code a worker runs (``wikinotify.fanout.dispatch``), and print where the
    time goes."""
    reset_outbox(bench)
    edit(bench, page_path(size), f"An edit to profile for {size} watchers")
    bench.queue.empty()  # run here, not by a worker
    with bench.app.app_context():
        st = state(bench.app)
        ctx = FanoutContext(host=st.host, session=st.db.session)
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        fanout.dispatch(ctx, st.registry, mail_on=True, budget=DISPATCH_BUDGET,
                        stale_after=timedelta(hours=1))
        profiler.disable()
        seconds = time.perf_counter() - start
        db.session.remove()
    check_fanout(bench, size)
    reset_outbox(bench)
    print(f"\nprofile: the fan-out of one edit to {size:,} watchers in this process under "
          f"cProfile: {seconds:.2f} s ({size / seconds:,.0f} rows/s with the profiler's "
          "overhead); cumulative time of each phase:")
    stats = pstats.Stats(profiler)
    for label, where, name in PHASES:
        spent = cumulative(stats, where, name)
        print(f"  {spent:7.2f} s {spent / seconds:4.0%}  {label}")
    print(f"\nthe {top} functions with the most time of their own:")
    stats.strip_dirs().sort_stats("tottime").print_stats(top)


#: (label, file the function is in, function): the phases a fan-out's time splits into.
PHASES = (
    ("the fan-out (fanout.dispatch)", "wikinotify/fanout.py", "dispatch"),
    ("  deciding who is told (fanout.decide)", "wikinotify/fanout.py", "decide"),
    ("    the accounts' facts (host.users)", "demo/host.py", "users"),
    ("    stored preferences (fanout._preferences)", "wikinotify/fanout.py", "_preferences"),
    ("  building the rows' dicts (fanout._rows)", "wikinotify/fanout.py", "_rows"),
    ("  writing them (fanout.upsert)", "wikinotify/fanout.py", "upsert"),
    ("    SQLAlchemy: .values() of 500 dicts", "sqlalchemy/sql/dml.py", "values"),
    ("    SQLAlchemy: compiling the 500-row INSERT", "sqlalchemy/sql/compiler.py", "visit_insert"),
    ("    psycopg: converting the query's placeholders", "psycopg/_queries.py", "convert"),
    ("  waiting for PostgreSQL (every statement; mostly in upsert)", "psycopg/connection.py",
     "wait"),
)


def cumulative(stats: pstats.Stats, where: str, name: str) -> float:
    """Seconds spent in (and under) the functions ``name`` of files ending in ``where``."""
    return sum(
        entry[3]
        for (filename, _, function), entry in stats.stats.items()  # type: ignore[attr-defined]
        if function == name and filename.replace(os.sep, "/").endswith(where)
    )


# -- output --------------------------------------------------------------------------------


@dataclass
class SizeResult:
    fanout: FanoutResult
    raw: float
    naive: float
    naive_rows: int


def mb(kb: int) -> float:
    return kb / 1024


def print_header(bench: Bench) -> None:
    version = bench.pg.execute("SHOW server_version").fetchone()[0]
    sync = bench.pg.execute("SHOW synchronous_commit").fetchone()[0]
    bench.pg.commit()
    print(f"wikinotify fan-out benchmark: PostgreSQL {version} (synchronous_commit={sync}), "
          f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, schema {SCHEMA}, "
          f"queue {QUEUE}")
    print("one edit (demo.wiki.save_page) fanned out by one `rq worker --burst` "
          "(RQ's forking Worker); all rates in rows/s\n")


def print_table(results: Sequence[SizeResult], baseline: WorkerRun) -> None:
    head = (f"{'watchers':>9} | {'fan-out s':>9} | {'fan-out':>8} | {'raw unnest':>10} | "
            f"{'fan/raw':>7} | {'naive':>7} | {'fan/naive':>9} | {'worker peak RSS':>15}")
    print(head)
    print("-" * len(head))
    print(f"{'0':>9} | {'':>9} | {'':>8} | {'':>10} | {'':>7} | {'':>7} | {'':>9} | "
          f"{mb(baseline.peak_rss_kb):>12.1f} MB  (empty outbox: the worker's baseline)")
    for r in results:
        f = r.fanout
        star = "*" if r.naive_rows < f.size else " "
        print(f"{f.size:>9,} | {f.seconds:>9.2f} | {f.rate:>8,.0f} | {r.raw:>10,.0f} | "
              f"{f.rate / r.raw:>6.0%} | {r.naive:>6,.0f}{star} | {f.rate / r.naive:>8.1f}x | "
              f"{mb(f.worker.peak_rss_kb):>12.1f} MB")
    capped = [r for r in results if r.naive_rows < r.fanout.size]
    for r in capped:
        print(f"  * naive measured on the first {r.naive_rows:,} of {r.fanout.size:,} rows "
              "(--naive-cap) and taken as the rate for all of them")
    print("raw unnest: the same rows (same columns and values, same ON CONFLICT) upserted by "
          f"psycopg directly, {WRITE_BATCH} per statement\n  as one array per column through "
          "unnest(), a commit per statement; naive: the same upsert one row and one commit at a "
          "time")
    print("\nfan-out s: the event's claimed_at → processed_at (claim commit to the last batch, "
          "as stamped by the worker);\n  not counted there, but part of each worker process:")
    for r in results:
        w = r.fanout.worker
        print(f"  {r.fanout.size:>7,}: worker process {w.wall:6.2f} s wall (start-up, app "
              f"build, fan-out, exit); job {', '.join(w.jobs)} {w.job_seconds:6.2f} s in RQ")


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
        share = r.fanout.rate / r.raw
        verdict = "met" if share >= 0.5 else "MISSED"
        print(f"  fan-out >= 50% of the raw upsert rate at {r.fanout.size:,}: {share:.0%}, "
              f"{verdict}")
    by_size = {r.fanout.size: r.fanout.worker.peak_rss_kb for r in results}
    if 10_000 in by_size and 100_000 in by_size:
        small, large = by_size[10_000], by_size[100_000]
        same = abs(large - small) <= RSS_TOLERANCE * small
        print(f"  same worker peak memory at 10,000 and 100,000: {mb(small):.1f} MB vs "
              f"{mb(large):.1f} MB ({mb(large - small):+.1f} MB), "
              f"{'met' if same else 'MISSED'} (tolerance {RSS_TOLERANCE:.0%})")
    diffs = {statement_diff(c) for c in costs}
    one_insert = diffs == {"+1 INSERT wikinotify_events"}
    watchers = " and ".join(f"{c.watchers:,}" for c in costs)
    print(f"  an edit with emit costs one extra INSERT, the same at {watchers} watchers: "
          f"{' / '.join(sorted(diffs))}; "
          f"{'met' if one_insert else 'MISSED'}")


# -- the run -------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=lambda s: [int(n) for n in s.split(",")],
                        help="watcher counts, comma-separated (default 1000,10000,100000)")
    parser.add_argument("--quick", action="store_true", help="1,000 and 10,000 watchers only")
    parser.add_argument("--rounds", type=int, default=50,
                        help="edits timed per request-cost figure (default 50)")
    parser.add_argument("--naive-cap", type=int, default=10_000,
                        help="rows the naive one-commit-per-row way writes at most (10,000)")
    parser.add_argument("--profile", type=int, metavar="WATCHERS",
                        help="then profile a fan-out to WATCHERS in-process (cProfile)")
    parser.add_argument("--profile-top", type=int, default=30, help="functions shown (30)")
    parser.add_argument("--database-url", default=os.environ.get(
        "WIKINOTIFY_TEST_DATABASE_URL", DEFAULT_DATABASE_URL))
    parser.add_argument("--redis-url", default=os.environ.get(
        "WIKINOTIFY_TEST_REDIS_URL", DEFAULT_REDIS_URL))
    args = parser.parse_args(argv)
    args.sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    return args


def set_up(args: argparse.Namespace) -> Bench:
    base = args.database_url
    if base.startswith(("postgresql://", "postgres://")):
        base = "postgresql+psycopg://" + base.split("://", 1)[1]
    recreate_schema(base, SCHEMA)
    url = url_in_schema(base, SCHEMA)
    app = build_app(url, args.redis_url)
    create_tables_and_seed(app)
    bench = Bench(app=app, pg=psycopg.connect(libpq_url(url)), redis_url=args.redis_url)
    reset_outbox(bench)
    # Failures left by an earlier run on this queue would be reported as this run's.
    failed = FailedJobRegistry(queue=bench.queue)
    for job_id in failed.get_job_ids():
        failed.remove(job_id, delete_job=True)
    return bench


def measure_size(bench: Bench, size: int, naive_cap: int, log: Callable[[str], None]) -> SizeResult:
    ensure_accounts(bench, size)
    add_page(bench, page_path(size), bench.accounts[:size])
    log(f"{size:,} watchers: fan-out through a worker")
    result = measure_fanout(bench, size)
    template = template_row(bench)
    log(f"{size:,} watchers: raw unnest upsert")
    raw = raw_rate(bench, template, bench.accounts[:size])
    naive_rows = min(size, naive_cap)
    log(f"{size:,} watchers: naive upsert ({naive_rows:,} rows)")
    naive = naive_rate(bench, template, bench.accounts[:naive_rows])
    return SizeResult(fanout=result, raw=raw, naive=naive, naive_rows=naive_rows)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def log(message: str) -> None:
        print(f"... {message}", file=sys.stderr, flush=True)

    bench = set_up(args)
    log("the worker's baseline (a dispatch job with an empty outbox)")
    wq.enqueue(bench.app, "dispatch")
    baseline = run_worker(bench)
    ensure_accounts(bench, 10)
    add_page(bench, "bench/request-10", bench.accounts[:10])
    log("request cost at 10 watchers")
    costs = [measure_request(bench, "bench/request-10", 10, args.rounds)]
    results = [measure_size(bench, size, args.naive_cap, log) for size in args.sizes]
    largest = max(args.sizes)
    log(f"request cost at {largest:,} watchers")
    costs.append(measure_request(bench, page_path(largest), largest, args.rounds))
    print_header(bench)
    print_table(results, baseline)
    print_request_costs(costs)
    print_targets(results, costs)
    sys.stdout.flush()
    if args.profile:
        log(f"profiling the fan-out to {args.profile:,} watchers in-process")
        if args.profile not in args.sizes:
            ensure_accounts(bench, args.profile)
            add_page(bench, page_path(args.profile), bench.accounts[: args.profile])
        profile_fanout(bench, args.profile, args.profile_top)
    bench.pg.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
