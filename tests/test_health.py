"""The probes (docs/operating.md#health-checks): ``GET /healthz`` answers while anything else
is down, ``GET /readyz`` says which of the database, Redis and the schema is down, and
neither needs a session, sets a cookie, is cached, or is counted by the wiki's rate limits.
Real databases; a real redis-server of the test's own, stopped; real Alembic migrations."""

from __future__ import annotations

import threading

import pytest
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from sqlalchemy.engine import make_url

from tests.helpers.app import dispose, make_app, seeded_app
from tests.helpers.database import stamp
from tests.helpers.jobs import wait_for
from tests.helpers.relay import Relay
from tests.helpers.smtp import free_port
from wikinotify import health

HEALTHZ = "/_notifications/healthz"
READYZ = "/_notifications/readyz"
ALL_OK = {"database": "ok", "redis": "ok", "schema": "ok"}


@pytest.fixture
def relayed(postgres_url, redis_url):
    """``relayed(**config)``: an app whose PostgreSQL is reached through a
    :class:`~tests.helpers.relay.Relay` (SQLite has no network path to hang), its
    schema at wikinotify's head; the app and the relay."""
    made: list[tuple] = []

    def build(**config):
        url = make_url(postgres_url)
        relay = Relay((url.host or "127.0.0.1", url.port or 5432))
        relayed_url = url.set(host="127.0.0.1", port=relay.port)
        app = make_app(relayed_url.render_as_string(hide_password=False),
                       WIKINOTIFY_REDIS_URL=redis_url, **config)
        stamp(app, health.branch_revisions()[0])
        dispose(app)  # no pooled connection left from the stamp: a probe connects anew
        made.append((app, relay))
        return app, relay

    yield build
    for app, relay in made:
        relay.holding = False
        stamp(app)
        dispose(app)
        relay.stop()


def assert_not_stored(response) -> None:
    assert response.headers["Cache-Control"] == "no-store"
    assert "Set-Cookie" not in response.headers


def test_ready_when_all_three_answer(at_head, client):
    response = client.get(READYZ)
    assert (response.status_code, response.get_json()) == (200, ALL_OK)
    assert_not_stored(response)


def test_healthz_answers_ok_with_nothing_read(client):
    response = client.get(HEALTHZ)
    assert (response.status_code, response.get_data(as_text=True)) == (200, "ok\n")
    assert response.mimetype == "text/plain"
    assert_not_stored(response)


def test_redis_stopped_is_a_503_naming_redis(app, client, own_redis, at_head):
    app.config["WIKINOTIFY_REDIS_URL"] = own_redis.url
    assert client.get(READYZ).get_json() == ALL_OK
    own_redis.stop()
    response = client.get(READYZ)
    assert (response.status_code, response.get_json()) == (
        503, {"database": "ok", "redis": "down", "schema": "ok"})
    assert_not_stored(response)
    # Liveness reads nothing: a Redis outage must not get the web process restarted.
    assert client.get(HEALTHZ).status_code == 200


def test_a_schema_behind_wikinotifys_head_is_a_503_naming_schema(app, client):
    head, revisions = health.branch_revisions()
    previous = revisions[revisions.index(head) + 1]  # walk_revisions: newest first
    stamp(app, previous)
    try:
        response = client.get(READYZ)
        assert (response.status_code, response.get_json()) == (
            503, {"database": "ok", "redis": "ok", "schema": "down"})
    finally:
        stamp(app)


def test_a_database_that_alembic_never_saw_is_not_ready(app, client):
    """Built with create_all: whether it is current, nothing can say (flask db stamp)."""
    stamp(app)
    assert client.get(READYZ).get_json()["schema"] == "down"


def test_a_schema_newer_than_this_code_is_ready(app, client):
    """During a rolling upgrade the database is migrated before the last old process
    stops: an unknown revision with wikinotify's tables present is a newer wikinotify."""
    stamp(app, "f0f0f0f0f0f0")
    try:
        assert client.get(READYZ).get_json() == ALL_OK
    finally:
        stamp(app)


def test_the_real_migrations_are_at_the_head(tmp_path, redis_url):
    import flask_migrate

    app = make_app(f"sqlite:///{tmp_path}/migrated.db", WIKINOTIFY_REDIS_URL=redis_url)
    with app.app_context():
        flask_migrate.upgrade(revision="heads")
    try:
        assert app.test_client().get(READYZ).get_json() == ALL_OK
    finally:
        dispose(app)


def test_a_database_that_does_not_answer_is_a_503_naming_it(redis_url):
    app = make_app(f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/none",
                   WIKINOTIFY_REDIS_URL=redis_url)
    response = app.test_client().get(READYZ)
    assert (response.status_code, response.get_json()) == (
        503, {"database": "down", "redis": "ok", "schema": "down"})
    assert app.test_client().get(HEALTHZ).status_code == 200


