"""``flask wikinotify status`` and ``flask wikinotify retry``
(docs/operating.md#the-status-command), run with Flask's CLI runner on real databases and
real Redis: each exit status of status (0 all well, 1 something needs attention, 2 the
database or Redis unreachable: a redis-server of the test's own, stopped), and retries by
id and --all, audited with the command line as their actor."""

from __future__ import annotations

import getpass
import json
import os
import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa
from rq import Queue

from demo.models import AuditLog, db
from tests.helpers.app import dispose, make_app
from tests.helpers.database import stamp
from tests.helpers.failures import failed_delivery, failed_mail
from tests.helpers.rq_registry import registered_cron, registered_worker
from tests.helpers.smtp import free_port
from wikinotify import health
from wikinotify.mail.setup import MAIL_SWITCHED_OFF, mail_problem
from wikinotify.models import Delivery, Event, Notification, utcnow
from wikinotify.outbound import verification
from wikinotify.queue import connection, queue_name, queue_names
from wikinotify.retries import Actor, Kind, failed_ids


def run(app, *args: str):
    return app.test_cli_runner().invoke(args=["wikinotify", *args])


def add_event(age: timedelta, **columns) -> int:
    event = Event(kind="page:edit", origin="user", created_at=utcnow() - age, **columns)
    db.session.add(event)
    db.session.commit()
    return event.id


def audits() -> list[tuple]:
    db.session.expire_all()
    return [(a.action, a.kind, a.actor_id, a.details)
            for a in db.session.scalars(sa.select(AuditLog).order_by(AuditLog.id))]


def cli_actor() -> dict:
    return {"via": "cli", "osUser": getpass.getuser()}


# -- status ---------------------------------------------------------------------------------


def test_all_is_well_exits_0(at_head):
    app = at_head
    with registered_worker(app), registered_cron(app):
        result = run(app, "status")
        as_json = run(app, "status", "--json")
    assert result.exit_code == 0, result.output
    assert "All is well." in result.output
    assert "Events waiting:          0" in result.output
    assert f"Queued jobs:             {queue_name(app)} 0" in result.output
    assert "Workers:                 1" in result.output
    assert as_json.exit_code == 0
    body = json.loads(as_json.stdout)
    assert body["readiness"] == {"database": "ok", "redis": "ok", "schema": "ok"}
    assert body["warnings"] == []
    assert body["vitals"]["workers"] == 1
    assert body["vitals"]["queueLengths"] == dict.fromkeys(queue_names(app), 0)


@pytest.mark.app_config(smtp=True)
def test_status_says_mail_can_be_sent(at_head):
    app = at_head
    with registered_worker(app), registered_cron(app):
        result = run(app, "status")
        body = json.loads(run(app, "status", "--json").stdout)
    assert "Mail:                    can be sent" in result.output
    assert body["mailProblem"] is None


@pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=False)
def test_mail_that_cannot_be_sent_is_said_with_its_reason_and_is_no_warning(at_head):
    app = at_head
    with app.app_context():
        reason = mail_problem()
    assert reason == MAIL_SWITCHED_OFF
    with registered_worker(app), registered_cron(app):
        result = run(app, "status")
        body = json.loads(run(app, "status", "--json").stdout)
    assert f"Mail:                    not sent: {reason}" in result.output
    assert body["mailProblem"] == reason
    # A wiki may mean to send no mail: a monitor must not read that as trouble for ever.
    assert result.exit_code == 0 and body["warnings"] == []


@pytest.mark.app_config(WIKINOTIFY_BACKLOG_WARNING=60)
def test_an_old_backlog_and_no_worker_exit_1_saying_what_to_run(at_head):
    app = at_head
    with app.app_context():
        add_event(timedelta(minutes=5))
    with registered_cron(app):
        result = run(app, "status")
        body = json.loads(run(app, "status", "--json").stdout)
    assert result.exit_code == 1
    command = "rq worker --url $REDIS " + " ".join(queue_names(app))
    assert "Events waiting:          1 (the oldest waited 5 min" in result.output
    assert "1 thing needs attention:" in result.output
    assert "No worker seems to be running" in result.output and command in result.output
    assert len(body["warnings"]) == 1 and body["vitals"]["eventsWaiting"] == 1


