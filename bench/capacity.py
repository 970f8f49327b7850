"""Capacity: what one entry and one event cost PostgreSQL on disk, and how many events
one process can emit.

Run from the repository root (PostgreSQL and Redis must be up)::

    python -m bench.capacity            # 100,000 entries, 3 rounds of 5,000 emits
    python -m bench.capacity --quick    # 10,000 entries, 3 rounds of 1,000 emits

**Bytes per entry.** One edit of the demo wiki to a page with N watchers is fanned out by
the ``dispatch`` job (the very function an ``rq worker`` runs, here in this process), then
``VACUUM (ANALYZE)``, and ``wikinotify_notifications``'s size is read from PostgreSQL and
divided by its rows: the table (``pg_table_size``: heap, TOAST, free-space and visibility
maps) and each index (``pg_relation_size``). Three states: as the fan-out leaves the
rows (unread, mail pending: in the unread, coalescing and due-mail indexes); settled,
every entry read and its mail sent, straight after that UPDATE and a plain ``VACUUM`` (the
old versions' space is free for reuse, the files do not shrink); and the same settled
rows rewritten by ``VACUUM FULL`` (what a settled row costs with no dead space). Sizes are
deterministic: a loaded machine changes none of them. Beside the total, as its "limit",
the row's own bytes (``pg_column_size`` of the whole row): the ratio is what the table's
page overhead and its seven indexes add. Also the WAL the fan-out wrote, per entry: read
from the server's WAL position before and after, so another writer on the same server
adds to it (an upper bound on a shared machine); and the WAL of the UPDATE that settles
them.

**Events per second, one process.** ``notify.emit`` and a commit, in a loop, as a
request pays them (the SAVEPOINT, the one INSERT, the commit, and the debounced Redis
kick after it), against the same machine's limit: one plain ``INSERT`` of the same row
into the same table and a commit, through psycopg, from one connection. Both commit
synchronously, as a host's transaction does, so both wait for PostgreSQL's WAL flush;
they take turns in rounds (the median round's ratio is kept). Then WAL and bytes per
event. A
rate measured on a shared machine moves with its load: the load average is printed
beside it.

Everything happens in a schema (``wikinotify_bench_capacity``) and on a queue of their
own; the schema is made afresh on each run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from psycopg.types.json import Jsonb

from bench import report
from bench.fanout import (
    ACTOR,
    Bench,
    add_page,
    analyze,
    edit,
    ensure_accounts,
    fresh_bench,
)
from demo import wiki
from demo.extensions import notify
from demo.models import Page, Site, User, db
from wikinotify import queue as wq
from wikinotify.jobs.dispatch import dispatch
from wikinotify.models import EmailState

SCHEMA = report.scoped("wikinotify_bench_capacity")
QUEUE = report.scoped("wikinotify-bench-capacity")
#: (entries of the fan-out, emits per round): full, quick, and the smoke test's toy size.
FULL, QUICK, TINY = (100_000, 5_000), (10_000, 1_000), (200, 50)
ROUNDS = 3
PATH = "bench/capacity"
ENTRIES = "wikinotify_notifications"
EVENTS = "wikinotify_events"


def set_up(database_url: str, redis_url: str, watchers: int) -> Bench:
    # The seed sets an email delay of a day: no mail falls due here.
    bench = fresh_bench(database_url, redis_url, SCHEMA, {
        "WIKINOTIFY_QUEUE": QUEUE, "WIKINOTIFY_MAIL_ENABLED": True,
        "WIKINOTIFY_DISPATCH_BUDGET": 3600})
    ensure_accounts(bench, watchers)
    add_page(bench, PATH, bench.accounts[:watchers])
    clear_queue(bench)
    return bench


def clear_queue(bench: Bench) -> None:
    """No queued job and no kick held: the benchmark runs its jobs itself."""
    wq.queue(bench.app).empty()
    for job in wq.Job:
        wq.connection(bench.app).delete(wq.kick_key(bench.app, job))


# -- bytes per entry ------------------------------------------------------------------------


@dataclass
class Sizes:
    """One table's size in one state, per row."""

    state: str
    rows: int
    table: int  # pg_table_size: heap, TOAST, free-space and visibility maps
    indexes: dict[str, int]  # each index's pg_relation_size
    row_bytes: float  # the mean pg_column_size of a whole row

    @property
    def total(self) -> int:
        return self.table + sum(self.indexes.values())

    def per_row(self, size: int) -> float:
        return size / self.rows


