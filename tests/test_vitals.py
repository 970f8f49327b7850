"""wikinotify's vital signs (docs/operating.md#the-status-command): the figures Admin →
Notifications, ``flask wikinotify status`` and the metrics read, and the warnings that say
what needs an operator. Real databases, real Redis; workers and ``rq cron`` registered in
RQ's own registries by RQ's own calls."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from rq import Queue

from demo.models import db
from tests.helpers.failures import failed_delivery
from tests.helpers.rq_registry import registered_cron, registered_worker
from tests.helpers.smtp import free_port
from wikinotify import vitals
from wikinotify.models import Delivery, Event, Notification, utcnow
from wikinotify.outbound import verification
from wikinotify.queue import connection, queue_name, queue_names


def measure(app) -> vitals.Vitals:
    with app.app_context():
        return vitals.measure(db.session, app, now=utcnow())


def add_events(*ages: timedelta, **columns) -> None:
    now = utcnow()
    db.session.add_all([Event(kind="page:edit", origin="user", created_at=now - age, **columns)
                        for age in ages])
    db.session.commit()


def about(warnings: list[str], words: str) -> list[str]:
    return [warning for warning in warnings if words in warning]


def test_a_quiet_wiki_with_a_worker_and_a_cron_has_no_warning(app):
    with registered_worker(app), registered_cron(app):
        vital = measure(app)
    assert vital.warnings() == []
    assert (vital.events_waiting, vital.oldest_waiting_age, vital.dead_letters) == (0, None, 0)
    assert (vital.mail_entries_due, vital.mail_failed_24h, vital.deliveries_waiting) == (0, 0, 0)
    assert vital.queue_lengths == dict.fromkeys(queue_names(app), 0)
    assert vital.workers == 1
    assert vital.cron_last_seen_age is not None and vital.cron_last_seen_age < 60
    assert vital.redis_reachable


def test_an_old_waiting_event_and_no_worker_say_what_to_run(app):
    with app.app_context():
        add_events(timedelta(minutes=10), timedelta(seconds=5))
    with registered_cron(app):
        vital = measure(app)
    assert vital.events_waiting == 2
    assert 600 <= vital.oldest_waiting_age < 700
    command = "rq worker --url $REDIS " + " ".join(queue_names(app))
    [backlog] = vital.warnings()  # and not "no worker" again
    assert "oldest waiting event has waited" in backlog
    assert "No worker seems to be running" in backlog and command in backlog


def test_no_worker_says_what_to_run(app):
    with registered_cron(app):
        [no_worker] = measure(app).warnings()
    assert "No RQ worker serves" in no_worker
    assert no_worker.endswith("rq worker --url $REDIS " + " ".join(queue_names(app)))


@pytest.mark.app_config(WIKINOTIFY_BACKLOG_WARNING=900)
def test_a_backlog_younger_than_the_setting_is_no_warning(app):
    with app.app_context():
        add_events(timedelta(minutes=10))
    with registered_worker(app), registered_cron(app):
        assert measure(app).warnings() == []


def test_a_backlog_with_workers_says_they_fall_behind(app):
    with app.app_context():
        add_events(timedelta(minutes=10))
    with registered_worker(app), registered_cron(app):
        [backlog] = measure(app).warnings()
    assert "Fan-out is behind" in backlog


def test_a_queue_no_worker_serves_is_named_when_work_waits_there(app):
    with app.app_context():
        db.session.add(Notification(
            user_id="1", site_id="1", category="watchedPage", variant="edited",
            group_key="test:1", last_event_id=1, in_app=True, email_state="pending",
            email_after=utcnow() - timedelta(minutes=1)))
        db.session.commit()
    mail_queue = queue_name(app, "send_mail")
    with registered_worker(app, [queue_name(app)]), registered_cron(app):
        vital = measure(app)
        assert vital.mail_entries_due == 1
        assert vital.starved_queues == (mail_queue,)
        [starved] = vital.warnings()
    # Nothing waits for deliveries: their unserved queue is no warning.
    assert starved.startswith(f"Work waits on {mail_queue}, which no worker serves")


def test_cron_not_seen_for_two_minutes_is_a_warning(app):
    with registered_worker(app):
        assert measure(app).cron_last_seen_age is None
        [cron] = measure(app).warnings()
        assert "rq cron has not run in the last two minutes" in cron
        with registered_cron(app) as scheduler:
            # Its last heartbeat, three minutes ago: the registry's score is its time.
            client = connection(app)
            client.zadd("rq:cron_schedulers", {scheduler.name: utcnow().timestamp() - 180})
            vital = measure(app)
    assert 180 <= vital.cron_last_seen_age < 240
    assert about(vital.warnings(), "rq cron has not run")


def test_another_applications_cron_does_not_count(app):
    with registered_worker(app), registered_cron(app, queue="another-application"):
        vital = measure(app)
    assert vital.cron_last_seen_age is None
    assert about(vital.warnings(), "rq cron has not run")


def test_another_applications_job_on_wikinotifys_queue_is_no_cron_of_ours(app):
    """A cron of another application that happens to use a queue of the same name."""
    with registered_worker(app), registered_cron(app, func=print):
        vital = measure(app)
    assert vital.cron_last_seen_age is None
    assert about(vital.warnings(), "rq cron has not run")


def test_a_failed_verification_is_no_failed_delivery(app):
    """A verification is never retried (its owner asks for a new one): it is not counted
    among the failed deliveries the status asks to retry."""
    with app.app_context():
        delivery = db.session.get(Delivery, failed_delivery("https://example.org/hook"))
        delivery.type = verification.TYPE
        db.session.commit()
    with registered_worker(app), registered_cron(app):
        assert measure(app).deliveries_failed_24h == 0


def test_dead_letters_and_failed_mail_are_counted_and_warned_of(app):
    with app.app_context():
        add_events(timedelta(hours=1), failed_at=utcnow(), attempts=5, error="boom")
        db.session.add(Notification(
            user_id="1", site_id="1", category="watchedPage", variant="edited",
            group_key="test:2", last_event_id=2, in_app=True, email_state="failed",
            emailed_at=utcnow() - timedelta(hours=1), email_error="550"))
        db.session.commit()
    with registered_worker(app), registered_cron(app):
        vital = measure(app)
    assert (vital.dead_letters, vital.events_waiting, vital.mail_failed_24h) == (1, 0, 1)
    warnings = vital.warnings()
    assert about(warnings, "1 event failed on every attempt")
    assert about(warnings, "flask wikinotify retry events --all")
    assert about(warnings, "1 mail failed in the last 24 hours")
    assert len(warnings) == 2


def test_queued_jobs_are_counted_per_queue(app):
    Queue(queue_name(app), connection=connection(app)).enqueue("wikinotify.jobs.dispatch")
    vital = measure(app)
    assert vital.queue_lengths[queue_name(app)] == 1
    assert sum(vital.queue_lengths.values()) == 1


def test_counts_stop_at_the_cap(app, monkeypatch):
    monkeypatch.setattr(vitals, "COUNT_CAP", 3)
    with app.app_context():
        add_events(*[timedelta(seconds=n) for n in range(5)])
    assert measure(app).events_waiting == 3


def test_redis_down_is_a_warning_not_an_error(app):
    app.config["WIKINOTIFY_REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"
    vital = measure(app)
    assert not vital.redis_reachable
    assert (vital.queue_lengths, vital.workers, vital.cron_last_seen_age) == ({}, 0, None)
    [redis] = vital.warnings()
    assert "Redis cannot be reached" in redis and "WIKINOTIFY_REDIS_URL" in redis


@pytest.mark.app_config(WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"])
def test_deliveries_waiting_with_no_worker_on_their_queue_are_named(app):
    with app.app_context():
        delivery_id = failed_delivery("http://127.0.0.1:9/hook")
        db.session.execute(sa.update(Delivery).where(Delivery.id == delivery_id)
                           .values(state="pending", next_attempt_at=utcnow()))
        db.session.commit()
    deliveries = queue_name(app, "deliver")
    with registered_worker(app, queue_names(app)[:2]), registered_cron(app):
        vital = measure(app)
    assert (vital.deliveries_waiting, vital.starved_queues) == (1, (deliveries,))
    [starved] = vital.warnings()
    assert starved.startswith(f"Work waits on {deliveries}, which no worker serves")


def failed_mails(*users: str) -> None:
    """One failed mail for each of ``users``, of two entries each (a digest): its rows
    share the time it was given up, as the mail run stamps them."""
    for number, user in enumerate(users):
        gave_up = utcnow() - timedelta(hours=1, minutes=number)
        db.session.add_all([Notification(
            user_id=user, site_id="1", category="watchedPage", variant="edited",
            group_key=f"test:{user}:{entry}", last_event_id=entry, in_app=True,
            email_state="failed", emailed_at=gave_up, email_error="550") for entry in (1, 2)])
    db.session.commit()


def test_a_failed_digest_is_one_failed_mail(app):
    with app.app_context():
        failed_mails("1")
    assert measure(app).mail_failed_24h == 1


def test_failed_mails_stop_at_the_cap(app, monkeypatch):
    monkeypatch.setattr(vitals, "COUNT_CAP", 2)
    with app.app_context():
        failed_mails("1", "2", "3")
    assert measure(app).mail_failed_24h == 2
