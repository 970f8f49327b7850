"""The mail drain benchmark: due mail drained to a local SMTP sink by real RQ workers.

Run from the repository root (PostgreSQL and Redis must be up)::

    python -m bench.drain            # 5,000 users x 1 row, then 500 users x 10 rows
    python -m bench.drain --quick    # 1,000 x 1 and 100 x 10

For each shape the rows are written by the real pipeline (pages saved through the demo
wiki, their fan-out run by the ``dispatch`` job in this process), made due at once, and
drained by one, then two, ``rq worker -w wikinotify.jobs.appctx.Worker`` processes serving
the mail queue (RQ's forking worker with the app built before the first fork: each
``send_mail`` run is a work horse, with its own SMTP connection; ``--worker-class
rq.Worker`` measures the plain one, whose horses each build the app). The rate
is mails per second from the kick (workers already listening) to the last row marked
``sent``. Beside it, measured right after that drain and against the same sink: the raw
rate, the drain's own last mail (its headers, its text and HTML bodies) built again for
each mail with the standard library (``EmailMessage``) and sent over one reused
``smtplib`` connection, as fast as it goes.

The sink is aiosmtpd on 127.0.0.1 in a process of its own, counting messages and their
recipients (only the last message kept). At the end of every drain: every row is
``sent``, the sink counted exactly one mail per (user, site), and no address got two.

The mail run's batch is set to its maximum (1,000 (user, site) pairs per run), as an
instance with this much mail would set it (Admin → Notifications). Everything happens in a
schema (``wikinotify_bench_drain``) and on queues of its own.
"""

from __future__ import annotations

import argparse
import email
import email.policy
import json
import os
import smtplib
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

import psycopg
import sqlalchemy as sa
from flask import Flask
from rq import Queue, Worker

import demo
from bench import report
from bench import workers as bench_workers
from bench.fanout import (
    RQ,
    Bench,
    analyze,
    create_tables_and_seed,
    ensure_accounts,
    libpq_url,
    recreate_schema,
    url_in_schema,
)
from bench.sink import Sink
from demo import wiki
from demo.models import Site, User, db
from wikinotify import jobs
from wikinotify import queue as wq
from wikinotify.models import InstanceSettings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = report.scoped("wikinotify_bench_drain")
QUEUE = report.scoped("wikinotify-bench-drain")
SECRET = "bench-drain-secret"
SENDER = "Bench wiki <wiki@localhost>"
#: The most (user, site) pairs one mail run takes (the setting's maximum).
BATCH = 1000
#: (users, rows each): one mail per user either way.
SHAPES = ((5_000, 1), (500, 10))
QUICK_SHAPES = ((1_000, 1), (100, 10))
TINY_SHAPES = ((10, 2),)
WORKER_COUNTS = (1, 2)
#: The editor: a seeded account that watches none of the benchmark's pages.
ACTOR = "bob"
#: How long a drain may take before the benchmark gives up on it.
DRAIN_TIMEOUT = 600
#: The mail workers' class: the forking worker that builds the app once.
WORKER_CLASS = "wikinotify.jobs.appctx.Worker"


# -- the app, the rows and the workers -------------------------------------------------------


def mail_config(database_url: str, redis_url: str, smtp_port: int) -> dict[str, Any]:
    return {
        "SECRET_KEY": SECRET,
        "SQLALCHEMY_DATABASE_URI": database_url,
        "WIKINOTIFY_REDIS_URL": redis_url,
        "WIKINOTIFY_QUEUE": QUEUE,
        "WIKINOTIFY_MAIL_ENABLED": True,
        "MAIL_SERVER": "127.0.0.1",
        "MAIL_PORT": smtp_port,
        "MAIL_DEFAULT_SENDER": SENDER,
        "MAIL_SUPPRESS_SEND": False,
    }


def worker_env(config: dict[str, Any]) -> dict[str, str]:
    """A deployment's worker settings: FLASK_* variables (see tests/conftest.py)."""
    env = dict(os.environ)
    for key, value in config.items():
        env[f"FLASK_{key}"] = value if isinstance(value, str) else json.dumps(value)
    env.pop("FLASK_APP", None)  # the worker finds wsgi.py in the working directory
    return env


