"""The inbox at scale: one reader's inbox in a table of ten million entries.

Run from the repository root (PostgreSQL and Redis must be up, gunicorn from the ``bench``
extra)::

    .venv/bin/python -m bench.inbox_scale               # 10,000,000 entries, the reader 100,000
    .venv/bin/python -m bench.inbox_scale --quick       # 200,000 entries, the reader 20,000
    .venv/bin/python -m bench.inbox_scale --entries 2000000 --reader 100000

It fills ``wikinotify_notifications`` with ``--entries`` rows, ``--reader`` of them one
account's (all unread, in the inbox, spread over 90 days) and the rest shared by 100,000
other readers (half of theirs read), each a copy of a real entry the fan-out wrote (one
edit fanned out to the reader first). The rows are made by the server itself (one
``INSERT … SELECT`` from ``generate_series``, nothing crosses the network) in time order,
as the fan-out fills a live table, into the table without its indexes, which are then
built, and the table vacuumed and analysed, as autovacuum leaves a live one. Then, under
one gunicorn (``bench/live.py``'s, the demo wiki plus its trivial endpoints), taking turns
request by request on one kept-alive connection each:

- the trivial endpoint (a small JSON body, no session, no SQL) and the same after the wiki's
  own per-request work (the account loaded, the site found: the floor of any signed-in
  route), the ceilings;
- the inbox's first page (``GET /api/notifications``, 30 entries) and a deep page by
  cursor (the page after the reader's 90,000th entry: a cursor this API handed out), each
  twice: read afresh (the reader's summary version forgotten before each request, untimed:
  the account loaded, the page read, the wiki asked, its answer kept), and asked again as
  it was just answered, nothing having changed (the demo wiki keeps pages,
  docs/rules.md#kept-pages: answered from Redis);
- the capped unread count (``GET /api/notifications/summary``) twice: as a poll mostly
  finds it (its body kept in Redis), and with the reader's summary version forgotten
  before each request (untimed), so the account is loaded and the counts' SQL runs;

each's p50 and p99. Then each route's statements, captured from the route itself (the Flask
test client), with ``EXPLAIN (ANALYZE, BUFFERS)`` of those on the entries table, and of
mark-all-read's with its WAL. Then "mark all read" of the reader's 100,000 unread entries
(the API's own function, ``undo.mark_all_read_undoably`` and its commit, in this process:
the route adds a CSRF check and the response; a read mark, docs/rules.md#read-marks),
timed ``--mark-rounds`` times, and apart the job's work that settles the mark onto her
rows (``read_marks.settle_all``, as a worker runs it), the entries made unread again and
any mark deleted between rounds, untimed: the first round finds her rows scattered, the
later ones packed by the round before. The work happens in a schema of its own, dropped at
the end; ``--keep`` keeps it (ten million entries take some 5.8 GB), and the next run
reuses its fill if nothing that matters changed (:func:`kept_bench`).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import psycopg
import sqlalchemy as sa
from rq import Queue

import demo
from bench import live as live_bench
from bench import report
from bench.fanout import (
    Bench,
    edit,
    ensure_accounts,
    fresh_bench,
    libpq_url,
    new_page,
    url_in_schema,
)
from bench.live import SECRET, TRIVIAL, free_port, session_cookie, start_gunicorn
from demo.models import Site, db
from wikinotify import queue as wq
from wikinotify.categories import FanoutContext
from wikinotify.inbox import entries as inbox
from wikinotify.inbox import live, read_marks, undo
from wikinotify.models import Notification, ReadMark
from wikinotify.pipeline.events import dispatch as dispatch_events
from wikinotify.state import state

SCHEMA = report.scoped("wikinotify_bench_inbox")
QUEUE = report.scoped("wikinotify-bench-inbox")
LIST = "/_notifications/api/notifications"
SUMMARY = "/_notifications/api/notifications/summary"
SIGNED_IN = "/bench/signed-in"
ENTRIES, READER = 10_000_000, 100_000
QUICK_ENTRIES, QUICK_READER = 200_000, 20_000
TINY_ENTRIES, TINY_READER = 2_000, 500
#: The other readers the rest of the table belongs to.
OTHERS = 100_000
#: How deep the deep page is, as a share of the reader's entries.
DEEP = 0.9
#: The targets (docs/benchmarks.md#the-inbox-at-scale).
TARGET_PAGE_FACTOR = 2.0
TARGET_MARK_SECONDS = 2.0


# -- the table ------------------------------------------------------------------------------


def template_entry(bench: Bench, reader: int) -> tuple[dict[str, Any], str]:
    """One real entry: an edit fanned out to the reader alone, in this process, by the
    worker's own code; its columns, and its page's path."""
    path = "bench/inbox"
    page_id, _ = new_page(bench, path)
    bench.pg.execute("INSERT INTO demo_watches (page_id, user_id, site_id) "
                     "SELECT %s, %s, site_id FROM demo_pages WHERE id = %s",
                     (page_id, reader, page_id))
    bench.pg.commit()
    edit(bench, path, "An edit to copy ten million times")
    with bench.app.app_context():
        st = state(bench.app)
        dispatch_events(FanoutContext(host=st.host, session=st.db.session), st.registry,
                        mail_on=False, budget=60, stale_after=timedelta(hours=1))
        db.session.remove()
        Queue(QUEUE, connection=wq.connection(bench.app)).empty()  # the kick's job: done here
    row = bench.pg.execute(
        "SELECT site_id, category, variant, variants, group_key, page_id, actor_id, data::text, "
        "last_event_id FROM wikinotify_notifications").fetchone()
    bench.pg.commit()
    if row is None:
        sys.exit("the fan-out to the reader wrote no entry")
    names = ("site_id", "category", "variant", "variants", "group_key", "page_id", "actor_id",
             "data", "last_event_id")
    return dict(zip(names, row, strict=True)), path


def index_statements(bench: Bench) -> list[tuple[str, str]]:
    """The entries table's indexes (its primary key aside): name, CREATE INDEX statement."""
    rows = bench.pg.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
        "AND tablename = 'wikinotify_notifications' AND indexname NOT LIKE 'pk_%'").fetchall()
    bench.pg.commit()
    return [(name, statement) for name, statement in rows]