def test_the_wikis_rate_limits_never_count_the_probes(app, at_head):
    Limiter(get_remote_address, app=app, default_limits=["1/minute"],
            application_limits=["1/minute"], storage_uri="memory://")
    client = app.test_client()
    for _ in range(3):
        assert client.get(HEALTHZ).status_code == 200
        assert client.get(READYZ).status_code == 200
    assert client.get("/").status_code != 429  # the one request a minute is still there


def test_a_limiter_set_up_before_the_blueprint_never_counts_the_probes(
        monkeypatch, database_url, redis_url):
    """The wiki's Flask-Limiter checks before wikinotify's hooks run: the probes are
    exempted as the blueprint is registered, so even the first probe of the process
    leaves the wiki's allowance to the wiki's own pages."""
    import demo

    set_up = demo._init_extensions

    def with_a_limiter_first(app):
        set_up(app)
        Limiter(get_remote_address, app=app, default_limits=["1/minute"],
                application_limits=["1/minute"], storage_uri="memory://")

    monkeypatch.setattr(demo, "_init_extensions", with_a_limiter_first)
    app = seeded_app(database_url, WIKINOTIFY_REDIS_URL=redis_url)
    stamp(app, health.branch_revisions()[0])
    try:
        client = app.test_client()
        for _ in range(3):
            assert client.get(HEALTHZ).status_code == 200
            assert client.get(READYZ).status_code == 200
        assert client.get("/").status_code != 429  # the one request a minute is still there
    finally:
        stamp(app)
        dispose(app)


@pytest.mark.app_config(WIKINOTIFY_READY_TIMEOUT=0.5)
def test_a_hung_redis_is_down(app, client, hanging_relay, at_head):
    app.config["WIKINOTIFY_REDIS_URL"] = f"redis://127.0.0.1:{hanging_relay.port}/0"
    response = client.get(READYZ)
    assert (response.status_code, response.get_json()) == (
        503, {"database": "ok", "redis": "down", "schema": "ok"})


def test_a_hung_database_is_down_and_asked_once_at_a_time(hanging_relay, redis_url):
    """A database that accepts and never answers (psycopg would wait for ever): the probe
    answers down after the timeout, and the next does not open another connection while
    the first still hangs."""
    app = make_app(f"postgresql+psycopg://nobody@127.0.0.1:{hanging_relay.port}/none",
                   WIKINOTIFY_REDIS_URL=redis_url, WIKINOTIFY_READY_TIMEOUT=0.5)
    client = app.test_client()
    try:
        assert client.get(READYZ).get_json()["database"] == "down"
        wait_for(lambda: len(hanging_relay.accepted) == 1)
        assert client.get(READYZ).get_json()["database"] == "down"
        assert len(hanging_relay.accepted) == 1
    finally:
        hanging_relay.stop()  # the hanging check's connection ends, and its thread
        dispose(app)


def test_probes_that_arrive_together_all_read_a_healthy_database_as_up(relayed):
    """A check already running is joined, not answered "down": a flood of /readyz must
    not turn the real probe's answer into a 503."""
    app, relay = relayed(WIKINOTIFY_READY_TIMEOUT=30)
    relay.holding = True  # the first check waits on the database, the others arrive
    answers: list[int] = []
    probes = [threading.Thread(target=lambda: answers.append(
        app.test_client().get(READYZ).status_code)) for _ in range(5)]
    for probe in probes:
        probe.start()
    wait_for(lambda: relay.held)
    for probe in probes:
        probe.join(0.2)  # a probe answered before the database did is the defect
    relay.holding = False
    relay.release()
    for probe in probes:
        probe.join()
    assert answers == [200] * 5


def test_a_database_back_after_a_hung_check_is_ready_again(relayed):
    """The check's connection hangs for good (a half-open path), the database is back for
    new connections: the probe is bounded, so /readyz says ready again."""
    app, relay = relayed(WIKINOTIFY_READY_TIMEOUT=0.5)
    client = app.test_client()
    relay.holding = True
    assert client.get(READYZ).get_json()["database"] == "down"
    relay.holding = False  # what is held stays held
    wait_for(lambda: client.get(READYZ).status_code == 200, seconds=20)
    assert relay.held  # the hung connection never answered


def test_a_schema_found_at_the_head_is_asked_again_later(app, client, at_head, monkeypatch):
    """A restored older backup: "at the head" is not remembered for ever."""
    assert client.get(READYZ).get_json() == ALL_OK
    monkeypatch.setattr(health, "AT_HEAD_FOR", 0.0)  # the time it is trusted has passed
    head, revisions = health.branch_revisions()
    stamp(app, revisions[revisions.index(head) + 1])
    assert client.get(READYZ).get_json()["schema"] == "down"
