"""The forking worker that builds the app once (``rq worker -w
wikinotify.jobs.appctx.Worker``): each job still runs in a work horse of its own, forked
from a worker that built the app, its templates and catalogues before it registered, and
closed its database connections so that no horse shares one."""

from __future__ import annotations

import subprocess
import sys

import pytest

from demo.models import db
from tests.helpers.app import ROOT
from tests.helpers.jobs import RQ, fail_on_failed_jobs, worker_env
from tests.helpers.wiki import add_users, add_watches, emit_edit, mail_due_for_readers, page, user
from wikinotify import queue as wq

RQ_WORKER_CLASS = "wikinotify.jobs.appctx.Worker"


pytestmark = pytest.mark.app_config(smtp=True)


def test_the_preloading_worker_sends_each_reader_one_mail_from_its_work_horses(app, smtp):
    with app.app_context():
        addresses = mail_due_for_readers(3)
        # Two runs, so two horses forked from the same built app (and its closed engine).
        wq.enqueue(app, wq.Job.SEND_MAIL)
        wq.enqueue(app, wq.Job.SEND_MAIL)
    result = subprocess.run(
        [RQ, "worker", "--url", app.config["WIKINOTIFY_REDIS_URL"], "--burst",
         "--worker-class", RQ_WORKER_CLASS, *wq.queue_names(app)],
        cwd=ROOT, env=worker_env(app), capture_output=True, text=True, timeout=180,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    fail_on_failed_jobs(app, "in the preloading worker")
    assert "is built; each work horse inherits it" in result.stdout
    assert sorted(smtp.inbox.recipients) == sorted(addresses)  # each one, once


#: Run in a process of its own, as the worker starts: whether :func:`preload` leaves every
#: mapper of the wiki's and wikinotify's configured.
_MAPPERS_AFTER_PRELOAD = """
from demo.models import db
from wikinotify.jobs.appctx import preload
from wikinotify.models import Base
preload()
mappers = [*db.Model.registry.mappers, *Base.registry.mappers]
print(len(mappers), sum(not mapper.configured for mapper in mappers))
"""


def test_the_worker_configures_the_mappers_before_it_forks(app):
    """SQLAlchemy configures mappers at their first query; left to the work horse, every
    horse did it again, a sixth of a 10,000-watcher fan-out on SQLite
    (docs/benchmarks.md#the-fan-out)."""
    result = subprocess.run([sys.executable, "-c", _MAPPERS_AFTER_PRELOAD], cwd=ROOT,
                            env=worker_env(app), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    mappers, unconfigured = map(int, result.stdout.split()[-2:])
    assert mappers > 10 and unconfigured == 0


#: Run in a process of its own, after the test emitted an edit: whether the fan-out that
#: follows :func:`preload` compiles any of the reads it made (docs/benchmarks.md#the-fan-out).
_COMPILED_BY_THE_JOB = """
import sqlalchemy as sa
from wikinotify.jobs.dispatch import dispatch
from wikinotify.jobs.appctx import preload
from wikinotify.state import state
app = preload()
compiled = []
def record(conn, cursor, statement, parameters, context, executemany):
    if context.cache_hit == context.dialect.CACHE_MISS:
        compiled.append(" ".join(statement.split()))
with app.app_context():
    for engine in state(app).db.engines.values():
        sa.event.listen(engine, "after_cursor_execute", record)
print(dispatch()["finished"])
print("\\n".join(compiled))
"""
#: The fan-out's own reads of each batch (and the settings'), which the worker compiles
#: before it forks.
_BATCH_READS = ("FROM wikinotify_mutes", "FROM wikinotify_preferences",
                "FROM wikinotify_email_schedules", "wikinotify_endpoints.owner_id, wikinotify_",
                "FROM wikinotify_instance_settings")


def _compiled_by_a_fan_out(app) -> list[str]:
    """The statements a preloaded worker's job compiled, fanning out an edit to three."""
    with app.app_context():
        target = page("handbook/onboarding")
        add_watches(target, add_users(3))
        emit_edit(target, str(user("bob").id))
        db.session.commit()
    result = subprocess.run([sys.executable, "-c", _COMPILED_BY_THE_JOB], cwd=ROOT,
                            env=worker_env(app), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    finished, *compiled = result.stdout.strip().splitlines()
    assert finished == "1"
    return compiled


def test_the_worker_compiles_the_fan_out_s_reads_before_it_forks(app):
    """A work horse's statement cache dies with it: the reads were compiled again by every
    fan-out, some 9% of a 10,000-watcher one on SQLite, and the wiki's account and watcher
    reads some 10 ms more."""
    compiled = _compiled_by_a_fan_out(app)
    # The wiki's reads of each batch, through the host interface (its accounts, a page's
    # watchers), are compiled before the fork too.
    wiki_reads = ("demo_users", "demo_watches")
    again = [sql[:80] for sql in compiled if any(read in sql for read in _BATCH_READS + wiki_reads)]
    assert again == [], "\n".join(again)


#: What each batch's write sends (the entries' upsert, the read marks' lock and probe, the
#: cursor), the event's mark after the last, and what every job reads before its first
#: batch (the site-wide webhooks, the wiki's grants behind check_access): compiled before
#: the fork as well.
_BATCH_WRITES = ("INSERT INTO wikinotify_notifications", "FROM wikinotify_read_marks",
                 "UPDATE wikinotify_events SET cursor", "UPDATE wikinotify_events SET processed_at",
                 "wikinotify_endpoints.categories",
                 "pg_advisory_xact_lock", "demo_group")


def test_the_worker_compiles_the_fan_out_s_writes_before_it_forks(app):
    """Each batch's write was compiled again in every work horse, on the writer's thread,
    while the run decided the next batch on the same two cores; and the job's first reads
    before its first batch (docs/benchmarks.md#sqlite-the-embedded-default)."""
    compiled = _compiled_by_a_fan_out(app)
    again = [sql[:100] for sql in compiled if any(part in sql for part in _BATCH_WRITES)]
    assert again == [], "\n".join(again)