def sizes(bench: Bench, table: str, state: str) -> Sizes:
    pg = bench.pg
    rows, row_bytes = pg.execute(
        f"SELECT count(*), avg(pg_column_size(t.*)) FROM {table} t").fetchone()
    table_size = pg.execute("SELECT pg_table_size(%s::regclass)", (table,)).fetchone()[0]
    indexes = dict(pg.execute(
        "SELECT c.relname, pg_relation_size(i.indexrelid) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass "
        "ORDER BY c.relname", (table,)).fetchall())
    pg.commit()
    if not rows:
        sys.exit(f"{table} is empty: nothing to measure")
    return Sizes(state=state, rows=rows, table=table_size, indexes=indexes,
                 row_bytes=float(row_bytes))


def vacuum(bench: Bench, what: str) -> None:
    bench.pg.autocommit = True
    try:
        bench.pg.execute(f"VACUUM {what}")
    finally:
        bench.pg.autocommit = False


def wal_position(bench: Bench) -> str:
    """Where PostgreSQL's WAL is being written now (the whole server's: another writer's
    WAL counts too)."""
    position = bench.pg.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
    bench.pg.commit()
    return str(position)


def wal_since(bench: Bench, position: str) -> int:
    written = bench.pg.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)",
                               (position,)).fetchone()[0]
    bench.pg.commit()
    return int(written)


@dataclass
class Fanout:
    seconds: float  # from the claim to the event processed
    wal: int  # WAL bytes written meanwhile


def fan_out(bench: Bench, watchers: int) -> Fanout:
    """One edit to the page's watchers, fanned out here by the worker's own job function."""
    edit(bench, PATH, f"An edit for {watchers} watchers at {time.time()}")
    clear_queue(bench)  # this process runs the job, not a worker
    start = wal_position(bench)
    with bench.app.app_context():
        dispatch()
    wal = wal_since(bench, start)
    clear_queue(bench)  # what the run kicked (mail, ranges) is not this benchmark's
    row = bench.pg.execute(f"SELECT claimed_at, processed_at, (SELECT count(*) FROM {ENTRIES}) "
                           f"FROM {EVENTS} WHERE processed_at IS NOT NULL").fetchone()
    bench.pg.commit()
    if row is None or row[2] != watchers:
        sys.exit(f"the fan-out wrote {row and row[2]} entries for {watchers} watchers")
    return Fanout(seconds=(row[1] - row[0]).total_seconds(), wal=wal)


def settle(bench: Bench) -> None:
    """Every entry read and its mail sent: what most of a retained table holds."""
    bench.pg.execute(f"UPDATE {ENTRIES} SET read_at = now(), email_state = %s, "
                     "emailed_at = now()", (EmailState.SENT.value,))
    bench.pg.commit()


def measure_entries(bench: Bench, watchers: int) -> tuple[list[Sizes], Fanout, int]:
    """The entries' sizes in their three states, the fan-out, and the WAL of settling."""
    fanout = fan_out(bench, watchers)
    analyze(bench)
    fresh = sizes(bench, ENTRIES, "as fanned out (unread, mail pending)")
    start = wal_position(bench)
    settle(bench)
    settle_wal = wal_since(bench, start)
    vacuum(bench, ENTRIES)
    settled = sizes(bench, ENTRIES, "settled (read, mailed), after the UPDATE and VACUUM")
    vacuum(bench, f"FULL {ENTRIES}")
    compact = sizes(bench, ENTRIES, "settled, rewritten by VACUUM FULL")
    return [fresh, settled, compact], fanout, settle_wal


# -- events per second ----------------------------------------------------------------------


