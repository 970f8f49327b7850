"""``GET /_notifications/metrics`` (docs/operating.md#metrics): Prometheus's text format, parsed
with ``prometheus_client``'s own parser from a real scrape, answered only to the configured
bearer token; counters that real events, mails and deliveries move by what the jobs did,
kept in Redis where no forked process loses them; and the alerting rules shipped in
``docs/prometheus-rules.yml`` name only metrics the scrape has."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis

from demo.extensions import notify
from demo.models import db
from tests.helpers.database import empty_everything
from tests.helpers.jobs import run_jobs, run_worker
from tests.helpers.receiver import Receiver
from tests.helpers.wiki import (
    add_users,
    add_watches,
    edit,
    events,
    mail_due_for_readers,
    page,
    prefer,
    user,
)
from wikinotify import counters, queue, vitals
from wikinotify.inbox import stream_places
from wikinotify.models import Delivery, Endpoint, Event, Notification, utcnow
from wikinotify.outbound import secrets_box, standard_webhooks

ROOT = Path(__file__).resolve().parent.parent
URL = "/_notifications/metrics"
TOKEN = "s3cret-scrape-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}

pytestmark = [
    pytest.mark.app_config(smtp=True, WIKINOTIFY_METRICS_TOKEN=TOKEN,
                           WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"]),
    pytest.mark.mail_delay(0),
]

@pytest.fixture
def database_url(postgres_url):
    """PostgreSQL only: the counters live in Redis, whatever the database."""
    empty_everything(postgres_url)
    return postgres_url


#: A sample: its name and its labels.
Sample = tuple[str, frozenset[tuple[str, str]]]


def scrape(client) -> dict[Sample, float]:
    """Every sample of a real scrape, parsed as Prometheus parses it."""
    response = client.get(URL, headers=BEARER)
    assert response.status_code == 200, response.data[:500]
    assert response.mimetype == "text/plain"
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(response.get_data(as_text=True))
            for s in family.samples}


def moved(before: dict[Sample, float], after: dict[Sample, float]) -> dict[Sample, float]:
    """The samples whose value changed, by how much (gauges and the source's up aside)."""
    return {k: after[k] - before.get(k, 0) for k in after
            if k[0].endswith("_total") and after[k] != before.get(k, 0)}


def total(name: str, **labels: str) -> Sample:
    return f"{name}_total", frozenset(labels.items())


def test_a_real_event_moves_each_counter_by_what_the_jobs_did(ctx, smtp, client):
    before = scrape(client)
    edit("handbook/onboarding", "bob", "A new paragraph.")
    [event] = events()
    run_jobs(ctx)  # the fan-out, then the mail run it kicks
    written = db.session.scalar(sa.select(sa.func.count()).select_from(Notification)
                                .where(Notification.last_event_id == event.id))
    assert written >= 1 and len(smtp.inbox.raw) >= 1
    assert moved(before, scrape(client)) == {
        total("wikinotify_events_emitted"): 1,
        total("wikinotify_events_fanned_out"): 1,
        total("wikinotify_entries_written"): written,
        total("wikinotify_mails_sent"): len(smtp.inbox.raw),
    }


def test_what_forked_work_horses_count_reaches_the_scrape_of_another_process(ctx, client):
    """RQ's plain worker forks a work horse per job, which ends with it: its counts are
    in Redis, where the web process that answers the scrape reads them."""
    before = scrape(client)
    edit("handbook/onboarding", "bob", "Counted in a work horse.")
    run_worker(ctx, forking=True)
    after = moved(before, scrape(client))
    assert after[total("wikinotify_events_fanned_out")] == 1
    assert after[total("wikinotify_mails_sent")] >= 1


@pytest.mark.app_config(WIKINOTIFY_METRICS_TOKEN=TOKEN, WIKINOTIFY_MAIL_ENABLED=False,
                        WIKINOTIFY_FANOUT_RANGE_SIZE=100, WIKINOTIFY_FANOUT_SPLIT_ALONE=True)
def test_a_split_event_is_fanned_out_once_with_every_ranges_entries(ctx, client):
    target = page("handbook/onboarding")
    add_watches(target, add_users(249))  # with alice: 250 watchers, three ranges
    before = scrape(client)
    edit("handbook/onboarding", "bob", "For everyone.")
    [event] = events()
    run_jobs(ctx)  # the dispatch splits it; fanout_range jobs take the ranges
    [event] = events()
    assert event.ranges == 3 and event.processed_at is not None
    written = db.session.scalar(sa.select(sa.func.count()).select_from(Notification)
                                .where(Notification.last_event_id == event.id))
    assert moved(before, scrape(client)) == {
        total("wikinotify_events_emitted"): 1,
        total("wikinotify_events_fanned_out"): 1,
        total("wikinotify_entries_written"): written,
    }


def test_an_emit_the_wiki_rolls_back_is_never_counted(ctx, client):
    def emit() -> None:
        target = page("handbook/onboarding")
        assert notify.emit("page:edit", site_id=target.site_id, actor_id=user("bob").id,
                           page_id=target.id, snapshot={"title": target.title}) is not None

    emit()
    db.session.rollback()
    emit()
    db.session.commit()
    assert moved({}, scrape(client)) == {total("wikinotify_events_emitted"): 1}


def emit_edit() -> None:
    target = page("handbook/onboarding")
    assert notify.emit("page:edit", site_id=target.site_id, actor_id=user("bob").id,
                       page_id=target.id, snapshot={"title": target.title}) is not None


def kicked(app) -> bool:
    """Whether a fan-out run was asked for (the kick's hold is set, its job queued)."""
    return queue.connection(app).exists(queue.kick_key(app, queue.Job.DISPATCH)) == 1


def test_a_savepoint_the_wiki_rolls_back_keeps_the_emit_before_it(ctx, client):
    """The usual IntegrityError pattern after an emit: the savepoint's rollback is not the
    transaction's, and the event committed with it is kicked and counted."""
    emit_edit()
    db.session.begin_nested().rollback()
    db.session.commit()
    assert len(events()) == 1
    assert kicked(ctx)
    assert moved({}, scrape(client)) == {total("wikinotify_events_emitted"): 1}


def test_an_emit_inside_a_savepoint_the_wiki_rolls_back_is_never_counted(ctx, client):
    emit_edit()
    savepoint = db.session.begin_nested()
    emit_edit()  # the same page's edit again: a second event
    savepoint.rollback()
    db.session.commit()
    assert len(events()) == 1
    assert moved({}, scrape(client)) == {total("wikinotify_events_emitted"): 1}


def test_an_emit_inside_a_released_savepoint_waits_for_the_commit(ctx, client):
    with db.session.begin_nested():
        emit_edit()
    assert not kicked(ctx)  # released, not committed: nothing is sure yet
    db.session.commit()
    assert kicked(ctx)
    assert moved({}, scrape(client)) == {total("wikinotify_events_emitted"): 1}


def test_each_mail_failure_is_counted_by_its_class_and_each_skip_by_its_reason(ctx, smtp,
                                                                               client):
    before = scrape(client)
    refused, sent, unwanted = mail_due_for_readers(3)
    smtp.inbox.refuse = {refused: "550 5.1.1 No such user here"}
    prefer("reader2", "watchedPage", email=False)
    queue.enqueue(ctx, queue.Job.SEND_MAIL)
    run_jobs(ctx)
    assert smtp.inbox.recipients == [sent]
    assert moved(before, scrape(client)) == {
        total("wikinotify_mails_sent"): 1,
        total("wikinotify_mail_failures", error_class="permanent"): 1,
        total("wikinotify_mail_entries_skipped", reason="preference"): 1,
    }


def test_deliveries_are_counted_by_channel_and_the_state_each_attempt_left(ctx, client):
    receiver = Receiver()
    try:
        receiver.answer("/in", 500)
        endpoint = Endpoint(kind="webhook", owner_id=str(user("alice").id),
                            url=receiver.url("/in"), categories=["watchedPage"],
                            secret_encrypted=secrets_box.seal(standard_webhooks.new_secret()),
                            state="active", verified_at=utcnow())
        db.session.add(endpoint)
        db.session.flush()
        db.session.add(Delivery(endpoint_id=endpoint.id, type="webhook.test",
                                message_id=standard_webhooks.new_message_id(),
                                payload={"message": "hello"}, state="pending",
                                next_attempt_at=utcnow()))
        db.session.commit()
        before = scrape(client)
        queue.enqueue(ctx, queue.Job.DELIVER)
        run_jobs(ctx)
        assert len(receiver.at("/in")) == 1
    finally:
        receiver.close()
    assert moved(before, scrape(client)) == {
        total("wikinotify_deliveries", channel="webhook", state="pending"): 1,
    }


def test_every_series_is_there_at_zero_before_anything_is_counted(ctx, client):
    samples = scrape(client)
    assert samples[total("wikinotify_mail_failures", error_class="transient")] == 0
    assert samples[total("wikinotify_deliveries", channel="chat", state="delivered")] == 0
    assert samples[total("wikinotify_mail_entries_skipped", reason="not_visible")] == 0
    assert samples[("wikinotify_metrics_source_up", frozenset({("source", "redis")}))] == 1


def gauge(samples: dict[Sample, float], name: str, **labels: str) -> float:
    return samples[name, frozenset(labels.items())]


def test_the_gauges_read_the_outbox_mail_and_workers_as_they_are_now(ctx, client):
    edit("handbook/onboarding", "bob", "Waiting for a worker.")
    waiting = scrape(client)
    assert gauge(waiting, "wikinotify_events_waiting") == 1
    assert gauge(waiting, "wikinotify_outbox_oldest_waiting_age_seconds") >= 0
    assert gauge(waiting, "wikinotify_queue_jobs", queue=ctx.config["WIKINOTIFY_QUEUE"]) == 1
    assert gauge(waiting, "wikinotify_queue_starved",
                 queue=ctx.config["WIKINOTIFY_QUEUE"]) == 1  # no worker serves it
    assert gauge(waiting, "wikinotify_workers") == 0
    assert gauge(waiting, "wikinotify_cron_last_seen_age_seconds") == math.inf
    run_jobs(ctx)
    done = scrape(client)
    assert gauge(done, "wikinotify_events_waiting") == 0
    assert gauge(done, "wikinotify_outbox_oldest_waiting_age_seconds") == 0
    assert gauge(done, "wikinotify_mail_entries_due") == 0  # the mail run took it
    db.session.execute(sa.update(Event).values(failed_at=utcnow(), attempts=5))
    db.session.commit()
    assert gauge(scrape(client), "wikinotify_dead_letters") == 1


@pytest.mark.app_config(WIKINOTIFY_METRICS_TOKEN=TOKEN, WIKINOTIFY_BACKLOG_WARNING=90)
def test_the_thresholds_the_alerts_compare_with_are_the_wikis_own(ctx, client):
    samples = scrape(client)
    assert gauge(samples, "wikinotify_backlog_warning_seconds") == 90
    assert gauge(samples, "wikinotify_cron_silence_seconds") == vitals.CRON_SILENCE


def test_the_alerts_thresholds_are_read_from_the_scrape_not_copied(ctx):
    """The outbox and cron alerts compare with the wiki's setting and the status
    command's bound as the scrape exposes them: no number of their own to drift."""
    yaml = pytest.importorskip("yaml", reason="PyYAML reads docs/prometheus-rules.yml")
    rules = yaml.safe_load((ROOT / "docs" / "prometheus-rules.yml").read_text())
    exprs = {rule["alert"]: rule["expr"] for group in rules["groups"] for rule in group["rules"]}
    assert "wikinotify_backlog_warning_seconds" in exprs["WikinotifyOutboxBehind"]
    assert "wikinotify_cron_silence_seconds" in exprs["WikinotifyCronMissing"]
    for alert in ("WikinotifyOutboxBehind", "WikinotifyCronMissing"):
        assert not re.search(r"[<>]=?\s*\d", exprs[alert]), exprs[alert]


@pytest.mark.app_config(WIKINOTIFY_METRICS_TOKEN=TOKEN, WIKINOTIFY_READY_TIMEOUT=1,
                        WIKINOTIFY_REDIS_URL="redis://127.0.0.1:1/0")
def test_with_redis_down_the_scrape_says_so_and_still_shows_the_database(ctx, client):
    samples = scrape(client)
    assert gauge(samples, "wikinotify_metrics_source_up", source="redis") == 0
    assert gauge(samples, "wikinotify_metrics_source_up", source="database") == 1
    assert gauge(samples, "wikinotify_events_waiting") == 0
    names = {name for name, _ in samples}
    assert "wikinotify_mails_sent_total" not in names and "wikinotify_workers" not in names


def test_open_streams_are_counted_across_processes_from_their_places_in_redis(ctx, client):
    gauge = ("wikinotify_open_streams", frozenset())
    assert scrape(client)[gauge] == 0
    for user_id, place in (("1", "a"), ("1", "b"), ("2", "c")):
        stream_places.take(ctx, user_id, place, limit=5)
    stream_places.take(ctx, "3", "lapsed", limit=5, lease=-1)  # its process died
    stream_places.give_back(ctx, "2", "c")  # its stream ended
    stream_places.take(ctx, "2", "d", limit=5)
    stream_places.take(ctx, "1", "e", limit=2)  # past her limit: her oldest stream ends
    assert scrape(client)[gauge] == 3


def test_a_redis_error_while_counting_is_logged_and_never_raised(ctx, caplog):
    nowhere = Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)
    counters.add(ctx, {counters.MAILS_SENT.field(): 1}, client=nowhere)
    assert "could not add to the metrics' counters" in caplog.text


