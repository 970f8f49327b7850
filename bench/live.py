"""The live badge benchmark: the summary poll and the push, under one gunicorn.

Run from the repository root (PostgreSQL and Redis must be up; gunicorn comes with the
``bench`` extra, ``wrk`` from ``apt-get install -y wrk``)::

    .venv/bin/python -m bench.live

It starts one gunicorn (``-w 2 -k gthread --threads 128``: long-lived streams hold a thread
each) serving the demo wiki plus a trivial endpoint (``bench/live_app.py``: a small JSON
body with an ETag, no session, no SQL), and measures, in this run and under that one
configuration:

1. requests per second (``wrk``, 2 threads, 16 connections; a Python load generator
   when ``wrk`` is missing) of the summary answering 304 and 200, beside the trivial
   endpoint answering 304 and 200: the ceiling, and the ratio to it. Each rate is
   measured ``--trials`` times, the endpoints taking turns, and the median kept (the
   machine's other load comes and goes). For the record, also the trivial endpoint sent
   the session cookie (Flask decodes it for any signed-in request, before any view) and
   after the wiki's own account and site queries;
2. the push: 200 streams open (``GET /stream``, 200 accounts), then rounds in which this
   process, playing the worker, commits one new entry for each of the 200 and publishes
   (``wikinotify.inbox.live.changed``); the time from the commit to each stream's next
   ``summary`` event, p50 and p99.

Everything happens in a schema of its own (``wikinotify_bench_live``, recreated at start)
and a queue (so Redis keys and channels) of its own.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import flask
import psycopg
import sqlalchemy as sa
from flask_login import login_user

from bench import report as figures
from bench.fanout import (
    ROOT,
    Bench,
    create_tables_and_seed,
    ensure_accounts,
    libpq_url,
    recreate_schema,
    url_in_schema,
)
from demo import create_app
from demo.models import User, db
from wikinotify.inbox import live
from wikinotify.models import Notification

SCHEMA = figures.scoped("wikinotify_bench_live")
QUEUE = figures.scoped("wikinotify-bench-live")
SECRET = "bench-live-secret"
WORKERS, THREADS = 2, 128
GUNICORN = os.path.join(os.path.dirname(sys.executable), "gunicorn")
SUMMARY = "/_notifications/api/notifications/summary"
TRIVIAL = "/bench/trivial"
SIGNED_IN = "/bench/signed-in"
STREAM = "/_notifications/stream"
#: How long a stream may take to hear a change before it counts as lost.
LOST_AFTER = 10.0


# -- the server --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_gunicorn(database_url: str, redis_url: str, port: int) -> subprocess.Popen:
    if not os.path.exists(GUNICORN):
        sys.exit("gunicorn is missing: .venv/bin/pip install -e '.[bench]'")
    env = {**os.environ, "FLASK_SECRET_KEY": SECRET,
           "FLASK_SQLALCHEMY_DATABASE_URI": database_url,
           "FLASK_WIKINOTIFY_REDIS_URL": redis_url, "FLASK_WIKINOTIFY_QUEUE": QUEUE,
           # Every thread may hold a stream: the push is measured alone, and its streams
           # need not share out evenly between the two workers to all be let in.
           "FLASK_WIKINOTIFY_STREAM_PER_PROCESS": str(THREADS)}
    command = [GUNICORN, "-w", str(WORKERS), "-k", "gthread", "--threads", str(THREADS),
               "-b", f"127.0.0.1:{port}", "--log-level", "warning",
               # Open streams end only at their next write: do not wait for them.
               "--graceful-timeout", "3", "bench.live_app:app"]
    server = subprocess.Popen(command, cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            get(port, TRIVIAL)
            return server
        except OSError:
            time.sleep(0.2)
    server.terminate()
    sys.exit("gunicorn did not start")


def get(port: int, path: str, **headers: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        response.read()
        return response
    finally:
        conn.close()


def session_cookie(app, user_id: int) -> str:
    """The session cookie of ``user_id`` signed in by Flask-Login (``login_user``) from
    127.0.0.1 with no User-Agent, as the load generators connect: the session's
    identifier matches theirs, as a browser's does after a real sign-in."""
    with app.test_request_context(environ_base={"REMOTE_ADDR": "127.0.0.1"}):
        assert login_user(db.session.get(User, user_id))
        value = app.session_interface.get_signing_serializer(app).dumps(dict(flask.session))
        db.session.remove()
    return f"{app.config['SESSION_COOKIE_NAME']}={value}"