def fill(bench: Bench, template: dict[str, Any], reader: int, entries: int, mine: int,
         log: Callable[[str], None]) -> None:
    """``entries`` rows, ``mine`` of them the reader's, made by the server."""
    indexes = index_statements(bench)
    bench.pg.execute("TRUNCATE wikinotify_notifications")
    for name, _ in indexes:
        bench.pg.execute(f'DROP INDEX "{name}"')
    bench.pg.commit()
    log(f"{entries:,} entries: INSERT … SELECT from generate_series, no index but the key")
    start = time.perf_counter()
    # The reader's rows one in every entries/mine of the table (as a live table mixes
    # everyone's), spread over 90 days, unread; the others' over the same days, every other
    # one read. In time order, as the fan-out writes a live table: a row's place, its id
    # and its time rise together. (They were a permutation of each other here once, which
    # made every index on time a random walk no live table asks for: mark-all-read then
    # read most of the retention index's pages once per row, 5 s of its 5.2.)
    bench.pg.execute(
        """
        INSERT INTO wikinotify_notifications (user_id, site_id, category, variant, variants,
            group_key, page_id, actor_id, data, count, last_event_id, in_app, email_state,
            email_attempts, read_at, created_at, updated_at)
        SELECT CASE WHEN g.mine THEN %(reader)s ELSE 'x' || (g.n %% %(others)s) END,
            %(site_id)s, %(category)s, %(variant)s, %(variants)s, %(group_key)s || ':' || g.n,
            %(page_id)s, %(actor_id)s, %(data)s::jsonb, 1, %(last_event_id)s, true, 'none', 0,
            CASE WHEN NOT g.mine AND g.n %% 2 = 0 THEN g.at END, g.at, g.at
        FROM (SELECT n, n %% %(step)s = 0 AND n / %(step)s <= %(mine)s AS mine,
                     now() - ((%(entries)s - n)::bigint * 7776000 / %(entries)s)
                             * interval '1 second' AS at
              FROM generate_series(1, %(entries)s) AS n) AS g
        """,
        {**template, "mine": mine, "step": entries // mine, "reader": str(reader),
         "others": OTHERS, "entries": entries})
    bench.pg.commit()
    log(f"  {time.perf_counter() - start:.0f} s; building {len(indexes)} indexes")
    bench.pg.execute("SET maintenance_work_mem = '512MB'")
    for _, statement in indexes:
        bench.pg.execute(statement)
        bench.pg.commit()
    log(f"  {time.perf_counter() - start:.0f} s; VACUUM (ANALYZE)")
    bench.pg.autocommit = True
    try:
        bench.pg.execute("VACUUM (ANALYZE) wikinotify_notifications")
    finally:
        bench.pg.autocommit = False
    log(f"  {time.perf_counter() - start:.0f} s in all")


