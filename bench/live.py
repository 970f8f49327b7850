"""The live badge benchmark: the summary poll and the push, under one gunicorn.

Run from the repository root (PostgreSQL and Redis must be up; gunicorn and gevent come
with the ``bench`` extra, ``wrk`` from ``apt-get install -y wrk``)::

    .venv/bin/python -m bench.live

It starts one gunicorn as the README advises for a wiki with many open streams
(``-w 2 -k gevent --worker-connections 7000``, ``WIKINOTIFY_STREAM_PER_PROCESS=6000``:
an open stream is handed off to its process's hub, not held by a thread) serving the
demo wiki plus a trivial endpoint (``bench/live_app.py``: a small JSON body with an
ETag, no session, no SQL), and measures, in this run and under that one configuration:

1. requests per second (``wrk``, 2 threads, 16 connections; a Python load generator
   when ``wrk`` is missing) of the summary answering 304 and 200, beside the trivial
   endpoint answering 304 and 200: the ceiling, and the ratio to it. Each rate is
   measured ``--trials`` times, the endpoints taking turns, and the median kept (the
   machine's other load comes and goes). For the record, also the trivial endpoint sent
   the session cookie (Flask decodes it for any signed-in request, before any view) and
   after the wiki's own account and site queries;
2. an ordinary request's latency, one at a time: p50 and p99 with no stream open, then
   with ``--streams`` open, of a page of the inbox (``GET /api/notifications``) as the
   badge asks it again (a kept page, docs/rules.md#kept-pages: the demo keeps them), and
   of the same page read afresh (the wiki's version forgotten before each, untimed, as
   an emit does);
3. the server's memory per open stream: the web processes' resident memory with the
   streams open less before, over the streams (``bench/stream_client.py`` holds them:
   one asyncio process, raw sockets);
4. the push: rounds in which this process, playing the worker, commits one new entry for
   each of ``--push-to`` of the readers with an open stream and publishes
   (``wikinotify.inbox.live.changed``, as a fan-out batch does); the time from the
   commit to each of their streams' next ``summary`` event, p50 and p99; then one round
   to every open stream at once.

Everything happens in a schema of its own (``wikinotify_bench_live``, recreated at start)
and a queue (so Redis keys and channels) of its own.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import flask
import psycopg
import sqlalchemy as sa
from flask_login import login_user
from redis import Redis

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
#: The README's advice for many open streams: gevent workers, each holding up to
#: STREAMS_PER_PROCESS streams among its WORKER_CONNECTIONS connections.
WORKERS, WORKER_CONNECTIONS, STREAMS_PER_PROCESS = 2, 7000, 6000
GUNICORN = os.path.join(os.path.dirname(sys.executable), "gunicorn")
SUMMARY = "/_notifications/api/notifications/summary"
TRIVIAL = "/bench/trivial"
SIGNED_IN = "/bench/signed-in"
INBOX = "/_notifications/api/notifications"
#: How long a stream may take to hear a change before it counts as lost.
LOST_AFTER = 30.0


# -- the server --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_gunicorn(database_url: str, redis_url: str, port: int, *, workers: int = WORKERS,
                   app: str = "bench.live_app:app",
                   env: dict[str, str] | None = None) -> subprocess.Popen:
    if not os.path.exists(GUNICORN):
        sys.exit("gunicorn is missing: .venv/bin/pip install -e '.[bench]'")
    env = {**os.environ, "FLASK_SECRET_KEY": SECRET,
           "FLASK_SQLALCHEMY_DATABASE_URI": database_url,
           "FLASK_WIKINOTIFY_REDIS_URL": redis_url, "FLASK_WIKINOTIFY_QUEUE": QUEUE,
           "FLASK_WIKINOTIFY_STREAM_PER_PROCESS": str(STREAMS_PER_PROCESS),
           # Opening 10,000 streams on a busy machine may take longer than a stream's
           # default ten minutes, after which a browser would reconnect: keep them.
           "FLASK_WIKINOTIFY_STREAM_MAX_AGE": "86400", **(env or {})}
    command = [GUNICORN, "-w", str(workers), "-k", "gevent",
               "--worker-connections", str(WORKER_CONNECTIONS),
               "-b", f"127.0.0.1:{port}", "--log-level", "warning", "--backlog", "4096",
               # Open streams end only at their next write: do not wait for them.
               "--graceful-timeout", "3", app]
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


def raise_file_limit() -> None:
    """As many open files as the system allows this process and what it starts (a
    stream is a socket at each end)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def server_workers(server: subprocess.Popen) -> list[int]:
    """The process ids of gunicorn's workers."""
    try:
        with open(f"/proc/{server.pid}/task/{server.pid}/children") as file:
            return [int(pid) for pid in file.read().split()]
    except OSError:
        return []