def test_a_schema_behind_the_head_exits_1(app):
    head, revisions = health.branch_revisions()
    stamp(app, revisions[revisions.index(head) + 1])
    try:
        with registered_worker(app), registered_cron(app):
            result = run(app, "status")
    finally:
        stamp(app)
    assert result.exit_code == 1
    assert "Schema:                  behind" in result.output
    assert "run flask db upgrade" in result.output


def test_redis_unreachable_exits_2_naming_it(app, own_redis):
    app.config["WIKINOTIFY_REDIS_URL"] = own_redis.url
    own_redis.stop()
    result = run(app, "status")
    assert result.exit_code == 2
    assert result.stderr.startswith("Redis cannot be reached within 2 s")
    assert "WIKINOTIFY_REDIS_URL" in result.stderr and "database" not in result.stderr
    body = json.loads(run(app, "status", "--json").stdout)
    assert body["readiness"]["redis"] == "down" and body["error"].startswith("Redis")


def test_a_database_unreachable_exits_2_naming_it(redis_url):
    app = make_app(f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/none",
                   WIKINOTIFY_REDIS_URL=redis_url)
    try:
        result = run(app, "status")
    finally:
        dispose(app)
    assert result.exit_code == 2
    assert result.stderr.startswith("The database cannot be reached within 2 s")
    assert "SQLALCHEMY_DATABASE_URI" in result.stderr and "Redis" not in result.stderr


def test_a_database_without_wikinotifys_tables_exits_2_saying_to_upgrade(tmp_path, redis_url):
    app = make_app(f"sqlite:///{tmp_path}/empty.db", WIKINOTIFY_REDIS_URL=redis_url)
    try:
        result = run(app, "status")
    finally:
        dispose(app)
    assert result.exit_code == 2
    assert result.stderr == ("The database answers, but wikinotify's tables cannot be read "
                             "(OperationalError): run flask db upgrade.\n")


@pytest.mark.app_config(WIKINOTIFY_READY_TIMEOUT=0.5)
def test_a_table_locked_by_another_session_exits_2_within_the_timeout(at_head):
    """The database answers, but wikinotify's tables wait on a lock another session holds:
    the status gives up after the timeout instead of waiting with it."""
    app = at_head
    with app.app_context():
        if db.engine.dialect.name != "postgresql":
            pytest.skip("SQLite has no statement timeout; its lock wait is the probe's own")
        locker = sa.create_engine(db.engine.url)
    answered: list = []
    status = threading.Thread(target=lambda: answered.append(run(app, "status")))
    with locker.connect() as holder:
        holder.execute(sa.text("LOCK TABLE wikinotify_events IN ACCESS EXCLUSIVE MODE"))
        status.start()
        status.join(20)  # far beyond the timeout: a status still waiting is the defect
        holder.rollback()
    status.join()
    locker.dispose()
    [result] = answered
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "The database did not answer wikinotify's queries within 0.5 s")


def test_a_pending_digest_of_two_entries_is_shown_as_two_entries(at_head):
    """What the pending figures count is entries (rows), not mails: said so, not
    "Mail pending: 2" for one digest."""
    app = at_head
    with app.app_context():
        db.session.add_all([Notification(
            user_id="1", site_id="1", category="watchedPage", variant="edited",
            group_key=f"test:{entry}", last_event_id=entry, in_app=True,
            email_state="pending", email_after=utcnow() + timedelta(days=1))
            for entry in (1, 2)])
        db.session.commit()
    with registered_worker(app), registered_cron(app):
        result = run(app, "status")
        body = json.loads(run(app, "status", "--json").stdout)
    assert "Mail entries pending:    2 (due now: 0)" in result.output
    assert "Mail pending" not in result.output
    assert (body["vitals"]["mailEntriesPending"], body["vitals"]["mailEntriesDue"]) == (2, 0)


# -- retry ----------------------------------------------------------------------------------


def test_retry_events_by_id_audits_and_kicks_the_fan_out(ctx):
    first = add_event(timedelta(hours=1), failed_at=utcnow(), attempts=5, error="boom")
    second = add_event(timedelta(hours=1), failed_at=utcnow(), attempts=5, error="boom")
    result = run(ctx, "retry", "events", str(first))
    assert (result.exit_code, result.output) == (
        0, "Retried 1 event; the next run takes it within a minute.\n")
    db.session.expire_all()
    assert db.session.get(Event, first).failed_at is None
    assert db.session.get(Event, second).failed_at is not None
    assert audits() == [("retryNotificationEvent", "admin", None,
                         {"event": first, **cli_actor()})]
    dispatch = Queue(queue_name(ctx), connection=connection(ctx))
    assert [job.func_name for job in dispatch.get_jobs()] == ["wikinotify.jobs.dispatch"]