#: What a kept schema's fill is recorded in: its size and the indexes it was built with.
FILLED = "bench_inbox_filled"
#: How the rows are made (:func:`fill`); a kept fill made otherwise is made again.
FILL_VERSION = 2


def fill_key(bench: Bench, entries: int, mine: int) -> str:
    """What a fill is: its sizes and the entries table's indexes as the code declares them
    now (a kept fill built with other indexes is made again)."""
    with bench.app.app_context():
        indexes = sorted(str(sa.schema.CreateIndex(index).compile(db.engine))
                         for index in Notification.__table__.indexes)
    digest = hashlib.sha256("\n".join(indexes).encode()).hexdigest()[:16]
    return f"{FILL_VERSION}:{entries}:{mine}:{digest}"


def record_fill(bench: Bench, key: str, reader: int) -> None:
    bench.pg.execute(f"CREATE TABLE {FILLED} (key text, reader integer)")
    bench.pg.execute(f"INSERT INTO {FILLED} VALUES (%s, %s)", (key, reader))
    bench.pg.commit()


def kept_bench(database_url: str, redis_url: str, config: dict[str, Any],
               key_of: Callable[[Bench], str]) -> tuple[Bench, int] | None:
    """The schema a ``--keep`` run left, with its reader, if its fill is the one asked for."""
    base = database_url
    if base.startswith(("postgresql://", "postgres://")):
        base = "postgresql+psycopg://" + base.split("://", 1)[1]
    url = url_in_schema(base, SCHEMA)
    pg = psycopg.connect(libpq_url(url))
    try:
        row = pg.execute(f"SELECT key, reader FROM {FILLED}").fetchone()
    except psycopg.errors.UndefinedTable:
        row = None
    pg.rollback()
    if row is None:
        pg.close()
        return None
    app = demo.create_app({"SECRET_KEY": "bench-secret", "SQLALCHEMY_DATABASE_URI": url,
                           "WIKINOTIFY_REDIS_URL": redis_url, **config})
    bench = Bench(app=app, pg=pg, redis_url=redis_url)
    if key_of(bench) != row[0]:
        pg.close()
        return None
    return bench, int(row[1])


def table_size(bench: Bench) -> str:
    size = bench.pg.execute(
        "SELECT pg_size_pretty(pg_total_relation_size('wikinotify_notifications'))").fetchone()[0]
    bench.pg.commit()
    return str(size)


# -- the requests ---------------------------------------------------------------------------


def deep_cursor(bench: Bench, reader: int, depth: int) -> str:
    """The cursor the API hands out for the page after the reader's ``depth``-th entry."""
    row = bench.pg.execute(
        "SELECT updated_at, id FROM wikinotify_notifications WHERE user_id = %s AND in_app "
        "ORDER BY updated_at DESC, id DESC OFFSET %s LIMIT 1", (str(reader), depth - 1)
    ).fetchone()
    bench.pg.commit()
    return inbox.encode_cursor(SimpleNamespace(updated_at=row[0], id=row[1]))  # type: ignore[arg-type]


@dataclass
class Latencies:
    """Milliseconds per request of each endpoint, measured taking turns."""

    by_name: dict[str, list[float]]

    def p(self, name: str, percent: float) -> float:
        ordered = sorted(self.by_name[name])
        return ordered[min(len(ordered) - 1, int(percent / 100 * len(ordered)))]


def _timed_get(conn: http.client.HTTPConnection, path: str,
               headers: dict[str, str]) -> tuple[float, http.client.HTTPResponse]:
    start = time.perf_counter()
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    response.read()
    return (time.perf_counter() - start) * 1000, response


Before = Callable[[], None]


