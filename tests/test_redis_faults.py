"""Redis hung or gone never slows or fails the wiki's own request
(docs/operating.md#failures-and-dead-letters): the kick after commit and the one-click counter give
up within a second, a short circuit breaker then leaves Redis alone, the event waits safely in the
outbox, and the minute cron delivers it once Redis answers again. A real Redis server process of the
test's own is stopped and started; a real socket that never answers stands in for a hung one."""

from __future__ import annotations

import time

import pytest

from demo.models import db
from tests.helpers.jobs import enqueue_cron_jobs, run_jobs, run_worker
from tests.helpers.web import login
from tests.helpers.wiki import entries_for, events
from wikinotify import queue


@pytest.fixture
def hung_redis(hanging_relay):
    """A server that accepts and never answers: a hung Redis, seen from the client."""
    return hanging_relay


pytestmark = pytest.mark.app_config(
    lambda hung_redis: {"WIKINOTIFY_REDIS_URL": f"redis://127.0.0.1:{hung_redis.port}/0"})


def save(client, content: str):
    started = time.monotonic()
    response = client.post("/pages/handbook/onboarding/edit",
                           data={"title": "Onboarding", "content": content})
    return response, time.monotonic() - started


def test_a_hung_redis_costs_a_save_under_a_second_then_nothing(app, client, hung_redis,
                                                              redis_url):
    login(client, "bob")
    first, waited = save(client, "While Redis hangs")
    assert first.status_code == 302
    # The old client waited out a 5 s read timeout; the kick now gives up well inside 1 s.
    assert waited < queue.QUICK_TIMEOUT * 2 + 0.5, waited
    assert len(hung_redis.accepted) == 1
    second, _ = save(client, "Still hanging")
    assert second.status_code == 302
    assert len(hung_redis.accepted) == 1  # the breaker is open: no second try
    with app.app_context():
        assert len(events()) == 2  # safe in the outbox

    # Redis is back: the minute cron's dispatch delivers both.
    app.config["WIKINOTIFY_REDIS_URL"] = redis_url
    enqueue_cron_jobs(app)
    run_jobs(app)
    with app.app_context():
        [entry] = entries_for("alice")
        assert entry.count == 2


def test_a_refused_one_click_token_is_answered_while_redis_hangs(app, client, hung_redis):
    started = time.monotonic()
    response = client.post("/_notifications/unsubscribe", query_string={"t": "junk"},
                           data={"List-Unsubscribe": "One-Click"})
    assert response.status_code == 400
    assert time.monotonic() - started < queue.QUICK_TIMEOUT * 2 + 0.5


# -- the fault scenario: Redis stopped during a burst, and started again ---------------------


@pytest.mark.app_config(lambda own_redis: {"WIKINOTIFY_REDIS_URL": own_redis.url},
                        WIKINOTIFY_MAIL_ENABLED=False)
class TestRedisStoppedDuringABurst:
    @pytest.mark.slow
    def test_every_event_is_delivered_and_no_request_failed(self, app, client, own_redis):
        login(client, "bob")
        codes = []
        for n in range(100):
            if n == 30:
                own_redis.stop()
            if n == 70:
                own_redis.start()
            codes.append(save(client, f"Burst {n}")[0].status_code)
        assert codes == [302] * 100
        with app.app_context():
            assert len(events()) == 100
        enqueue_cron_jobs(app)
        run_worker(app)
        with app.app_context():
            db.session.expire_all()
            assert all(e.processed_at is not None for e in events())
            [entry] = entries_for("alice")
            assert entry.count == 100
