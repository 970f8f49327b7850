"""The jobs by name (``wikinotify.queue.Job``), and the cron's schedule: ``rq cron
wikinotify.jobs.cron`` puts each job on the queue the app's config names, as the workers
and every kick do, on a real Redis."""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest
from rq import Queue
from rq.cron import CronScheduler
from rq.utils import import_attribute

from tests.helpers.app import ROOT, make_app
from tests.helpers.jobs import RQ, worker_env
from wikinotify import jobs
from wikinotify.queue import SCHEDULE, Job, connection, enqueue, queue_name, queue_names

CRON = "wikinotify.jobs.cron"


@pytest.fixture
def renamed(tmp_path, redis_url):
    """An app whose queue is renamed from the default: what a cron reading anything but
    the app's config would miss."""
    name = f"renamed-{uuid.uuid4().hex[:10]}"
    app = make_app(f"sqlite:///{tmp_path}/wiki.db", WIKINOTIFY_REDIS_URL=redis_url,
                   WIKINOTIFY_QUEUE=name)
    yield app
    for queue in queue_names(app):
        Queue(queue, connection=connection(app)).delete(delete_jobs=True)


def test_each_job_name_is_a_job_function_and_each_job_function_has_a_name():
    assert sorted(jobs.__all__) == sorted(Job)
    for job in Job:
        assert import_attribute(job.path) is getattr(jobs, job)


def test_a_misspelled_job_is_refused_before_it_reaches_a_queue(renamed):
    with pytest.raises(ValueError, match="send_mails"):
        enqueue(renamed, "send_mails")


def test_the_cron_enqueues_to_the_queue_the_apps_config_names(renamed):
    with renamed.app_context():
        scheduler = CronScheduler(connection=connection(renamed))
        scheduler.load_config_from_file(CRON)
    scheduled = scheduler.get_jobs()
    assert [(j.func.__name__, j.cron) for j in scheduled] == [
        (job.value, when) for job, when in SCHEDULE]
    for cron_job in scheduled:
        cron_job.enqueue(connection(renamed))
    for job, _ in SCHEDULE:
        queued = Queue(queue_name(renamed, job), connection=connection(renamed))
        assert getattr(jobs, job) in [queued_job.func for queued_job in queued.get_jobs()]
    assert {j.queue_name for j in scheduled} == {renamed.config["WIKINOTIFY_QUEUE"]}


def test_rq_cron_as_deployed_builds_the_app_and_schedules_on_its_queue(renamed):
    """``rq cron`` in the wiki's directory, its settings in FLASK_* variables: the
    schedule's queue is the app's, with no variable of the cron's own."""
    env = worker_env(renamed)
    env.pop("WIKINOTIFY_QUEUE", None)
    cron = subprocess.Popen([RQ, "cron", CRON, "--url", renamed.config["WIKINOTIFY_REDIS_URL"]],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        mine: list[CronScheduler] = []
        while not mine and time.monotonic() < deadline and cron.poll() is None:
            time.sleep(0.2)
            mine = [s for s in CronScheduler.all(connection(renamed), cleanup=False)
                    if s.pid == cron.pid]
        assert mine, f"rq cron never registered: {cron.poll()}"
        assert {j.queue_name for j in mine[0].get_jobs()} == {
            renamed.config["WIKINOTIFY_QUEUE"]}
        # Seen registered is not yet past registering: rq cron takes SIGTERM before it
        # has read its registration's reply, and a stop then raises outside its loop (a
        # traceback of rq's own, in a fresh-clone run). Its loop starts within
        # milliseconds of that reply.
        time.sleep(1)
    finally:
        cron.terminate()
        output = cron.communicate(timeout=30)[0]
    assert "Traceback" not in output, output
