"""An announcement to everyone, beside an ordinary fan-out of the same size, in the same run
(docs/benchmarks.md#announcements).

Run from the repository root (PostgreSQL and Redis up)::

    python -m bench.announce            # 100,000 readers, ranges of 25,000
    python -m bench.announce --quick    # 20,000 readers, ranges of 5,000

Two fan-outs from an empty inbox, each by one ``rq worker`` process split into ranges of the
same size (``WIKINOTIFY_FANOUT_RANGE_SIZE``): an edit of a page that the benchmark's
accounts all watch, and an administrator's announcement to everyone, whose audience is walked
through ``Host.announcement_audience`` (the demo's accounts, keyset on their id) and checked
for the site's ``read:pages`` once per group set. Both tell the same people: the benchmark's
accounts and four of the seeded ones, who watch the page too (alice, carol, dave and admin
for the edit, by bob; alice, bob, carol and dave for the announcement, by admin), so both
are cut into as many ranges. Each figure is the event's rate from its INSERT to the commit
that marks it processed; the limit is the edit's rate: what an announcement costs against a
fan-out the wiki already makes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import sqlalchemy as sa

from bench import fanout_split, report
from bench.fanout import add_page, ensure_accounts, fresh_bench
from bench.fanout_split import PATH, QUEUE, SETTINGS, Run, measure, parse_args
from demo.models import Site, User, db
from wikinotify import announcements

#: (readers, range size): full, quick, and the smoke test's toy size.
FULL, QUICK, TINY = (100_000, 25_000), (20_000, 5_000), (400, 100)
#: The seeded accounts each fan-out tells besides the benchmark's own: every one but its
#: author (the edit's is bob, the announcement's admin).
SEEDED_READERS = 4
SCHEMA = report.scoped("wikinotify_bench_announce")


def set_up(database_url: str, redis_url: str, readers: int) -> fanout_split.Bench:
    """The benchmark's accounts, and the page they and the seeded accounts but bob watch."""
    bench = fresh_bench(database_url, redis_url, SCHEMA, {"WIKINOTIFY_QUEUE": QUEUE, **SETTINGS})
    ensure_accounts(bench, readers)
    seeded = [row[0] for row in bench.pg.execute(
        "SELECT id FROM demo_users WHERE username IN ('alice', 'carol', 'dave', 'admin')")]
    bench.pg.commit()
    add_page(bench, PATH, [*seeded, *bench.accounts[:readers]])
    return bench


def announce(bench: fanout_split.Bench, readers: int) -> None:
    """What ``POST /api/admin/announcements`` does: one INSERT, committed, then the kick."""
    with bench.app.app_context():
        site = db.session.scalar(sa.select(Site).where(Site.is_default.is_(True)))
        author = db.session.scalar(sa.select(User.id).where(User.username == "admin"))
        announcements.publish(author_id=str(author), site_id=str(site.id),
                              title=f"To {readers:,} readers", body="Read-only on Saturday.",
                              groups=None, important=False)
        db.session.commit()


def measure_all(args: argparse.Namespace) -> list[report.Figure]:
    readers, range_size = TINY if report.tiny() else QUICK if args.quick else FULL
    print(f"... {readers:,} readers, ranges of {range_size:,}", file=sys.stderr, flush=True)
    bench = set_up(args.database_url, args.redis_url, readers)
    told = readers + SEEDED_READERS
    edit = measure(bench, told, 1, range_size)
    announcement = measure(bench, told, 1, range_size, act=lambda: announce(bench, readers),
                           told=told)
    bench.pg.close()
    print_runs(edit, announcement)
    name = f"announcement to everyone, {told:,} readers, ranges of {range_size:,}, 1 worker"
    return [
        report.figure("announce", edit.label, edit.rate, "rows/s"),
        report.figure("announce", name, announcement.rate, "rows/s", edit.rate,
                      "an edit's fan-out to as many watchers, the same ranges"),
    ]


def print_runs(edit: Run, announcement: Run) -> None:
    print("wikinotify announcement against an ordinary fan-out: rows/s from the event's "
          "INSERT to the commit that marks it processed, one worker, the same range size")
    for label, run in (("edit of a watched page", edit), ("announcement to everyone",
                                                          announcement)):
        print(f"{label:<26} | {run.watchers:>9,} rows | {run.ranges:>3} ranges | "
              f"{run.seconds:8.2f} s | {run.rate:9,.0f} rows/s | worker CPU "
              f"{run.worker_cpu:6.1f} s | PostgreSQL CPU {run.postgres_cpu:6.1f} s")
    print(f"\nannouncement: {announcement.rate / edit.rate:.0%} of the edit's rate")


def run(quick: bool) -> list[report.Figure]:
    """For ``python -m bench``."""
    return measure_all(parse_args(["--quick"] if quick else []))


def main(argv: Sequence[str] | None = None) -> int:
    measure_all(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