def measure_requests(port: int, endpoints: dict[str, tuple[str, dict[str, str]]],
                     rounds: int, warmup: int = 20,
                     before: dict[str, Before] | None = None) -> Latencies:
    """Each endpoint ``rounds`` times, one request of each in turn, on a kept-alive
    connection of its own; every answer must be a 200. ``before``: what to do, untimed,
    before each request of an endpoint."""
    before = before or {}
    connections = {name: http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                   for name in endpoints}
    found: dict[str, list[float]] = {name: [] for name in endpoints}
    try:
        for n in range(warmup + rounds):
            for name, (path, headers) in endpoints.items():
                if name in before:
                    before[name]()
                try:
                    elapsed, response = _timed_get(connections[name], path, headers)
                except (http.client.RemoteDisconnected, ConnectionError):
                    # gunicorn closed the kept-alive connection (its keep-alive is 2 s):
                    # again on a new one, connecting untimed.
                    connections[name].close()
                    connections[name] = http.client.HTTPConnection("127.0.0.1", port,
                                                                   timeout=30)
                    connections[name].connect()
                    elapsed, response = _timed_get(connections[name], path, headers)
                if response.status != 200:
                    sys.exit(f"{name}: {path} answered {response.status}")
                if n >= warmup:
                    found[name].append(elapsed)
    finally:
        for conn in connections.values():
            conn.close()
    return Latencies(found)


@dataclass
class Marking:
    """What the mark-all-read rounds measured."""

    #: The request's work, each round: the mark written, her mail cancelled, committed.
    seconds: list[float]
    #: How many entries it marked.
    marked: int
    #: The settling job's work, each round, run as a worker runs it (not in the request).
    settle_seconds: list[float]
    #: Her summary's statement right after the mark, before the job ran (every one of
    #: her unread entries covered), ms: the median of five, round 1.
    summary_covered_ms: float | None = None


def mark_all_read_seconds(bench: Bench, reader: int, rounds: int,
                          wal_compression: str | None = None) -> Marking:
    """Mark-all-read of the reader's unread entries, ``rounds`` times: the request's
    work and its commit timed (a read mark, docs/rules.md#read-marks), then the job that
    settles the mark onto her rows timed on its own, then (untimed) her rows made unread
    again and any mark left deleted. The first round finds her rows scattered through the
    table, one in a hundred, as a live table holds them; each later one finds them packed
    by the round before (the job rewrote them). ``wal_compression``: the server setting
    for the marking transactions (an operator's choice, measured here; setting it per
    transaction needs a superuser)."""
    result = Marking([], 0, [])
    site_id = _site_id(bench)
    with bench.app.app_context():
        for n in range(rounds):
            if wal_compression:
                db.session.execute(sa.text("SELECT set_config('wal_compression', :v, true)"),
                                   {"v": wal_compression})
            start = time.perf_counter()
            result.marked, _token = undo.mark_all_read_undoably(
                db.session(), SECRET, str(reader), site_id)
            db.session.commit()
            result.seconds.append(time.perf_counter() - start)
            if n == 0:
                result.summary_covered_ms = _summary_ms(reader, site_id)
            start = time.perf_counter()
            settled = read_marks.settle_all(db.session, 3600)
            result.settle_seconds.append(time.perf_counter() - start)
            assert settled["left"] == 0, settled
            db.session.execute(sa.delete(ReadMark).where(ReadMark.user_id == str(reader)))
            db.session.execute(
                sa.update(Notification).where(Notification.user_id == str(reader))
                .values(read_at=None))
            db.session.commit()
        db.session.remove()
    if rounds:
        # Her rows are packed together now (the new versions the rounds wrote), which
        # the first round's scattered rows were not: a kept fill is made again next time.
        bench.pg.execute(f"DROP TABLE IF EXISTS {FILLED}")
        bench.pg.commit()
    return result


def _summary_ms(reader: int, site_id: str) -> float:
    """Her summary's statement (the badge's counts), median of five, ms."""
    times = []
    for _ in range(5):
        start = time.perf_counter()
        inbox.summary(db.session, str(reader), site_id)
        times.append((time.perf_counter() - start) * 1000)
        db.session.rollback()
    return statistics.median(times)


# -- the plans ------------------------------------------------------------------------------


def _explain(statement: str, parameters: Any, wal: bool = False) -> str:
    options = "ANALYZE, BUFFERS, WAL, COSTS OFF" if wal else "ANALYZE, BUFFERS, COSTS OFF"
    rows = db.session.connection().exec_driver_sql(f"EXPLAIN ({options}) {statement}",
                                                   parameters)
    return "\n".join(row[0] for row in rows)


def _one_line(statement: str) -> str:
    return " ".join(statement.split())


@dataclass
class Plans:
    """Each measured request's statements (one line each) and ``EXPLAIN (ANALYZE,
    BUFFERS)`` of those that read the entries table; mark-all-read's with its WAL."""

    statements: dict[str, list[str]]
    explained: dict[str, str]