@dataclass
class Drainer:
    app: Flask
    bench: Bench
    config: dict[str, Any]
    sink: Sink
    pages: int = 0
    worker_class: str = WORKER_CLASS

    @property
    def mail_queue(self) -> Queue:
        return Queue(wq.queue_name(self.app, wq.Job.SEND_MAIL), connection=wq.connection(self.app))

    def reset(self) -> None:
        """No entries, no events, no queued job or kick, no relay state left in Redis."""
        pg = self.bench.pg
        pg.execute("TRUNCATE wikinotify_notifications")
        pg.execute("DELETE FROM wikinotify_events")
        pg.commit()
        client = wq.connection(self.app)
        for name in wq.queue_names(self.app):
            Queue(name, connection=client).empty()
        # A shared Redis may hold millions of other keys (a test suite's): SCAN's default
        # of 10 a round trip took minutes to walk them.
        for key in client.scan_iter(wq.redis_key(self.app, "*"), count=10_000):
            client.delete(key)

    def seed(self, users: int, rows: int) -> int:
        """``rows`` edited pages each watched by the same ``users`` accounts, fanned out
        by the real dispatch job; every entry's mail then made due. Returns the rows."""
        self.reset()
        ensure_accounts(self.bench, users)
        watchers = self.bench.accounts[:users]
        paths = []
        for _ in range(rows):
            self.pages += 1
            paths.append(add_watched_page(self.bench, f"bench/drain-{self.pages}", watchers))
        analyze(self.bench)
        with self.app.app_context():
            site = db.session.scalar(sa.select(Site).where(Site.is_default.is_(True)))
            actor = db.session.scalar(sa.select(User).where(User.username == ACTOR))
            for path in paths:
                wiki.save_page(site, actor, path, path, f"An edit of {path}")
            db.session.remove()
        # The fan-out here, by the job's own function: it is not what is measured.
        while self.events_waiting():
            with self.app.app_context():
                jobs.dispatch()
        self.reset_queues()
        pg = self.bench.pg
        due = pg.execute(
            "UPDATE wikinotify_notifications SET email_after = now() - interval '1 second' "
            "WHERE email_state = 'pending'").rowcount
        pg.commit()
        if due != users * rows:
            sys.exit(f"expected {users * rows:,} entries with mail pending, found {due:,}")
        analyze(self.bench)
        return due

    def events_waiting(self) -> bool:
        pg = self.bench.pg
        left = pg.execute("SELECT count(*) FROM wikinotify_events "
                          "WHERE processed_at IS NULL").fetchone()[0]
        pg.commit()
        return bool(left)

    def reset_queues(self) -> None:
        client = wq.connection(self.app)
        for name in wq.queue_names(self.app):
            Queue(name, connection=client).empty()
        for job in (wq.Job.SEND_MAIL, wq.Job.DISPATCH):
            client.delete(wq.kick_key(self.app, job))

    def drain(self, workers: int, expected_mails: int, rows: int) -> float:
        """Start ``workers`` ``rq worker`` processes on the mail queue, wait until they
        listen, kick the mail run as the minute cron does, and wait for the last row to
        be marked ``sent``. Returns the seconds from the kick to that mark."""
        self.sink.reset()
        env = worker_env(self.config)
        name = wq.queue_name(self.app, wq.Job.SEND_MAIL)
        procs = [bench_workers.start([RQ, "worker", "--url", self.bench.redis_url,
                                      "--worker-class", self.worker_class,
                                      "--name", f"bench-drain-{os.getpid()}-{n}", name],
                                     cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
                 for n in range(workers)]
        try:
            wait_for_workers(self.mail_queue, workers, procs)
            pg = self.bench.pg
            start = pg.execute("SELECT clock_timestamp()").fetchone()[0]
            pg.commit()
            wq.kick(self.app, wq.Job.SEND_MAIL)
            deadline = time.monotonic() + DRAIN_TIMEOUT
            while True:
                left, last = pg.execute(
                    "SELECT count(*) FILTER (WHERE email_state <> 'sent'), max(emailed_at) "
                    "FROM wikinotify_notifications").fetchone()
                pg.commit()
                if left == 0:
                    break
                if time.monotonic() > deadline:
                    sys.exit(f"the drain left {left:,} rows unsent after {DRAIN_TIMEOUT} s")
                for proc in procs:
                    if proc.poll() is not None:
                        sys.exit(f"an rq worker exited:\n{proc.stderr.read()[-4000:]}")
                time.sleep(0.05)
        finally:
            bench_workers.stop(procs)  # a warm shutdown: the run in hand ends
        self.check(expected_mails, rows)
        return (last - start).total_seconds()

    def check(self, expected_mails: int, rows: int) -> None:
        """Every row sent once: the sink counted one mail per user, none twice."""
        stats = self.sink.stats()
        if stats["mails"] != expected_mails or stats["duplicates"]:
            sys.exit(f"expected {expected_mails:,} mails, one per address; the sink counted "
                     f"{stats['mails']:,} to {stats['recipients']:,} addresses "
                     f"({stats['duplicates']} duplicates)")
        pg = self.bench.pg
        states = dict(pg.execute("SELECT email_state, count(*) FROM wikinotify_notifications "
                                 "GROUP BY email_state").fetchall())
        pg.commit()
        if states != {"sent": rows}:
            sys.exit(f"expected {rows:,} rows sent, found {states}")


def add_watched_page(bench: Bench, path: str, watchers: Sequence[int]) -> str:
    """A page written directly (creating it is no one's action) and its watchers."""
    with bench.app.app_context():
        site = db.session.scalar(sa.select(Site).where(Site.is_default.is_(True)))
        page_id, site_id = _create_page(site, path)
        db.session.remove()
    with bench.pg.cursor() as cur:
        with cur.copy("COPY demo_watches (page_id, user_id, site_id) FROM STDIN") as copy:
            for user_id in watchers:
                copy.write_row((page_id, user_id, site_id))
    bench.pg.commit()
    return path


def _create_page(site: Site, path: str) -> tuple[int, int]:
    from demo.models import Page, Revision

    page = Page(site_id=site.id, path=path, title=f"Page {path}", content="v0", tags=[])
    page.revisions.append(Revision(title=page.title, content="v0"))
    db.session.add(page)
    db.session.commit()
    return page.id, site.id


def wait_for_workers(queue: Queue, count: int, procs: Sequence[subprocess.Popen]) -> None:
    deadline = time.monotonic() + 60
    while len(Worker.all(queue=queue)) < count:
        for proc in procs:
            if proc.poll() is not None:
                sys.exit(f"an rq worker exited:\n{proc.stderr.read()[-4000:]}")
        if time.monotonic() > deadline:
            sys.exit("the rq workers did not start")
        time.sleep(0.1)


# -- the raw rate ---------------------------------------------------------------------------


#: Headers the standard library writes for the parts it is given (not copied).
_MIME_HEADERS = frozenset({"mime-version", "content-type", "content-transfer-encoding"})


def raw_rate(port: int, count: int, sample: bytes) -> float:
    """Mails/s: the drain's own mail (``sample``, the last the sink took) built again for
    each mail with the standard library (``EmailMessage``, its default policy): the same
    headers (a fresh ``Date`` and ``Message-ID``, the address its own), the same text and
    HTML bodies, so the same size and the same transfer encodings; all sent over one
    smtplib connection to the same sink.

    Until 2026-12-05 it sent a made-up message of the same size: three headers where the
    drain's mails carry nine to eleven, and bodies of short ASCII lines that went out as
    they were, where the drain's HTML has long lines that go out quoted-printable (which
    the standard library encodes in Python): a lighter message than the one it was
    compared with, and one whose cost did not grow with its size (a 7.8 kB digest went
    as fast as a 2.9 kB mail)."""
    parsed = email.message_from_bytes(sample, policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    headers = [(name, str(value)) for name, value in parsed.items()
               if name.lower() not in _MIME_HEADERS]
    text_part, html_part = parsed.get_body(("plain",)), parsed.get_body(("html",))
    if text_part is None or html_part is None:
        sys.exit("the drain's mail has no text and HTML parts to send again")
    text, html = text_part.get_content(), html_part.get_content()
    domain = parsed["Message-ID"].rsplit("@", 1)[-1].rstrip(">")
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
        start = time.perf_counter()
        for n in range(count):
            message = EmailMessage()
            for name, value in headers:
                if name == "To":
                    value = f"raw{n}@example.com"
                elif name == "Date":
                    value = formatdate(localtime=True)
                elif name == "Message-ID":
                    value = make_msgid(domain=domain)
                message[name] = value
            message.set_content(text)
            message.add_alternative(html, subtype="html")
            smtp.send_message(message)
        return count / (time.perf_counter() - start)


# -- the run -------------------------------------------------------------------------------


def set_up(database_url: str, redis_url: str) -> Drainer:
    base = database_url
    if base.startswith(("postgresql://", "postgres://")):
        base = "postgresql+psycopg://" + base.split("://", 1)[1]
    recreate_schema(base, SCHEMA)
    url = url_in_schema(base, SCHEMA)
    sink = Sink()
    config = mail_config(url, redis_url, sink.port)
    app = demo.create_app(dict(config))
    create_tables_and_seed(app)
    with app.app_context():
        db.session.execute(sa.update(InstanceSettings).values(mail_batch_size=BATCH))
        db.session.commit()
        db.session.remove()
    bench = Bench(app=app, pg=psycopg.connect(libpq_url(url)), redis_url=redis_url)
    drainer = Drainer(app=app, bench=bench, config=config, sink=sink)
    drainer.reset()
    return drainer


def measure(drainer: Drainer, shapes: Sequence[tuple[int, int]],
            log: Any = None) -> list[report.Figure]:
    """Each shape drained by one, then two, workers; after each drain, the raw rate of
    the mail it sent last, which that drain's figure is set beside: on a shared machine
    the raw rate moves with everything else that runs, and a ceiling measured minutes
    away from its figure said more of the machine than of the drain."""
    figures: list[report.Figure] = []
    limit_name = "raw smtplib, one connection"
    for users, rows in shapes:
        shape = f"{users:,} users x {rows} row{'s' if rows > 1 else ''}"
        rates: dict[int, float] = {}
        for workers in WORKER_COUNTS:
            named = f"{workers} worker{'s' if workers > 1 else ''}"
            if log:
                log(f"drain: {shape}, {named}")
            total = drainer.seed(users, rows)
            seconds = drainer.drain(workers, users, total)
            rates[workers] = users / seconds
            raw = _raw_after(drainer, users, log, f"{shape}, after {named}")
            figures.append(report.figure("drain", f"{shape}, {named}", rates[workers],
                                         "mails/s", raw, limit_name))
        figures.append(report.figure("drain", f"{shape}, 2 workers vs 1", rates[2], "mails/s",
                                     rates[1], "1 worker"))
    return figures


def _raw_after(drainer: Drainer, users: int, log: Any, named: str) -> float:
    """The raw rate of the drain's last mail, sent again once per user of the shape."""
    stats = drainer.sink.stats()
    size = stats["bytes"] // max(1, stats["mails"])
    sample = drainer.sink.last()
    drainer.sink.reset()
    raw = raw_rate(drainer.sink.port, users, sample)
    raw_stats = drainer.sink.stats()
    if raw_stats["mails"] != users:
        sys.exit("the sink did not count every raw mail")
    if log:
        log(f"drain: {named}, raw smtplib ({users:,} mails of "
            f"{raw_stats['bytes'] // users:,} bytes; the drain's, {size:,})")
    return raw


def run(quick: bool) -> list[report.Figure]:
    shapes = TINY_SHAPES if report.tiny() else QUICK_SHAPES if quick else SHAPES
    services = report.service_args_defaults()
    drainer = set_up(services.database_url, services.redis_url)
    try:
        return measure(drainer, shapes, log=_log)
    finally:
        drainer.sink.stop()
        drainer.bench.pg.close()


def _log(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drain", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000 x 1 and 100 x 10 only")
    parser.add_argument("--shapes", help="users x rows, e.g. 5000x1,500x10")
    parser.add_argument("--worker-class", default=WORKER_CLASS,
                        help=f"the mail workers' RQ worker class (default: {WORKER_CLASS})")
    report.service_args(parser)
    args = parser.parse_args(argv)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if args.shapes:
        shapes = tuple(tuple(int(n) for n in s.split("x")) for s in args.shapes.split(","))
    drainer = set_up(args.database_url, args.redis_url)
    drainer.worker_class = args.worker_class
    try:
        figures = measure(drainer, shapes, log=_log)
    finally:
        drainer.sink.stop()
        drainer.bench.pg.close()
    print(report.table(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