def test_a_label_value_outside_the_vocabulary_is_refused():
    with pytest.raises(ValueError, match="error_class"):
        counters.MAIL_FAILURES.field("smtp said no")


# -- who may scrape -------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer wrong-token"},
    {"Authorization": f"Basic {TOKEN}"},
    {"Authorization": TOKEN},
    {"Authorization": f"Bearer {TOKEN}x"},
])
def test_without_the_very_token_the_route_is_not_there(client, headers):
    response = client.get(URL, headers=headers)
    assert response.status_code == 404
    assert TOKEN not in response.get_data(as_text=True)


@pytest.mark.app_config(WIKINOTIFY_METRICS_TOKEN=None)
def test_with_no_token_set_the_route_is_not_there_for_anyone(client):
    assert client.get(URL, headers=BEARER).status_code == 404
    assert client.get(URL, headers={"Authorization": "Bearer "}).status_code == 404


def test_the_token_is_never_logged(ctx, client, caplog):
    caplog.set_level("DEBUG")
    scrape(client)
    client.get(URL, headers={"Authorization": "Bearer wrong-token"})
    assert TOKEN not in caplog.text and "wrong-token" not in caplog.text


def test_the_wikis_rate_limits_never_count_the_scrapes(app, client):
    Limiter(get_remote_address, app=app, default_limits=["1/minute"],
            application_limits=["1/minute"], storage_uri="memory://")
    for _ in range(3):
        scrape(client)


# -- the alerting rules ---------------------------------------------------------------------


def test_the_alerting_rules_name_only_metrics_the_scrape_has(ctx, client):
    yaml = pytest.importorskip("yaml", reason="PyYAML reads docs/prometheus-rules.yml")
    rules = yaml.safe_load((ROOT / "docs" / "prometheus-rules.yml").read_text())
    exposed = {name for name, _ in scrape(client)}
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert {"WikinotifyOutboxBehind", "WikinotifyDeadLetters",
            "WikinotifyMailFailing"} <= {rule["alert"] for rule in alerts}
    for rule in alerts:
        named = set(re.findall(r"\bwikinotify_\w+", rule["expr"]))
        assert named, f"{rule['alert']} names no wikinotify metric"
        assert named <= exposed, f"{rule['alert']} names {named - exposed}"
        assert rule["annotations"]["runbook_url"].endswith(
            "docs/operating.md#" + rule["alert"].lower())
