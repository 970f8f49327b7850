"""One event, many workers: the fan-out of one edit to 200,000 watchers, split into ranges
of 50,000 (``WIKINOTIFY_FANOUT_RANGE_SIZE``), with one and with two ``rq worker`` processes.

Run from the repository root (PostgreSQL and Redis up)::

    python -m bench.fanout_split            # 200,000 watchers, ranges of 50,000
    python -m bench.fanout_split --quick    # 40,000 watchers, ranges of 10,000

Three runs of the same edit, each from an empty inbox: unsplit with one worker (the path
of an event below the range size), split with one worker, split with two. Each figure is
the event's rate from its INSERT (``created_at``) to the commit that marks it processed
(``processed_at``), both stamped by PostgreSQL; the workers are running before the edit, as
in production. Beside each run it prints the CPU seconds the workers and their PostgreSQL
backends spent, read from /proc (PostgreSQL is local here), and how busy the whole machine
was: with two cores shared by the database and the workers, that is what bounds the second
worker's gain.

The limits: the split run with one worker against the unsplit one (what splitting costs),
and two workers against twice one worker's split rate (linear scaling). Everything happens
in a schema of its own and on a queue of its own; accounts, watches and the page are made
with bench/fanout.py's set-up functions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rq import Queue
from rq.registry import FinishedJobRegistry
from sqlalchemy.engine import make_url

from bench import report
from bench import workers as bench_workers
from bench.fanout import (
    ACTOR,
    DEFAULT_DATABASE_URL,
    DEFAULT_REDIS_URL,
    RQ,
    Bench,
    add_page,
    edit,
    ensure_accounts,
    fresh_bench,
)
from wikinotify import queue as wq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = report.scoped("wikinotify_bench_split")
QUEUE = report.scoped("wikinotify-bench-split")
#: (watchers, range size): full, quick, and the smoke test's toy size.
FULL, QUICK, TINY = (200_000, 50_000), (40_000, 10_000), (400, 100)
PATH = "bench/fanout-split"
#: How long one fan-out may take before the benchmark gives up on it.
TIMEOUT = 1800
#: The settings every worker gets, as FLASK_* variables (the range size is per run). A lone
#: worker splits too: what a split costs one worker is what this measures (by default a
#: worker alone on the queue does not split, docs/benchmarks.md#the-fan-out).
SETTINGS = {"WIKINOTIFY_MAIL_ENABLED": True, "WIKINOTIFY_DISPATCH_BUDGET": 3600,
            "WIKINOTIFY_FANOUT_SPLIT_ALONE": True}
#: /proc/<pid>/stat's utime, stime, cutime and cstime (fields 14 to 17), counted from the
#: state (field 3): a process's CPU and its reaped children's (a forked work horse, an
#: exited PostgreSQL backend).
CPU_FIELDS = slice(11, 15)
TICKS = os.sysconf("SC_CLK_TCK")


# A worker's CPU: RQ's default worker forks a work horse per job, and a horse still busy
# when the event is marked processed is not yet in any count. This wrapper's only child is
# `rq worker`; it forwards SIGTERM, waits, and writes RUSAGE_CHILDREN's user + system
# seconds, which include every process of the tree that was waited for (the horses).
_CPU_WRAPPER = """
import resource, signal, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
code = child.wait()
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_utime + usage.ru_stime))
sys.exit(code)
"""


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values) - idle) / TICKS, sum(values) / TICKS


def cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:  # gone meanwhile
        return 0.0
    return sum(int(value) for value in fields[CPU_FIELDS]) / TICKS


#: The workers' connections show as this in pg_stat_activity: their backends are the ones
#: whose CPU is counted (other work on the same PostgreSQL server is not).
APP_NAME = report.scoped("wikinotify-bench-split")


def sample_backends(bench: Bench, seen: dict[int, float]) -> None:
    """The CPU seconds of the workers' PostgreSQL backends so far, into ``seen`` (pid ->
    the most seen): sampled while they live, since a backend goes with its work horse."""
    pids = bench.pg.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (APP_NAME,)
    ).fetchall()
    bench.pg.commit()
    for (pid,) in pids:
        seen[pid] = max(seen.get(pid, 0.0), cpu_seconds(pid))


@dataclass
class Run:
    workers: int
    range_size: int
    ranges: int
    seconds: float
    #: How many ranges each worker process took.
    taken: list[int]
    worker_cpu: float
    postgres_cpu: float
    #: The whole machine's CPU use over the run, out of 1 (every core busy).
    machine: float
    watchers: int

    @property
    def rate(self) -> float:
        return self.watchers / self.seconds

    @property
    def label(self) -> str:
        split = f"{self.ranges} ranges of {self.range_size:,}" if self.ranges else "unsplit"
        plural = "s" if self.workers > 1 else ""
        return f"{self.watchers:,} watchers, {split}, {self.workers} worker{plural}"


def set_up(database_url: str, redis_url: str, watchers: int) -> Bench:
    bench = fresh_bench(database_url, redis_url, SCHEMA, {"WIKINOTIFY_QUEUE": QUEUE, **SETTINGS})
    ensure_accounts(bench, watchers)
    add_page(bench, PATH, bench.accounts[:watchers])
    return bench


def rq_queue(bench: Bench) -> Queue:
    return Queue(QUEUE, connection=wq.connection(bench.app))


def reset(bench: Bench) -> None:
    """An empty inbox and outbox, no queued job and no kick held: each run starts alike."""
    bench.pg.execute("TRUNCATE wikinotify_notifications, wikinotify_fanout_ranges")
    bench.pg.execute("DELETE FROM wikinotify_events")
    bench.pg.commit()
    queue = rq_queue(bench)
    queue.empty()
    finished = FinishedJobRegistry(queue=queue)  # the last run's results: not this run's
    for job_id in finished.get_job_ids():
        finished.remove(job_id, delete_job=True)
    for job in (wq.Job.DISPATCH, wq.Job.FANOUT_RANGE):
        wq.connection(bench.app).delete(wq.kick_key(bench.app, job))


def worker_env(bench: Bench, range_size: int) -> dict[str, str]:
    env = dict(os.environ)
    settings = {**SETTINGS, "WIKINOTIFY_FANOUT_RANGE_SIZE": range_size}
    for key in ("SECRET_KEY", "WIKINOTIFY_REDIS_URL", "WIKINOTIFY_QUEUE"):
        env[f"FLASK_{key}"] = bench.app.config[key]
    url = make_url(bench.app.config["SQLALCHEMY_DATABASE_URI"])
    url = url.update_query_dict({"application_name": APP_NAME})
    env["FLASK_SQLALCHEMY_DATABASE_URI"] = url.render_as_string(hide_password=False)
    for key, value in settings.items():
        env[f"FLASK_{key}"] = json.dumps(value)
    env.pop("FLASK_APP", None)  # the worker finds wsgi.py in the working directory
    return env


def measure(bench: Bench, watchers: int, workers: int, range_size: int,
            act: Callable[[], None] | None = None, told: int | None = None) -> Run:
    """One fan-out from an empty inbox: the page's edit, or ``act`` (another event, which
    tells ``told`` readers: bench/announce.py's announcement)."""
    reset(bench)
    # RQ's default (forking) worker, as `rq worker` runs in production.
    files = [tempfile.NamedTemporaryFile("r", suffix=".cpu") for _ in range(workers)]
    processes = [bench_workers.start([sys.executable, "-c", _CPU_WRAPPER, file.name,
                                      RQ, "worker", "--url", bench.redis_url, QUEUE],
                                     cwd=ROOT, env=worker_env(bench, range_size),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                 for file in files]
    try:
        time.sleep(2)  # listening before the edit, as a deployment's workers are
        machine_before, backends = machine_busy(), {}
        if act is not None:
            act()
        else:  # content of its own: an edit that changes nothing emits nothing
            edit(bench, PATH, f"An edit for {watchers} watchers, {workers} worker(s), "
                              f"ranges of {range_size}")
        row = wait_for_event(bench, backends)
        postgres_cpu = sum(backends.values())
        machine_after = machine_busy()
    finally:
        outputs = [out for out, _ in bench_workers.stop(processes)]
    worker_cpu = sum(float(file.read() or 0) for file in files)
    for file in files:
        file.close()
    busy = machine_after[0] - machine_before[0]
    machine = busy / ((machine_after[1] - machine_before[1]) or 1)
    event_id, created_at, processed_at, ranges, failed_at = row
    if failed_at is not None:
        sys.exit(f"the event failed:\n{outputs[0][-3000:]}")
    written = bench.pg.execute(
        "SELECT count(*) FROM wikinotify_notifications WHERE last_event_id = %s", (event_id,)
    ).fetchone()[0]
    bench.pg.commit()
    watchers = watchers if told is None else told
    if written != watchers:
        sys.exit(f"the fan-out wrote {written:,} entries for {watchers:,} readers")
    return Run(workers=workers, range_size=range_size, ranges=ranges or 0,
               seconds=(processed_at - created_at).total_seconds(),
               taken=sorted(ranges_by_worker(rq_queue(bench)).values(), reverse=True),
               worker_cpu=worker_cpu, postgres_cpu=postgres_cpu, machine=machine,
               watchers=watchers)


def ranges_by_worker(queue: Queue) -> dict[str, int]:
    """How many ranges each worker process fanned out on ``queue``, from the results RQ
    keeps of its finished ``fanout_range`` jobs (the tests read them the same way)."""
    done: Counter[str] = Counter()
    for job_id in FinishedJobRegistry(queue=queue).get_job_ids():
        job = queue.fetch_job(job_id)
        if job is not None and job.func_name.endswith(wq.Job.FANOUT_RANGE):
            ranges = (job.return_value() or {}).get("ranges", ())
            done[job.worker_name or "?"] += sum(r["done"] for r in ranges)
    return {worker: count for worker, count in done.items() if count}


def wait_for_event(bench: Bench, backends: dict[int, float]) -> tuple:
    end = time.monotonic() + TIMEOUT
    while time.monotonic() < end:
        sample_backends(bench, backends)
        row = bench.pg.execute(
            "SELECT id, created_at, processed_at, ranges, failed_at FROM wikinotify_events"
        ).fetchone()
        bench.pg.commit()
        if row is not None and (row[2] is not None or row[4] is not None):
            return row
        if row is None and time.monotonic() > end - TIMEOUT + 30:
            sys.exit("the edit wrote no event")
        time.sleep(0.1)
    sys.exit(f"the fan-out did not finish within {TIMEOUT} s")


def figures(unsplit: Run, one: Run, two: Run) -> list[report.Figure]:
    return [
        report.figure("fanout-split", unsplit.label, unsplit.rate, "rows/s"),
        report.figure("fanout-split", one.label, one.rate, "rows/s", unsplit.rate,
                      "the same fan-out unsplit, 1 worker"),
        report.figure("fanout-split", two.label, two.rate, "rows/s", 2 * one.rate,
                      "twice the split rate with 1 worker (linear scaling)"),
    ]


def print_runs(runs: Sequence[Run]) -> None:
    print(f"wikinotify split fan-out: one edit ({ACTOR}) to a page's watchers, {os.cpu_count()} "
          "CPUs shared by PostgreSQL and the workers; rows/s from the event's INSERT to the "
          "commit that marks it processed")
    head = (f"{'run':<52} | {'seconds':>7} | {'rows/s':>8} | {'ranges taken':>12} | "
            f"{'worker CPU s':>12} | {'PostgreSQL CPU s':>16} | {'machine busy':>12}")
    print(head)
    print("-" * len(head))
    for run in runs:
        taken = "/".join(map(str, run.taken)) if run.ranges else "-"
        print(f"{run.label:<52} | {run.seconds:7.2f} | {run.rate:8,.0f} | {taken:>12} | "
              f"{run.worker_cpu:12.1f} | {run.postgres_cpu:16.1f} | {run.machine:12.0%}")
    unsplit, one, two = runs
    print("worker CPU: the worker processes', start to exit; PostgreSQL CPU: the workers' "
          "backends' (sampled every 0.1 s while they live); machine busy: all of the "
          "machine's CPUs over the run, other processes' work included")
    print(f"\nsplitting, 1 worker: {one.rate / unsplit.rate:.0%} of the unsplit rate")
    print(f"2 workers: {two.rate / one.rate:.2f}x the 1-worker split rate "
          f"({two.rate / (2 * one.rate):.0%} of linear)")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout_split", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40,000 watchers, ranges of 10,000")
    parser.add_argument("--database-url", default=os.environ.get(
        "WIKINOTIFY_TEST_DATABASE_URL", DEFAULT_DATABASE_URL))
    parser.add_argument("--redis-url", default=os.environ.get(
        "WIKINOTIFY_TEST_REDIS_URL", DEFAULT_REDIS_URL))
    return parser.parse_args(argv)


def measure_all(args: argparse.Namespace) -> list[report.Figure]:
    watchers, range_size = TINY if report.tiny() else QUICK if args.quick else FULL

    def log(message: str) -> None:
        print(f"... {message}", file=sys.stderr, flush=True)

    log(f"{watchers:,} watchers")
    bench = set_up(args.database_url, args.redis_url, watchers)
    runs = []
    for workers, size in ((1, 0), (1, range_size), (2, range_size)):
        log(f"{'unsplit' if not size else f'ranges of {size:,}'}, {workers} worker(s)")
        runs.append(measure(bench, watchers, workers, size))
    bench.pg.close()
    print_runs(runs)
    return figures(*runs)


def run(quick: bool) -> list[report.Figure]:
    """For ``python -m bench``."""
    return measure_all(parse_args(["--quick"] if quick else []))


def main(argv: Sequence[str] | None = None) -> int:
    measure_all(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