def plans(bench: Bench, reader: int, cursor: str, cookie: str) -> Plans:
    """The statements each route sends, captured from the route itself (the Flask test
    client, signed in as the reader) and explained as they ran; mark-all-read's from the
    API's own function, inside a rolled-back transaction."""
    captured: list[tuple[str, Any]] = []

    def record(conn, cursor_, statement, parameters, context, executemany) -> None:
        captured.append((statement, parameters))

    requests = {"first page": LIST, "deep page": f"{LIST}?cursor={cursor}",
                "capped unread count": SUMMARY}
    statements: dict[str, list[str]] = {}
    explained: dict[str, str] = {}
    client = bench.app.test_client()
    name_, value = cookie.split("=", 1)
    client.set_cookie(name_, value, domain="localhost")
    site_id = _site_id(bench)
    with bench.app.app_context():
        engine = db.engine
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        for name, path in requests.items():
            live.changed(bench.app, [str(reader)])  # so its SQL runs: no page kept
            captured.clear()
            response = client.get(path)
            if response.status_code != 200:
                sys.exit(f"{name}: {path} answered {response.status_code}")
            statements[name] = [_one_line(st) for st, _ in captured]
            found = list(captured)
            with bench.app.app_context():
                explained[name] = "\n\n".join(
                    _explain(st, params) for st, params in found
                    if "wikinotify_notifications" in st)
                db.session.rollback()
                db.session.remove()
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    found = _captured(bench, _marking(reader, site_id))
    statements["mark all read"] = [_one_line(st) for st, _ in found]
    with bench.app.app_context():
        explained["mark all read"] = "\n\n".join(
            _explain(st, params, wal=True) for st, params in found)
        db.session.rollback()
        db.session.remove()
    return Plans(statements, explained)


def _site_id(bench: Bench) -> str:
    with bench.app.app_context():
        site_id = str(db.session.scalar(sa.select(Site.id).where(Site.is_default.is_(True))))
        db.session.remove()
    return site_id


def _marking(reader: int, site_id: str) -> Callable[[Any], Any]:
    """Mark-all-read as the API does it, for :func:`_captured`."""
    return lambda session: undo.mark_all_read_undoably(session, SECRET, str(reader), site_id)


def _captured(bench: Bench, work: Callable[[Any], Any]) -> list[tuple[str, Any]]:
    """The statements ``work(session)`` sends, with their parameters; its transaction
    rolled back."""
    captured: list[tuple[str, Any]] = []

    def record(conn, cursor_, statement, parameters, context, executemany) -> None:
        captured.append((statement, parameters))

    with bench.app.app_context():
        engine = db.engine
        sa.event.listen(engine, "before_cursor_execute", record)
        try:
            work(db.session())
        finally:
            sa.event.remove(engine, "before_cursor_execute", record)
            db.session.rollback()
            db.session.remove()
    return captured


# -- where mark-all-read's time goes --------------------------------------------------------


@dataclass
class Cost:
    """One statement under ``EXPLAIN (ANALYZE, WAL)``, rolled back, after a checkpoint."""

    name: str
    seconds: float
    #: Its PostgreSQL backend's CPU seconds (``None`` when the server is not on this
    #: machine, so ``/proc`` does not have it).
    cpu: float | None
    wal_fpi: int
    wal_bytes: int