def test_an_unknown_id_is_named_and_exits_1_while_the_others_are_retried(ctx):
    failed = add_event(timedelta(hours=1), failed_at=utcnow(), attempts=5)
    waiting = add_event(timedelta(hours=1))  # not failed: not retried
    result = run(ctx, "retry", "events", "999999", str(failed), "abc", str(waiting))
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "999999: No such failed event.", "abc: No such failed event.",
        f"{waiting}: No such failed event."]
    assert result.stdout == "Retried 1 event; the next run takes it within a minute.\n"
    db.session.expire_all()
    assert db.session.get(Event, failed).failed_at is None


def test_retry_events_all_goes_in_batches(ctx, monkeypatch):
    from wikinotify import operator_cli

    monkeypatch.setattr(operator_cli, "RETRY_BATCH", 2)
    ids = [add_event(timedelta(hours=1), failed_at=utcnow(), attempts=5) for _ in range(5)]
    result = run(ctx, "retry", "events", "--all")
    assert (result.exit_code, result.stdout) == (
        0, "Retried 5 events; the next run takes them within a minute.\n")
    db.session.expire_all()
    assert db.session.scalar(sa.select(sa.func.count()).where(Event.failed_at.is_not(None))) == 0
    assert [details["event"] for *_, details in audits()] == ids


@pytest.mark.app_config(smtp=True)
def test_retry_mails_all_counts_mails_not_rows(ctx):
    first, second = failed_mail(ctx)
    result = run(ctx, "retry", "mails", "--all")
    assert (result.exit_code, result.stdout) == (
        0, "Retried 1 mail; the next run takes it within a minute.\n")
    db.session.expire_all()
    rows = [db.session.get(Notification, row_id) for row_id in (first, second)]
    assert {row.email_state for row in rows} == {"pending"}
    assert audits() == [("retryNotificationMail", "admin", None,
                         {"mail": first, **cli_actor()})]


@pytest.mark.app_config(smtp=True)
def test_two_rows_of_one_mail_retry_it_once_and_are_no_error(ctx):
    first, second = failed_mail(ctx)
    result = run(ctx, "retry", "mails", str(first), str(second))
    assert (result.exit_code, result.stdout, result.stderr) == (
        0, "Retried 1 mail; the next run takes it within a minute.\n", "")
    assert audits() == [("retryNotificationMail", "admin", None,
                         {"mail": first, **cli_actor()})]


def test_retry_deliveries_all_walks_no_verification(ctx):
    """A failed verification is never retried: --all does not walk it."""
    delivery = db.session.get(Delivery, failed_delivery("https://example.org/hook"))
    delivery.type = verification.TYPE
    db.session.commit()
    assert list(failed_ids(db.session, Kind.DELIVERY, batch=10)) == []


def test_the_command_line_actor_without_a_user_name_is_its_uid(monkeypatch):
    """``kubectl exec`` with an arbitrary uid: no USER in the environment, no passwd
    entry for the uid."""
    import pwd

    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    assert Actor.command_line().details == {"via": "cli", "osUser": f"uid {os.getuid()}"}


@pytest.mark.app_config(WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"])
def test_retry_a_delivery_by_id(ctx):
    delivery_id = failed_delivery("http://127.0.0.1:9/hook")
    result = run(ctx, "retry", "deliveries", str(delivery_id))
    assert result.exit_code == 0, result.output
    db.session.expire_all()
    assert db.session.get(Delivery, delivery_id).state == "pending"
    [(action, kind, actor, details)] = audits()
    assert (action, kind, actor) == ("retryNotificationDelivery", "admin", None)
    assert details["delivery"] == delivery_id and details["via"] == "cli"


def test_nothing_to_retry_says_so(ctx):
    result = run(ctx, "retry", "deliveries", "--all")
    assert (result.exit_code, result.stdout) == (0, "Retried no delivery.\n")


@pytest.mark.parametrize("args", [("events",), ("events", "1", "--all")])
def test_ids_or_all_and_not_both(ctx, args):
    result = run(ctx, "retry", *args)
    assert result.exit_code == 2 and "Give the IDs to retry, or --all" in result.stderr