RAW_INSERT = (f"INSERT INTO {EVENTS} (kind, origin, site_id, actor_id, page_id, data, "
              "created_at, attempts, key) VALUES ('page:edit', 'user', %s, %s, %s, %s, now(), "
              "0, %s) RETURNING id")


def emit_rate(bench: Bench, count: int, round_: int) -> tuple[float, int]:
    """``count`` events, each emitted and committed as a request does it: per second, and
    the WAL bytes written meanwhile."""
    with bench.app.app_context():
        site = db.session.scalar(sa.select(Site).where(Site.is_default.is_(True)))
        actor = db.session.scalar(sa.select(User).where(User.username == ACTOR))
        page = db.session.scalar(sa.select(Page).where(Page.path == PATH))
        snapshot = wiki.page_snapshot(page)
        site_id, actor_id, page_id = site.id, actor.id, page.id
        db.session.commit()
        wal = wal_position(bench)
        start = time.perf_counter()
        for n in range(count):
            notify.emit("page:edit", site_id=site_id, actor_id=actor_id, page_id=page_id,
                        snapshot=snapshot, variant="edited", key=f"emit-{round_}-{n}")
            db.session.commit()  # and, after it, the debounced kick
        seconds = time.perf_counter() - start
        db.session.remove()
    return count / seconds, wal_since(bench, wal)


def raw_rate(bench: Bench, count: int, round_: int) -> float:
    """The same row, one plain INSERT and a commit each, from one connection."""
    site_id, actor_id, page_id = bench.pg.execute(
        "SELECT p.site_id, u.id, p.id FROM demo_pages p, demo_users u "
        "WHERE p.path = %s AND u.username = %s", (PATH, ACTOR)).fetchone()
    with bench.app.app_context():
        page = db.session.scalar(sa.select(Page).where(Page.path == PATH))
        data = Jsonb({"snapshot": wiki.page_snapshot(page), "variant": "edited"})
        db.session.remove()
    bench.pg.commit()
    start = time.perf_counter()
    for n in range(count):
        bench.pg.execute(RAW_INSERT, (str(site_id), str(actor_id), str(page_id), data,
                                      f"raw-{round_}-{n}"))
        bench.pg.commit()
    return count / (time.perf_counter() - start)


@dataclass
class EmitRound:
    emit: float
    raw: float
    wal: int  # WAL bytes per emitted event

    @property
    def ratio(self) -> float:
        return self.emit / self.raw


