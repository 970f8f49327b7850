"""Running the wiki's jobs: in this process (:func:`run_jobs`), in a real ``rq worker``
process (:func:`run_worker`, :func:`start_worker`), or as the minute's cron enqueues them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from rq import SimpleWorker

from tests.helpers.app import ROOT
from wikinotify.config import DEFAULT_CONFIG

RQ = os.path.join(os.path.dirname(sys.executable), "rq")


#: Settings a worker process needs to see the same wiki as the test, passed the way a
#: deployment passes them: FLASK_* variables read by create_app's from_prefixed_env().
#: Every wikinotify setting, from its one table.
WORKER_SETTINGS = (
    "SECRET_KEY",
    "SQLALCHEMY_DATABASE_URI",
    "MAIL_SERVER",
    "MAIL_PORT",
    "MAIL_DEFAULT_SENDER",
    "MAIL_USERNAME",
    "MAIL_PASSWORD",
    "MAIL_USE_TLS",
    *DEFAULT_CONFIG,
)


def worker_env(app) -> dict[str, str]:
    import json

    env = dict(os.environ)
    for key in WORKER_SETTINGS:
        value = app.config.get(key)
        if value is not None:
            env[f"FLASK_{key}"] = value if isinstance(value, str) else json.dumps(value)
    env.pop("FLASK_APP", None)  # found as wsgi.py in the working directory, as documented
    return env


def run_worker(app, *, forking: bool = False, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run ``rq worker --burst`` on the app's queues until they are empty, the way a
    deployment runs it, and fail with the job's traceback if any job failed.

    ``rq.worker.SimpleWorker`` by default: jobs run in the worker process, which builds the
    app once. ``forking=True`` runs RQ's default worker, which forks a work horse (and so
    builds the app) per job: the plain ``rq worker`` of the docs, slower by that build.
    """
    result = subprocess.run(
        worker_command(app, forking=forking, burst=True),
        cwd=ROOT, env=worker_env(app), capture_output=True, text=True, timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    fail_on_failed_jobs(app, "in the worker")
    return result


def worker_command(app, *, forking: bool = False, burst: bool = True) -> list[str]:
    """``rq worker`` on both of the app's queues, fan-out first, as the README says."""
    from wikinotify.queue import queue_names

    command = [RQ, "worker", "--url", app.config["WIKINOTIFY_REDIS_URL"]]
    if burst:
        command.append("--burst")
    if not forking:
        command += ["--worker-class", "rq.worker.SimpleWorker"]
    return [*command, *queue_names(app)]


def app_queues(app) -> list:
    from rq import Queue

    from wikinotify.queue import connection, queue_names

    return [Queue(name, connection=connection(app)) for name in queue_names(app)]


def fail_on_failed_jobs(app, where: str = "") -> None:
    """Fail the test with the traceback of any job of the app's queues that failed."""
    from rq.registry import FailedJobRegistry

    for queue in app_queues(app):
        for job_id in FailedJobRegistry(queue=queue).get_job_ids():
            job = queue.fetch_job(job_id)
            pytest.fail(f"job {job.func_name} failed {where}:\n"
                        f"{job.latest_result().exc_string}")


class InProcessWorker(SimpleWorker):
    """RQ's ``SimpleWorker`` without its command channel (a Redis pub/sub thread that
    listens for "stop" and "kill the horse", which nothing sends a burst in a test). rq
    reads that channel in 60-second waits and, if the thread has not seen the unsubscribe
    within a second, closes its connection under it: one burst in forty, more on a loaded
    machine, then stood still for that minute."""

    def subscribe(self) -> None:
        pass


def run_jobs(app) -> int:
    """Run the app's queues until they are empty in this process, with a real RQ worker
    (:class:`InProcessWorker`) on the real Redis: for tests about what a job does rather
    than about the worker process (which :func:`run_worker` covers). Fails with the job's
    traceback if any job failed; returns how many jobs ran."""
    from rq.registry import FinishedJobRegistry

    queues = app_queues(app)
    with app.app_context():
        InProcessWorker(queues, connection=queues[0].connection).work(burst=True)
    fail_on_failed_jobs(app)
    return sum(len(FinishedJobRegistry(queue=queue).get_job_ids()) for queue in queues)


def run_results(app, job: str) -> list[dict]:
    """What each finished run of ``job`` (its name, :class:`wikinotify.queue.Job`)
    reported, oldest first."""
    from rq.registry import FinishedJobRegistry

    from wikinotify import queue

    q = queue.queue(app, job=job)
    jobs = [q.fetch_job(i) for i in FinishedJobRegistry(queue=q).get_job_ids()]
    jobs = sorted((j for j in jobs if j.func_name == queue.Job(job).path),
                  key=lambda j: j.ended_at)
    return [j.return_value() for j in jobs if j.return_value()]


def enqueue_cron_jobs(app) -> None:
    """Enqueue what ``rq cron wikinotify.jobs.cron`` enqueues when its minute comes."""
    from rq.cron import CronScheduler

    from wikinotify.queue import connection

    scheduler = CronScheduler(connection=connection(app))
    scheduler.load_config_from_file("wikinotify.jobs.cron")
    jobs = scheduler.get_jobs()
    assert [j.func.__name__ for j in jobs] == [
        "dispatch", "kick_mail", "kick_deliveries", "settle_read_marks", "purge"]
    for job in jobs:
        if job.cron != "* * * * *":
            continue  # the daily purge is not what a minute brings
        job.enqueue(connection(app))


def deliver(app) -> None:
    """What the minute cron does: a dispatch and a mail run, on a real worker."""
    enqueue_cron_jobs(app)
    run_jobs(app)


#: The stale threshold of these tests' workers: a killed worker's claim is taken over
#: after two seconds instead of eleven minutes.
STALE_SECONDS = 2


def start_worker(app, *, burst: bool = True, env: dict | None = None,
                 worker_class: str = "rq.worker.SimpleWorker") -> subprocess.Popen:
    """A real ``rq worker`` process on the app's fan-out queue (``SimpleWorker``: it
    builds the app at its first job; ``wikinotify.jobs.appctx.Worker``: before it
    registers, as deployed)."""
    command = [RQ, "worker", "--url", app.config["WIKINOTIFY_REDIS_URL"],
               "--worker-class", worker_class, app.config["WIKINOTIFY_QUEUE"]]
    if burst:
        command.insert(2, "--burst")
    return subprocess.Popen(command, cwd=ROOT, env=env or worker_env(app),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stop_workers(workers: list[subprocess.Popen], *, grace: float = 30) -> list[str]:
    """Stop long-running ``rq worker`` processes as a deployment does (SIGTERM: a warm
    shutdown, the job in hand finished first) and return what each printed.

    A worker that has not stopped after ``grace`` seconds gets a second SIGTERM, RQ's
    cold shutdown: RQ only checks a warm stop at the top of its loop, so a SIGTERM that
    lands just after that check, while it still calls itself busy, leaves it waiting in
    its next dequeue for the whole dequeue timeout (a loaded CI machine saw one)."""
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    outputs = []
    for worker in workers:
        try:
            output, _ = worker.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            worker.send_signal(signal.SIGTERM)
            output, _ = worker.communicate(timeout=grace)
        outputs.append(output)
    return outputs


def finish(process: subprocess.Popen, timeout: float = 300) -> str:
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output[-4000:]
    return output


def wait_for(condition, *, seconds: float = 120, every: float = 0.05) -> None:
    """Poll ``condition`` every ``every`` seconds until it holds; fail after ``seconds``."""
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(every)


def tells_waiting_for_the_mark(monkeypatch, reader: str) -> threading.Event:
    """Have the open-page message of the batch that tells ``reader`` (live.changed, on the
    batch writer's teller thread) wait up to 2.5 s for the event to be marked processed,
    read on a connection of its own; the returned flag is set if it saw the mark."""
    import sqlalchemy as sa

    from demo.models import db
    from wikinotify.inbox import live
    from wikinotify.models import Event

    marked = threading.Event()
    original = live.changed

    def changed(app, user_ids):
        user_ids = list(user_ids)
        if reader in user_ids:
            for _ in range(50):
                with db.engine.connect() as connection:
                    if connection.scalar(sa.select(Event.processed_at)) is not None:
                        marked.set()
                        break
                time.sleep(0.05)
        original(app, user_ids)

    monkeypatch.setattr(live, "changed", changed)
    return marked