# -- request rates -------------------------------------------------------------------------


def wrk_rate(port: int, path: str, headers: dict[str, str], seconds: int) -> float:
    args = ["wrk", "-t2", "-c16", f"-d{seconds}s"]
    for name, value in headers.items():
        args += ["-H", f"{name}: {value}"]
    out = subprocess.run([*args, f"http://127.0.0.1:{port}{path}"], capture_output=True,
                         text=True, check=True).stdout
    if "Non-2xx or 3xx" in out:
        sys.exit(f"wrk saw errors on {path}:\n{out}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def python_rate(port: int, path: str, headers: dict[str, str], seconds: int) -> float:
    """16 keep-alive connections in threads: a weaker generator than wrk (it competes with
    the server for the 2 cores), but the same for both endpoints."""
    done = [0] * 16
    stop = time.monotonic() + seconds

    def hammer(slot: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        while time.monotonic() < stop:
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            response.read()
            assert response.status in (200, 304), response.status
            done[slot] += 1
        conn.close()

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / seconds


@dataclass
class Rates:
    summary_304: float
    summary_200: float
    trivial_304: float
    trivial_200: float
    trivial_cookie_304: float
    signed_in_304: float
    tool: str


def measure_rates(port: int, cookie: str, seconds: int, trials: int) -> Rates:
    """Each rate ``trials`` times, the endpoints taking turns (so a burst of other load on
    the machine falls on all of them alike), and the median of each."""
    tool = "wrk" if shutil.which("wrk") else "python"
    if tool == "python":
        print("wrk is not installed (apt-get install -y wrk); using the Python load "
              "generator, which shares the 2 cores with the server", file=sys.stderr)
    rate = wrk_rate if tool == "wrk" else python_rate
    summary_etag = get(port, SUMMARY, Cookie=cookie).getheader("ETag")
    trivial_etag = get(port, TRIVIAL).getheader("ETag")
    signed_in_etag = get(port, SIGNED_IN, Cookie=cookie).getheader("ETag")
    assert get(port, SUMMARY, Cookie=cookie, **{"If-None-Match": summary_etag}).status == 304
    assert get(port, TRIVIAL, **{"If-None-Match": trivial_etag}).status == 304
    requests = {
        "summary_304": (SUMMARY, {"Cookie": cookie, "If-None-Match": summary_etag}),
        "trivial_304": (TRIVIAL, {"If-None-Match": trivial_etag}),
        "summary_200": (SUMMARY, {"Cookie": cookie}),
        "trivial_200": (TRIVIAL, {}),
        "trivial_cookie_304": (TRIVIAL, {"Cookie": cookie, "If-None-Match": trivial_etag}),
        "signed_in_304": (SIGNED_IN, {"Cookie": cookie, "If-None-Match": signed_in_etag}),
    }
    measured: dict[str, list[float]] = {name: [] for name in requests}
    for _ in range(trials):
        for name, (path, headers) in requests.items():
            measured[name].append(rate(port, path, headers, seconds))
    return Rates(**{name: statistics.median(values) for name, values in measured.items()},
                 tool=tool)


# -- push latency ----------------------------------------------------------------------------


class Streams:
    """Open ``GET /stream`` connections, read in one thread with a selector."""

    def __init__(self, port: int, cookies: Sequence[str]) -> None:
        self.selector = selectors.DefaultSelector()
        self.seen = [0] * len(cookies)  # summary events heard, per stream
        self.heard_at: list[float | None] = [None] * len(cookies)
        self.socks = []
        for n, cookie in enumerate(cookies):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(f"GET {STREAM} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\n"
                         "Accept: text/event-stream\r\n\r\n".encode())
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ, n)
            self.socks.append(sock)

    def pump(self, until: float) -> None:
        """Read what arrives until ``until`` (``time.perf_counter()``)."""
        while (left := until - time.perf_counter()) > 0:
            for key, _ in self.selector.select(timeout=min(left, 0.05)):
                data = key.fileobj.recv(65536)
                if not data:
                    raise SystemExit(f"stream {key.data} was closed by the server")
                events = data.count(b"event: summary")
                if events:
                    self.seen[key.data] += events
                    if self.heard_at[key.data] is None:
                        self.heard_at[key.data] = time.perf_counter()

    def wait_for(self, count: int, timeout: float) -> bool:
        deadline = time.perf_counter() + timeout
        while min(self.seen) < count and time.perf_counter() < deadline:
            self.pump(time.perf_counter() + 0.05)
        return min(self.seen) >= count

    def close(self) -> None:
        for sock in self.socks:
            self.selector.unregister(sock)
            sock.close()
        self.selector.close()


def new_entries(app, user_ids: Sequence[int], round_: int) -> None:
    """One new unread entry per user, in one INSERT and one commit (a fan-out batch)."""
    with app.app_context():
        db.session.execute(sa.insert(Notification), [
            {"user_id": str(u), "site_id": None, "category": "watchedPage",
             "variant": "edited", "variants": ",edited,", "group_key": f"bench-{round_}",
             "data": {}, "count": 1, "last_event_id": round_, "in_app": True}
            for u in user_ids
        ])
        db.session.commit()
        db.session.remove()


def measure_push(app, port: int, user_ids: Sequence[int], rounds: int) -> list[float]:
    streams = Streams(port, [session_cookie(app, u) for u in user_ids])
    try:
        if not streams.wait_for(1, 60):
            raise SystemExit(f"only {sum(1 for s in streams.seen if s)} of {len(user_ids)} "
                             "streams opened")
        latencies: list[float] = []
        for round_ in range(rounds):
            streams.pump(time.perf_counter() + 0.5)  # let stragglers settle
            before = list(streams.seen)
            streams.heard_at = [None] * len(user_ids)
            new_entries(app, user_ids, round_)
            committed = time.perf_counter()
            live.changed(app, [str(u) for u in user_ids])
            deadline = committed + LOST_AFTER
            while any(s == b for s, b in zip(streams.seen, before, strict=True)):
                if time.perf_counter() > deadline:
                    raise SystemExit(f"round {round_}: some streams never heard the change")
                streams.pump(time.perf_counter() + 0.05)
            latencies += [at - committed for at in streams.heard_at if at is not None]
        return latencies
    finally:
        streams.close()


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


# -- the run -------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.live", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=4, help="per rate (default 4)")
    parser.add_argument("--trials", type=int, default=5,
                        help="times each rate is measured, taking turns (default 5)")
    parser.add_argument("--streams", type=int, default=200, help="open streams (200)")
    parser.add_argument("--rounds", type=int, default=10, help="push rounds (10)")
    figures.service_args(parser)
    return parser.parse_args(argv)


def set_up(args: argparse.Namespace):
    base = args.database_url
    if base.startswith(("postgresql://", "postgres://")):
        base = "postgresql+psycopg://" + base.split("://", 1)[1]
    recreate_schema(base, SCHEMA)
    url = url_in_schema(base, SCHEMA)
    app = create_app({"SECRET_KEY": SECRET, "SQLALCHEMY_DATABASE_URI": url,
                      "WIKINOTIFY_REDIS_URL": args.redis_url, "WIKINOTIFY_QUEUE": QUEUE})
    create_tables_and_seed(app)
    bench = Bench(app=app, pg=psycopg.connect(libpq_url(url)), redis_url=args.redis_url)
    ensure_accounts(bench, args.streams)
    return app, url, bench


def measure(args: argparse.Namespace) -> tuple[Rates, list[float]]:
    app, url, bench = set_up(args)
    port = free_port()
    server = start_gunicorn(url, args.redis_url, port)
    try:
        print(f"... request rates ({args.trials} x {args.seconds} s each)", file=sys.stderr,
              flush=True)
        rates = measure_rates(port, session_cookie(app, bench.accounts[0]), args.seconds,
                              args.trials)
        print(f"... push to {args.streams} open streams, {args.rounds} rounds",
              file=sys.stderr, flush=True)
        latencies = measure_push(app, port, bench.accounts[: args.streams], args.rounds)
    finally:
        server.terminate()
        server.wait(timeout=30)
        bench.pg.close()
    return rates, latencies


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rates, latencies = measure(args)
    report(args, rates, latencies)
    return 0


def run(quick: bool) -> list[figures.Figure]:
    """For ``python -m bench``: quick is 3 x 2 s per rate and 5 push rounds."""
    if figures.tiny():
        argv = ["--seconds", "1", "--trials", "1", "--streams", "10", "--rounds", "2"]
    elif quick:
        argv = ["--seconds", "2", "--trials", "3", "--rounds", "5"]
    else:
        argv = []
    args = parse_args(argv)
    rates, latencies = measure(args)
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    ceiling = f"trivial endpoint, {rates.tool}"
    return [
        figures.figure("live", "summary 304 (unchanged)", rates.summary_304, "req/s",
                       rates.trivial_304, ceiling),
        figures.figure("live", "summary 200 (full body)", rates.summary_200, "req/s",
                       rates.trivial_200, ceiling),
        figures.figure("live", f"push p50, {args.streams} open streams", p50 * 1000, "ms"),
        figures.figure("live", f"push p99, {args.streams} open streams", p99 * 1000, "ms",
                       1000, "target"),
    ]


def report(args: argparse.Namespace, rates: Rates, latencies: Sequence[float]) -> None:
    print(f"wikinotify live benchmark: gunicorn -w {WORKERS} -k gthread --threads {THREADS}, "
          f"PostgreSQL, {os.cpu_count()} CPUs, load by {rates.tool} (2 threads, 16 "
          f"connections), median of {args.trials} x {args.seconds} s per rate\n")
    print(f"{'':24} | {'summary req/s':>13} | {'trivial req/s':>13} | {'ratio':>5}")
    for label, ours, ceiling in (("304 (unchanged)", rates.summary_304, rates.trivial_304),
                                 ("200 (full body)", rates.summary_200, rates.trivial_200)):
        print(f"{label:24} | {ours:>13,.0f} | {ceiling:>13,.0f} | {ours / ceiling:>5.0%}")
    print(f"{'304, session cookie':24} | {rates.summary_304:>13,.0f} | "
          f"{rates.trivial_cookie_304:>13,.0f} | "
          f"{rates.summary_304 / rates.trivial_cookie_304:>5.0%}  "
          "(trivial sent the session cookie, which Flask decodes)")
    print(f"{'304, host floor':24} | {rates.summary_304:>13,.0f} | "
          f"{rates.signed_in_304:>13,.0f} | {rates.summary_304 / rates.signed_in_304:>5.0%}  "
          "(trivial after the wiki's own account + site queries)")
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    print(f"\npush: commit -> `summary` event on each of {args.streams} open streams, "
          f"{args.rounds} rounds ({len(latencies)} events): p50 {p50 * 1000:.0f} ms, "
          f"p99 {p99 * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms, "
          f"mean {statistics.mean(latencies) * 1000:.0f} ms")
    share = rates.summary_304 / rates.trivial_304
    print("\ntargets:")
    print(f"  summary 304 >= 50% of the trivial endpoint's rate: {share:.0%}, "
          f"{'met' if share >= 0.5 else 'MISSED'}")
    print(f"  p99 push latency < 1 s with {args.streams} open streams: {p99 * 1000:.0f} ms, "
          f"{'met' if p99 < 1 else 'MISSED'}")


if __name__ == "__main__":
    sys.exit(main())