def _backend_cpu(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cost(name: str, statement: str, parameters: Any, setup: Sequence[str]) -> Cost:
    """``statement`` after ``setup`` (a setting, an index dropped), in one transaction
    rolled back: her rows stay where they were. The ``CHECKPOINT`` first makes it log
    each page it changes whole, as the first change after a checkpoint does."""
    conn = db.session.connection()
    pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
    conn.exec_driver_sql("CHECKPOINT")
    for step in setup:
        conn.exec_driver_sql(step)
    before = _backend_cpu(pid)
    plan = conn.exec_driver_sql(f"EXPLAIN (ANALYZE, WAL, FORMAT JSON) {statement}",
                                parameters).scalar_one()[0]
    after = _backend_cpu(pid)
    db.session.rollback()
    top = plan["Plan"]
    return Cost(name, plan["Execution Time"] / 1000,
                None if before is None or after is None else after - before,
                int(top.get("WAL FPI", 0)), int(top.get("WAL Bytes", 0)))


#: The index her rows are found by: kept in every variant.
UNREAD_INDEX = "ix_wikinotify_notifications_unread"


def mark_breakdown(bench: Bench, reader: int) -> list[Cost]:
    """Mark-all-read's update, and what it costs without each part: reading her rows
    alone, the WAL compressed, the inbox index, and every index but the one that finds
    her rows (the heap's floor: what marking rows one by one costs, whatever the
    indexes). Each rolled back after a checkpoint (docs/benchmarks.md#the-inbox-at-scale)."""
    site_id = _site_id(bench)
    update = next(found for found in _captured(bench, _marking(reader, site_id))
                  if found[0].lstrip().upper().startswith("UPDATE"))
    read = _captured(bench, lambda session: session.execute(
        sa.select(sa.func.count(Notification.email_state))
        .where(*inbox.unread_on_site(str(reader), site_id))))[0]
    primary_key = Notification.__table__.primary_key.name
    heap_only = [f'DROP INDEX "{name}"' for name, _ in index_statements(bench)
                 if name != UNREAD_INDEX]
    heap_only.append(f'ALTER TABLE wikinotify_notifications DROP CONSTRAINT "{primary_key}"')
    variants: list[tuple[str, tuple[str, Any], list[str]]] = [
        ("reading her rows only", read, []),
        ("as is", update, []),
        ("wal_compression = lz4", update, ["SET LOCAL wal_compression = lz4"]),
        ("the inbox index dropped", update, ["DROP INDEX ix_wikinotify_notifications_inbox"]),
        ("every index but the unread one dropped", update, heap_only),
        ("as is, again", update, []),
    ]
    with bench.app.app_context():
        try:
            return [_cost(name, statement, parameters, setup)
                    for name, (statement, parameters), setup in variants]
        finally:
            db.session.rollback()
            db.session.remove()


# -- the run --------------------------------------------------------------------------------


@dataclass
class Result:
    entries: int
    mine: int
    size: str
    latencies: Latencies
    marking: Marking
    plans: Plans | None
    load: tuple[float, float, float]
    wal_compression: str | None = None
    #: ``--mark-breakdown``: the update and what it costs without each part.
    breakdown: list[Cost] | None = None


#: The capped count twice: as a poll mostly finds it (the body kept in Redis at the
#: summary's version: no SQL, not even the account loaded), and after a change (the
#: version forgotten before each request: the account loaded, the counts' SQL run).
KEPT, COUNTED = "unread count, kept", "unread count, SQL"
FIRST, FIRST_AFRESH = "first page, kept", "first page, afresh"
DEEP_KEPT, DEEP_AFRESH = "deep page, kept", "deep page, afresh"
#: In the order they take turns: each page read afresh (and kept) just before it is asked
#: again, since forgetting her version for one forgets every page kept of hers (and her
#: summary's body, which the counted summary keeps again just before the kept one).
NAMES = ("trivial", "trivial, signed in", FIRST_AFRESH, FIRST, DEEP_AFRESH, DEEP_KEPT, COUNTED,
         KEPT)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.inbox_scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_ENTRIES:,} entries, the reader {QUICK_READER:,}")
    parser.add_argument("--entries", type=int, help=f"rows in the table ({ENTRIES:,})")
    parser.add_argument("--reader", type=int, help=f"of them the reader's ({READER:,})")
    parser.add_argument("--requests", type=int, default=300,
                        help="requests per endpoint, taking turns (300)")
    parser.add_argument("--mark-rounds", type=int, default=5,
                        help="mark-all-read rounds (5; 0: the pages alone, and a kept fill "
                        "stays as it was made)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the schema afterwards; the next run reuses its fill when "
                        "the sizes and the entries' indexes are the same")
    parser.add_argument("--no-plans", action="store_true", help="skip the EXPLAIN plans")
    parser.add_argument("--wal-compression", metavar="METHOD",
                        help="mark all read with this wal_compression (lz4, zstd, pglz: "
                        "PostgreSQL's setting, for its transactions; a superuser's)")
    parser.add_argument("--mark-breakdown", action="store_true",
                        help="before the rounds, the update rolled back after a CHECKPOINT "
                        "as is and without each part (WAL compressed, the inbox index, "
                        "every index): where its time goes. A superuser's; her rows stay "
                        "scattered")
    report.service_args(parser)
    args = parser.parse_args(argv)
    if args.entries is None:
        args.entries = QUICK_ENTRIES if args.quick else ENTRIES
    if args.reader is None:
        args.reader = QUICK_READER if args.quick else READER
    args.reader = min(args.reader, args.entries)
    return args


