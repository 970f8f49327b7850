"""More mail workers send faster (docs/benchmarks.md#the-mail-drain): a mail run with a large batch
hands shares of it to the mail workers that are idle, each a run of its own, with its own SMTP
connection; every (user, site) still gets one mail."""

from __future__ import annotations

import subprocess
import time

import pytest
import sqlalchemy as sa
from rq import Worker
from rq.registry import FinishedJobRegistry

from demo.models import db
from tests.helpers.app import ROOT
from tests.helpers.jobs import run_jobs, worker_command, worker_env
from tests.helpers.wiki import mail_due_for_readers, set_mail_batch
from wikinotify import queue as wq
from wikinotify.jobs.send_mail import MIN_SHARE, send_mail
from wikinotify.models import Notification

pytestmark = pytest.mark.app_config(smtp=True)


def pending() -> int:
    db.session.expire_all()
    return db.session.scalar(sa.select(sa.func.count()).select_from(Notification).where(
        Notification.email_state == "pending")) or 0


def test_a_share_mails_its_pairs_and_no_other(app, smtp):
    with app.app_context():
        addresses = mail_due_for_readers(3)
        rows = db.session.execute(sa.select(Notification.user_id, Notification.site_id)
                                  .order_by(Notification.id)).all()
        wq.enqueue(app, wq.Job.SEND_MAIL, pairs=[list(pair) for pair in rows[:2]])
        run_jobs(app)
        assert sorted(smtp.inbox.recipients) == sorted(addresses[:2])
        assert pending() == 1  # a share does not go on to the rest


@pytest.fixture
def idle_worker(app):
    """A real ``rq worker`` listening on the app's queues, idle until a job comes."""
    process = subprocess.Popen(worker_command(app, burst=False), cwd=ROOT,
                               env=worker_env(app), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    mail_queue = wq.queue(app, job=wq.Job.SEND_MAIL)
    deadline = time.monotonic() + 60
    while not Worker.all(queue=mail_queue):
        assert process.poll() is None and time.monotonic() < deadline, "no worker started"
        time.sleep(0.1)
    yield process
    process.terminate()
    process.wait(timeout=60)


def test_a_large_batch_is_shared_with_an_idle_worker_and_each_reader_gets_one_mail(
    app, smtp, idle_worker
):
    readers = 2 * MIN_SHARE
    with app.app_context():
        set_mail_batch(readers)
        addresses = mail_due_for_readers(readers)
        send_mail()  # the run, here; the idle worker gets a share of it
        deadline = time.monotonic() + 120
        while pending() or len(smtp.inbox.raw) < readers:
            assert time.monotonic() < deadline, f"{pending()} rows still pending"
            time.sleep(0.2)
        assert sorted(smtp.inbox.recipients) == sorted(addresses)  # each one, once
        finished = FinishedJobRegistry(queue=wq.queue(app, job=wq.Job.SEND_MAIL))
        jobs = [wq.queue(app, job=wq.Job.SEND_MAIL).fetch_job(i) for i in finished.get_job_ids()]
        shares = [job for job in jobs if job is not None and job.kwargs.get("pairs")]
        assert len(shares) == 1 and len(shares[0].kwargs["pairs"]) == MIN_SHARE