def measure_emits(bench: Bench, count: int) -> tuple[EmitRound, list[EmitRound], Sizes]:
    bench.pg.execute(f"DELETE FROM {EVENTS}")
    bench.pg.commit()
    rounds = []
    for n in range(ROUNDS):  # taking turns, so the machine's drift hits both alike
        emitted, wal = emit_rate(bench, count, n)
        rounds.append(EmitRound(emit=emitted, raw=raw_rate(bench, count, n), wal=wal // count))
    clear_queue(bench)  # the kicks asked for dispatch runs: no worker is to take them
    vacuum(bench, f"(ANALYZE) {EVENTS}")
    events = sizes(bench, EVENTS, "emitted, waiting for the fan-out")
    median = sorted(rounds, key=lambda r: r.ratio)[len(rounds) // 2]
    return median, rounds, events


# -- report ---------------------------------------------------------------------------------


def load() -> str:
    return "load average " + " ".join(f"{value:.1f}" for value in os.getloadavg())


def print_sizes(states: Sequence[Sizes]) -> None:
    print(f"\nbytes per row of {ENTRIES} ({states[0].rows:,} entries of one fan-out):")
    names = ["table (heap, TOAST, maps)", *states[0].indexes, "total", "the row's own bytes"]
    print(f"{'':<44}" + "".join(f"{s.state[:34]:>36}" for s in states))
    for name in names:
        cells = []
        for s in states:
            size = (s.table if name.startswith("table") else s.total if name == "total"
                    else s.indexes.get(name))
            value = s.row_bytes if name.startswith("the row") else (
                s.per_row(size) if size is not None else None)
            cells.append("" if value is None else f"{value:,.0f}")
        print(f"{name:<44}" + "".join(f"{cell:>36}" for cell in cells))
    fresh = states[0]
    print(f"one fan-out's {fresh.rows:,} entries: {fresh.total / 2**20:,.1f} MiB in all")


def figures(states: Sequence[Sizes], fanout: Fanout, settle_wal: int, emits: EmitRound,
            events: Sizes) -> list[report.Figure]:
    out = []
    for s in states:
        out.append(report.figure("capacity", f"bytes per entry, {s.state}: table + "
                                 f"{len(s.indexes)} indexes", s.per_row(s.total), "B/row",
                                 s.row_bytes, "the row's own bytes"))
    compact = states[-1]
    for name, size in compact.indexes.items():
        out.append(report.figure("capacity", f"bytes per entry, settled and rewritten: {name}",
                                 compact.per_row(size), "B/row"))
    rows = states[0].rows
    out.append(report.figure("capacity", f"fan-out of {rows:,} in this process "
                             f"({load()} at the end)", rows / fanout.seconds, "rows/s"))
    out.append(report.figure("capacity", "WAL per entry written by the fan-out (the server's "
                             "WAL meanwhile)", fanout.wal / rows, "B/row"))
    out.append(report.figure("capacity", "WAL per entry read and mailed by one UPDATE (the "
                             "server's WAL meanwhile)", settle_wal / rows, "B/row"))
    out.append(report.figure("capacity", f"emit + commit, one process ({load()} at the end)",
                             emits.emit, "events/s", emits.raw,
                             "plain INSERT + commit of the same row, one connection"))
    out.append(report.figure("capacity", "WAL per emitted event (the server's WAL meanwhile)",
                             emits.wal, "B/row"))
    out.append(report.figure("capacity", "bytes per event (table + indexes), waiting",
                             events.per_row(events.total), "B/row", events.row_bytes,
                             "the row's own bytes"))
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="10,000 entries, 3 rounds of 1,000 emits")
    report.service_args(parser)
    return parser.parse_args(argv)


def measure_all(args: argparse.Namespace) -> list[report.Figure]:
    watchers, emits = TINY if report.tiny() else QUICK if args.quick else FULL
    print(f"... {watchers:,} watchers; {load()}", file=sys.stderr, flush=True)
    bench = set_up(args.database_url, args.redis_url, watchers)
    try:
        states, fanout, settle_wal = measure_entries(bench, watchers)
        print(f"... {ROUNDS} rounds of {emits:,} emits; {load()}", file=sys.stderr, flush=True)
        median, rounds, events = measure_emits(bench, emits)
    finally:
        bench.pg.close()
    print_sizes(states)
    print(f"\nthe fan-out itself: {watchers / fanout.seconds:,.0f} rows/s "
          f"({fanout.seconds:.1f} s), {fanout.wal / 2**20:,.1f} MiB of WAL "
          f"({fanout.wal / watchers:,.0f} B per entry)")
    print(f"reading and mailing every entry (one UPDATE): {settle_wal / watchers:,.0f} B of WAL "
          "per entry")
    print(f"\nemit + commit, one process, {ROUNDS} rounds of {emits:,} ({load()} at the end):")
    for n, r in enumerate(rounds):
        print(f"  round {n + 1}: emit {r.emit:,.0f}/s, plain INSERT {r.raw:,.0f}/s, {r.ratio:.0%}; "
              f"{r.wal:,} B of WAL per event")
    print(f"bytes per event: {events.per_row(events.total):,.0f} "
          f"(table {events.per_row(events.table):,.0f}, "
          + ", ".join(f"{k} {events.per_row(v):,.0f}" for k, v in events.indexes.items()) + ")")
    return figures(states, fanout, settle_wal, median, events)


def run(quick: bool) -> list[report.Figure]:
    """For ``python -m bench``."""
    return measure_all(parse_args(["--quick"] if quick else []))


def main(argv: Sequence[str] | None = None) -> int:
    figures_ = measure_all(parse_args(argv))
    print()
    print(report.table(figures_))
    return 0


if __name__ == "__main__":
    sys.exit(main())