def _log(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


def measure(args: argparse.Namespace, log: Callable[[str], None] = _log) -> Result:
    config = {"SECRET_KEY": SECRET, "WIKINOTIFY_QUEUE": QUEUE, "WIKINOTIFY_MAIL_ENABLED": False}

    def key_of(b: Bench) -> str:
        return fill_key(b, args.entries, args.reader)

    kept = kept_bench(args.database_url, args.redis_url, config, key_of)
    if kept is not None:
        bench, reader = kept
        log(f"reusing the kept fill of {args.entries:,} entries in {SCHEMA}")
    else:
        bench = fresh_bench(args.database_url, args.redis_url, SCHEMA, config)
    url = bench.app.config["SQLALCHEMY_DATABASE_URI"]
    try:
        if kept is None:
            ensure_accounts(bench, 1)
            reader = bench.accounts[0]
            template, _ = template_entry(bench, reader)
            fill(bench, template, reader, args.entries, args.reader, log)
            record_fill(bench, key_of(bench), reader)
        size = table_size(bench)
        cursor = deep_cursor(bench, reader, max(1, int(args.reader * DEEP)))
        cookie = session_cookie(bench.app, reader)
        signed = {"Cookie": cookie}
        deep = f"{LIST}?cursor={cursor}"
        paths = {"trivial": (TRIVIAL, {}), "trivial, signed in": (SIGNED_IN, signed),
                 FIRST_AFRESH: (LIST, signed), FIRST: (LIST, signed),
                 DEEP_AFRESH: (deep, signed), DEEP_KEPT: (deep, signed),
                 KEPT: (SUMMARY, signed), COUNTED: (SUMMARY, signed)}
        endpoints = {name: paths[name] for name in NAMES}
        # The server's keys are under bench.live's queue name.
        server_app = SimpleNamespace(config={"WIKINOTIFY_QUEUE": live_bench.QUEUE})
        redis = wq.connection(bench.app)

        def forget() -> None:
            redis.delete(*live.version_keys(server_app, str(reader))[:1])  # type: ignore[arg-type]

        port = free_port()
        load = _loadavg()
        server = start_gunicorn(url, args.redis_url, port)
        try:
            log(f"{args.requests} requests of each endpoint, taking turns")
            latencies = measure_requests(port, endpoints, args.requests,
                                         before={name: forget for name in (
                                             FIRST_AFRESH, DEEP_AFRESH, COUNTED)})
        finally:
            server.terminate()
            server.wait(timeout=30)
        found = None if args.no_plans else plans(bench, reader, cursor, cookie)
        breakdown = None
        if args.mark_breakdown:
            log("where mark-all-read's time goes: its update rolled back, six ways")
            breakdown = mark_breakdown(bench, reader)
        log(f"mark all read of {args.reader:,} entries, {args.mark_rounds} rounds")
        marking = mark_all_read_seconds(bench, reader, args.mark_rounds, args.wal_compression)
        return Result(args.entries, args.reader, size, latencies, marking, found, load,
                      args.wal_compression, breakdown)
    finally:
        bench.pg.close()
        if not args.keep:
            log(f"dropping the schema {SCHEMA}")
            base = args.database_url
            if base.startswith(("postgresql://", "postgres://")):
                base = "postgresql+psycopg://" + base.split("://", 1)[1]
            engine = sa.create_engine(base, isolation_level="AUTOCOMMIT")
            with engine.connect() as conn:
                conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE'))
            engine.dispose()


def _loadavg() -> tuple[float, float, float]:
    return os.getloadavg()


def print_result(r: Result) -> None:
    print(f"\nthe inbox at scale: {r.entries:,} entries ({r.size} with its indexes), the "
          f"reader's {r.mine:,}; load average at the start {r.load[0]:.1f} / {r.load[1]:.1f} / "
          f"{r.load[2]:.1f}")
    lat = r.latencies
    trivial, signed = lat.p("trivial", 50), lat.p("trivial, signed in", 50)
    print(f"{'endpoint':>22} | {'p50 ms':>7} | {'p99 ms':>7} | {'p50 / trivial':>13} | "
          f"{'p50 / signed-in trivial':>23}")
    for name in NAMES:
        p50 = lat.p(name, 50)
        print(f"{name:>22} | {p50:>7.2f} | {lat.p(name, 99):>7.2f} | {p50 / trivial:>12.1f}x | "
              f"{p50 / signed:>22.1f}x")
    marks, settles = r.marking.seconds, r.marking.settle_seconds
    if r.wal_compression:
        print(f"(mark all read with wal_compression = {r.wal_compression})")
    if marks:
        print(f"mark all read of {r.marking.marked:,} entries (the request: her read mark "
              f"and its commit): median {statistics.median(marks):.3f} s, "
              f"max {max(marks):.3f} s ({len(marks)} rounds: "
              f"{', '.join(f'{s:.3f}' for s in marks)}; the first with her rows scattered "
              "through the table, the others with them packed by the round before)")
        print(f"the job settling it onto her rows (a worker's, not the request's): "
              f"{', '.join(f'{s:.2f}' for s in settles)} s")
        print(f"her summary's statement right after the mark, every unread entry covered: "
              f"{r.marking.summary_covered_ms:.1f} ms (median of 5)")
    if r.breakdown:
        print("\nmark all read's update, rolled back after a CHECKPOINT each:")
        print(f"{'':>40} | {'seconds':>7} | {'backend CPU s':>13} | {'full pages':>10} | "
              f"{'WAL MB':>7}")
        for cost in r.breakdown:
            cpu = "" if cost.cpu is None else f"{cost.cpu:.2f}"
            print(f"{cost.name:>40} | {cost.seconds:>7.2f} | {cpu:>13} | {cost.wal_fpi:>10,} | "
                  f"{cost.wal_bytes / 1e6:>7.0f}")
    print("\ntargets:")
    for name in (FIRST, DEEP_KEPT, FIRST_AFRESH, DEEP_AFRESH):
        factor = lat.p(name, 50) / trivial
        print(f"  {name} within {TARGET_PAGE_FACTOR:g}x the trivial endpoint: {factor:.1f}x, "
              f"{'met' if factor <= TARGET_PAGE_FACTOR else 'MISSED'}"
              f" ({lat.p(name, 50) / signed:.1f}x the signed-in trivial endpoint)")
    if marks:
        # The first round is the target's figure: her rows scattered, as a live table
        # holds them (the later rounds find them packed by the round before).
        print(f"  mark all read of {r.marking.marked:,} under {TARGET_MARK_SECONDS:g} s, her rows "
              f"scattered: {marks[0]:.2f} s, "
              f"{'met' if marks[0] < TARGET_MARK_SECONDS else 'MISSED'} (median of "
              f"{len(marks)} rounds {statistics.median(marks):.2f} s)")
    else:
        print("  mark all read: not measured (--mark-rounds 0)")
    if r.plans is not None:
        for name, statements in r.plans.statements.items():
            print(f"\n{name}: {len(statements)} statements")
            for statement in statements:
                print(f"  {statement[:160]}")
        for name, plan in r.plans.explained.items():
            print(f"\nEXPLAIN (ANALYZE, BUFFERS): {name}'s statements on the entries table\n"
                  f"{plan}")


def figures(r: Result) -> list[report.Figure]:
    lat, found = r.latencies, []
    trivial = lat.p("trivial", 50)
    n = f"{r.entries:,} entries, reader {r.mine:,}"
    for name in NAMES[1:]:
        found.append(report.figure("inbox_scale", f"{n}: {name}, p50", lat.p(name, 50), "ms",
                                   trivial, "trivial endpoint, p50"))
        found.append(report.figure("inbox_scale", f"{n}: {name}, p99", lat.p(name, 99), "ms",
                                   lat.p("trivial", 99), "trivial endpoint, p99"))
    marks = r.marking.seconds
    rounds = len(marks)
    if rounds:
        # The first round is the target's (her rows scattered); the median, whose later
        # rounds find them packed, flatters it.
        found.append(report.figure("inbox_scale", f"{n}: mark all read, scattered (round 1)",
                                   marks[0], "s", TARGET_MARK_SECONDS, "target"))
        found.append(report.figure("inbox_scale", f"{n}: mark all read, median of {rounds}",
                                   statistics.median(marks), "s",
                                   TARGET_MARK_SECONDS, "target"))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    print_result(measure(parse_args(argv)))
    return 0


def run(quick: bool) -> list[report.Figure]:
    """For ``python -m bench``: the full table (ten million) unless quick or tiny."""
    argv = []
    if report.tiny():
        argv = ["--entries", str(TINY_ENTRIES), "--reader", str(TINY_READER), "--requests",
                "20", "--mark-rounds", "1", "--no-plans"]
    elif quick:
        argv = ["--quick", "--requests", "100", "--mark-rounds", "3"]
    result = measure(parse_args(argv))
    print_result(result)
    return figures(result)


if __name__ == "__main__":
    sys.exit(main())