def server_rss(server: subprocess.Popen) -> int:
    """The resident bytes of gunicorn's master and its workers."""
    total = 0
    for pid in [server.pid, *server_workers(server)]:
        rss = figures._proc_value(f"/proc/{pid}/status", "VmRSS")
        total += int(rss.split()[0]) * 1024 if rss else 0
    return total


def cpu_seconds(pids: Sequence[int]) -> float:
    """The CPU seconds (user and system) these processes have used so far."""
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as file:
                fields = file.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks / os.sysconf("SC_CLK_TCK")


def get_body(port: int, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().read()
    finally:
        conn.close()


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
    return session_cookies(app, [user_id])[0]


def session_cookies(app, user_ids: Sequence[int]) -> list[str]:
    """:func:`session_cookie` of each, the accounts loaded in one query."""
    cookies = []
    serializer = app.session_interface.get_signing_serializer(app)
    with app.test_request_context(environ_base={"REMOTE_ADDR": "127.0.0.1"}):
        users = {u.id: u for u in db.session.scalars(sa.select(User).where(
            User.id.in_(list(user_ids))))}
        for user_id in user_ids:
            flask.session.clear()
            assert login_user(users[user_id])
            cookies.append(f"{app.config['SESSION_COOKIE_NAME']}="
                           f"{serializer.dumps(dict(flask.session))}")
        db.session.remove()
    return cookies


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


def collections(port: int, workers: Sequence[int]) -> dict[int, dict]:
    """Each worker's garbage collections so far (``/bench/gc``), asked on new connections
    until every worker has answered (the kernel hands each to either)."""
    found: dict[int, dict] = {}
    for _ in range(100):
        if len(found) == len(workers):
            break
        answer = json.loads(get_body(port, "/bench/gc"))
        found[answer["pid"]] = answer
    return found


def collected(before: dict[int, dict], after: dict[int, dict]) -> str:
    """The oldest generation's collections between two :func:`collections`, per worker."""
    said = []
    for pid, now in after.items():
        was = before.get(pid, {"collections": {"2": [0, 0.0, 0.0]}})["collections"]["2"]
        count, seconds, longest = now["collections"]["2"]
        said.append(f"{count - was[0]} ({(seconds - was[1]) * 1000:.0f} ms, longest "
                    f"{longest * 1000:.0f}; {now['objects']:,} objects)")
    return "; ".join(said)


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


# -- latency of an ordinary request -----------------------------------------------------


def latencies(port: int, path: str, headers: dict[str, str], count: int,
              before_each: Callable[[], object] | None = None) -> list[float]:
    """``count`` requests one after another on one keep-alive connection; ``before_each``
    called before each, untimed."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    taken = []
    try:
        for _ in range(count):
            if before_each is not None:
                before_each()
            start = time.perf_counter()
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            response.read()
            taken.append(time.perf_counter() - start)
            assert response.status == 200, response.status
    finally:
        conn.close()
    return taken


# -- open streams and the push ---------------------------------------------------------------


class StreamClient:
    """``bench/stream_client.py`` in a process of its own, holding one stream per cookie."""

    def __init__(self, port: int, cookies: Sequence[str]) -> None:
        self._file = tempfile.NamedTemporaryFile("w", suffix=".cookies")  # noqa: SIM115
        self._file.write("\n".join(cookies) + "\n")
        self._file.flush()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.stream_client", str(port), self._file.name],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        #: Its CPU seconds so far, as of its last answer.
        self.cpu = 0.0

    def _answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the stream client stopped (exit {self.process.wait()})")
        return json.loads(line)

    def ask(self, line: str) -> dict:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        answer = self._answer()
        self.cpu = answer["cpu"]
        return answer

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.write("quit\n")
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self._file.close()


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


def push_round(app, client: StreamClient, user_ids: Sequence[int], chosen: Sequence[int],
               round_: int) -> list[float]:
    """One fan-out batch to the readers of streams ``chosen``: commit → each one's event."""
    client.ask("mark " + ",".join(map(str, chosen)))
    new_entries(app, [user_ids[n] for n in chosen], round_)
    committed = time.monotonic()
    live.changed(app, [str(user_ids[n]) for n in chosen])
    answer = client.ask(f"collect {LOST_AFTER}")
    heard = answer["heard"]
    if answer["closed"]:
        raise SystemExit(f"round {round_}: {len(answer['closed'])} streams closed: "
                         f"{answer['closed'][:5]}")
    if None in heard:
        missed = [n for n, at in zip(chosen, heard, strict=True) if at is None]
        raise SystemExit(f"round {round_}: {len(missed)} streams never heard the change "
                         f"(streams {missed[:20]})")
    return [at - committed for at in heard]


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def stages(streams: int) -> list[int]:
    """The numbers of open streams the push is measured at, up to ``streams``."""
    return [n for n in (1000, 2000, 5000) if n < streams] + [streams]


@dataclass
class Held:
    """What ``streams`` open streams cost, and how fast they hear a change."""

    streams: int
    open_seconds: float
    bytes_per_stream: float
    ordinary_alone: list[float]
    ordinary_held: list[float]
    #: The same page read afresh (:func:`afresh`), with none open and with them.
    afresh_alone: list[float]
    afresh_held: list[float]
    #: Per number of open streams, the push's latencies to ``push_to`` readers a round.
    push: dict[int, list[float]]
    push_to: int
    everyone: list[float]
    #: Per number of open streams, the CPU seconds a reader told cost during its rounds:
    #: the server's workers (the streams' checks and keep-alives included) and the client.
    server_cpu: dict[int, float]
    client_cpu: dict[int, float]


def measure_streams(app, port: int, server: subprocess.Popen, cookie: str,
                    user_ids: Sequence[int], args: argparse.Namespace) -> Held:
    ordinary = (INBOX, {"Cookie": cookie})
    latencies(port, *ordinary, 20)  # warm: the pool's connections, the code paths
    alone = latencies(port, *ordinary, args.requests)
    afresh_alone = afresh(app, port, ordinary, args.afresh)
    time.sleep(1)
    before = server_rss(server)
    client = StreamClient(port, session_cookies(app, user_ids))
    push: dict[int, list[float]] = {}
    server_cpu: dict[int, float] = {}
    client_cpu: dict[int, float] = {}
    round_ = 0
    workers = server_workers(server)
    try:
        open_seconds = 0.0
        for count in stages(len(user_ids)):
            print(f"... opening streams up to {count:,}", file=sys.stderr, flush=True)
            open_seconds += client.ask(f"open {count}")["seconds"]
            push_to = min(args.push_to, count)
            print(f"... push to {push_to:,} of {count:,} open streams, {args.rounds} rounds",
                  file=sys.stderr, flush=True)
            push[count] = []
            profiling = profile(workers, args.profile) if args.profile and count == len(
                user_ids) else None
            gc_before = collections(port, workers)
            server_before, client_before = cpu_seconds(workers), client.cpu
            for _ in range(args.rounds):
                start = round_ * push_to % count
                chosen = [(start + n) % count for n in range(push_to)]
                push[count] += push_round(app, client, user_ids, chosen, round_)
                round_ += 1
            told = args.rounds * push_to
            server_cpu[count] = (cpu_seconds(workers) - server_before) / told
            client_cpu[count] = (client.cpu - client_before) / told
            if profiling:
                stop_profile(profiling)
            print(f"... oldest-generation collections during the rounds, per worker: "
                  f"{collected(gc_before, collections(port, workers))}", file=sys.stderr,
                  flush=True)
            print(f"... push p50 {percentile(push[count], 50) * 1000:.0f} ms, p99 "
                  f"{percentile(push[count], 99) * 1000:.0f} ms; CPU a reader told: server "
                  f"{server_cpu[count] * 1000:.3f} ms, client {client_cpu[count] * 1000:.3f} "
                  f"ms; server {(server_rss(server) - before) / count / 1024:.1f} KB per "
                  f"stream; load average {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
        time.sleep(2)  # let what opening them allocated settle
        after = server_rss(server)
        held = latencies(port, *ordinary, args.requests)
        afresh_held = afresh(app, port, ordinary, args.afresh)
        print(f"... push to every one of {len(user_ids):,} at once", file=sys.stderr,
              flush=True)
        everyone = push_round(app, client, user_ids, range(len(user_ids)), round_)
    finally:
        client.close()
    return Held(len(user_ids), open_seconds, (after - before) / len(user_ids),
                alone, held, afresh_alone, afresh_held, push, args.push_to, everyone,
                server_cpu, client_cpu)


def afresh(app, port: int, ordinary: tuple[str, dict[str, str]], count: int) -> list[float]:
    """The inbox page read afresh ``count`` times: before each, untimed, the wiki's
    version is forgotten (as an emit does at the wiki's commit), so no kept page
    answers it."""
    forget = live.forgetting_wiki(app)
    redis = Redis.from_url(app.config["WIKINOTIFY_REDIS_URL"])
    try:
        return latencies(port, *ordinary, count, before_each=lambda: forget(redis))
    finally:
        redis.close()


def profile(workers: Sequence[int], directory: str) -> list[subprocess.Popen]:
    """py-spy recording each worker (speedscope files in ``directory``) until stopped."""
    py_spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    os.makedirs(directory, exist_ok=True)
    return [subprocess.Popen([py_spy, "record", "--pid", str(pid), "--rate", "250",
                              "--format", "speedscope", "--nonblocking",
                              "-o", os.path.join(directory, f"worker-{pid}.json")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for pid in workers]


def stop_profile(recorders: Sequence[subprocess.Popen]) -> None:
    for recorder in recorders:
        recorder.send_signal(signal.SIGINT)  # py-spy writes its file and ends
    for recorder in recorders:
        recorder.wait(timeout=60)


# -- the run -------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.live", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=4, help="per rate (default 4)")
    parser.add_argument("--trials", type=int, default=5,
                        help="times each rate is measured, taking turns (default 5)")
    parser.add_argument("--streams", type=int, default=10_000,
                        help="open streams (10,000); 0 measures the request rates alone")
    parser.add_argument("--push-to", type=int, default=1000,
                        help="readers one push round reaches (1,000: a fan-out batch)")
    parser.add_argument("--rounds", type=int, default=10, help="push rounds (10)")
    # 3,000: a kept page takes half a millisecond, so 500 were a quarter of a second, whose
    # p99 (the 5th-slowest) one check's read or the machine's other load decided.
    parser.add_argument("--requests", type=int, default=3000,
                        help="ordinary requests timed, with and without streams (3,000)")
    parser.add_argument("--afresh", type=int, default=1000,
                        help="the same page read afresh, with and without streams (1,000)")
    parser.add_argument("--profile", metavar="DIR",
                        help="py-spy the workers during the largest stage's rounds "
                             "(speedscope files in DIR)")
    figures.service_args(parser)
    args = parser.parse_args(argv)
    args.push_to = min(args.push_to, args.streams)
    return args


def set_up(args: argparse.Namespace):
    base = args.database_url
    if base.startswith(("postgresql://", "postgres://")):
        base = "postgresql+psycopg://" + base.split("://", 1)[1]
    recreate_schema(base, SCHEMA)
    url = url_in_schema(base, SCHEMA)
    app = create_app({"SECRET_KEY": SECRET, "SQLALCHEMY_DATABASE_URI": url,
                      "WIKINOTIFY_REDIS_URL": args.redis_url, "WIKINOTIFY_QUEUE": QUEUE})
    create_tables_and_seed(app)
    # A stopped run's stream places and summary versions: the accounts are new.
    redis = Redis.from_url(args.redis_url)
    stale = list(redis.scan_iter(f"wikinotify:{QUEUE}:*", count=1000))
    for start in range(0, len(stale), 1000):
        redis.delete(*stale[start:start + 1000])
    redis.close()
    bench = Bench(app=app, pg=psycopg.connect(libpq_url(url)), redis_url=args.redis_url)
    ensure_accounts(bench, args.streams + 1)  # one for the polls, one per stream
    return app, url, bench


def measure(args: argparse.Namespace) -> tuple[Rates, Held | None]:
    raise_file_limit()
    app, url, bench = set_up(args)
    port = free_port()
    server = start_gunicorn(url, args.redis_url, port)
    try:
        cookie = session_cookie(app, bench.accounts[0])
        print(f"... request rates ({args.trials} x {args.seconds} s each)", file=sys.stderr,
              flush=True)
        rates = measure_rates(port, cookie, args.seconds, args.trials)
        held = measure_streams(app, port, server, cookie,
                               bench.accounts[1: args.streams + 1], args) if args.streams else None
    finally:
        server.terminate()
        server.wait(timeout=30)
        bench.pg.close()
    return rates, held


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rates, held = measure(args)
    report(args, rates, held)
    return 0


def run(quick: bool) -> list[figures.Figure]:
    """For ``python -m bench``: quick is 3 x 2 s per rate, 2,000 streams, 5 push rounds."""
    if figures.tiny():
        argv = ["--seconds", "1", "--trials", "1", "--streams", "10", "--rounds", "2",
                "--requests", "20", "--afresh", "10"]
    elif quick:
        argv = ["--seconds", "2", "--trials", "3", "--streams", "2000", "--rounds", "5",
                "--requests", "200", "--afresh", "100"]
    else:
        argv = []
    args = parse_args(argv)
    rates, held = measure(args)
    report(args, rates, held)
    assert held is not None  # every size above opens streams
    ceiling = f"trivial endpoint, {rates.tool}"
    n = f"{held.streams:,} open streams"
    return [
        figures.figure("live", "summary 304 (unchanged)", rates.summary_304, "req/s",
                       rates.trivial_304, ceiling),
        figures.figure("live", "summary 200 (full body)", rates.summary_200, "req/s",
                       rates.trivial_200, ceiling),
        *[figures.figure("live", f"push p{p}, {min(held.push_to, count):,} of {count:,} "
                         "open streams", percentile(values, p) * 1000, "ms",
                         *((250, "target") if p == 99 else ()))
          for count, values in held.push.items() for p in (50, 99)],
        # /proc counts CPU in clock ticks (10 ms): a stage whose workers spent less (the
        # --tiny sizes) measured nothing, and a zero is not a figure.
        *[figures.figure("live", f"server CPU a reader told, {count:,} open streams",
                         cpu * 1000, "ms") for count, cpu in held.server_cpu.items() if cpu > 0],
        figures.figure("live", f"push p99, all {n} at once",
                       percentile(held.everyone, 99) * 1000, "ms"),
        figures.figure("live", f"server memory per stream, {n}",
                       held.bytes_per_stream / 1024, "KB", 16, "target"),
        *[figures.figure("live", f"inbox page{kind} p99, {n}", percentile(held_, 99) * 1000,
                         "ms", percentile(alone, 99) * 1000, "the same with no stream open")
          for kind, alone, held_ in (("", held.ordinary_alone, held.ordinary_held),
                                     (" read afresh", held.afresh_alone, held.afresh_held))],
        figures.figure("live", f"seconds to open {n}", held.open_seconds, "s"),
    ]


def report(args: argparse.Namespace, rates: Rates, held: Held | None) -> None:
    print(f"wikinotify live benchmark: gunicorn -w {WORKERS} -k gevent --worker-connections "
          f"{WORKER_CONNECTIONS}, PostgreSQL, {os.cpu_count()} CPUs, load by {rates.tool} (2 "
          f"threads, 16 connections), median of {args.trials} x {args.seconds} s per rate, "
          f"load average {os.getloadavg()[0]:.1f}\n", file=sys.stderr)
    print(f"{'':24} | {'summary req/s':>13} | {'trivial req/s':>13} | {'ratio':>5}",
          file=sys.stderr)
    for label, ours, ceiling, note in (
        ("304 (unchanged)", rates.summary_304, rates.trivial_304, ""),
        ("200 (full body)", rates.summary_200, rates.trivial_200, ""),
        ("304, session cookie", rates.summary_304, rates.trivial_cookie_304,
         "  (trivial sent the session cookie, which Flask decodes)"),
        ("304, host floor", rates.summary_304, rates.signed_in_304,
         "  (trivial after the wiki's own account + site queries)"),
    ):
        print(f"{label:24} | {ours:>13,.0f} | {ceiling:>13,.0f} | {ours / ceiling:>5.0%}{note}",
              file=sys.stderr)
    if held is None:
        return
    ms = {name: (percentile(values, 50) * 1000, percentile(values, 99) * 1000)
          for name, values in (("alone", held.ordinary_alone), ("held", held.ordinary_held),
                               ("afresh alone", held.afresh_alone),
                               ("afresh held", held.afresh_held), ("everyone", held.everyone))}
    print(f"\n{held.streams:,} streams opened in {held.open_seconds:.0f} s; server memory "
          f"{held.bytes_per_stream / 1024:.1f} KB per open stream\n"
          f"inbox page, one at a time: p50 {ms['alone'][0]:.2f} / p99 {ms['alone'][1]:.2f} ms "
          f"with no stream, p50 {ms['held'][0]:.2f} / p99 {ms['held'][1]:.2f} ms with "
          f"{held.streams:,} open ({ms['held'][1] / ms['alone'][1]:.2f}x)\n"
          f"the same page read afresh: p50 {ms['afresh alone'][0]:.2f} / p99 "
          f"{ms['afresh alone'][1]:.2f} ms with no stream, p50 {ms['afresh held'][0]:.2f} / "
          f"p99 {ms['afresh held'][1]:.2f} ms with {held.streams:,} open "
          f"({ms['afresh held'][1] / ms['afresh alone'][1]:.2f}x)\n"
          + "".join(
              f"push, commit -> `summary` event, {min(held.push_to, count):,} readers a "
              f"round of {count:,} open streams, {args.rounds} rounds: p50 "
              f"{percentile(values, 50) * 1000:.0f} ms, p99 "
              f"{percentile(values, 99) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms; "
              f"CPU a reader told: server {held.server_cpu[count] * 1000:.3f} ms, client "
              f"{held.client_cpu[count] * 1000:.3f} ms\n"
              for count, values in held.push.items())
          + f"push to all {held.streams:,} at once: p50 {ms['everyone'][0]:.0f} ms, p99 "
          f"{ms['everyone'][1]:.0f} ms", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
