"""The demo as a host people copy (docs/operating.md#deploying): a secret key of its own kept in
the instance folder, a mailbox for administrators while the sink runs, a SameSite session
cookie, and an engine that survives dropped connections and keeps parameters out of errors."""

from __future__ import annotations

import os
import stat
import threading
import time
import uuid

import pytest
import sqlalchemy as sa
from flask import Flask
from flask.sessions import SecureCookieSessionInterface

from demo import create_app
from demo.cli import seed, start_mail_sink
from demo.keyfile import instance_secret_key
from demo.mailbox import list_messages, store
from demo.models import User, db
from tests.helpers.app import make_app
from tests.helpers.database import connections_named, named_database_url, terminate_connections
from tests.helpers.smtp import free_port
from tests.helpers.web import login

#: The key the demo shipped with before it generated its own.
OLD_KEY = "dev-only-change-me"
ADMIN_SETTINGS = "/_notifications/api/admin/settings"


@pytest.fixture
def no_env_key(monkeypatch):
    """No FLASK_SECRET_KEY in the environment, whatever the shell running the tests has."""
    monkeypatch.delenv("FLASK_SECRET_KEY", raising=False)


def keyless_app(instance, **config):
    """The demo built the way wsgi.py builds it (no key configured), in ``instance``."""
    return create_app({"TESTING": True, **config}, instance_path=str(instance))


# -- item 10: the secret key ------------------------------------------------------------


def test_without_a_configured_key_one_is_generated_and_kept(tmp_path, no_env_key):
    key = keyless_app(tmp_path / "instance").secret_key
    assert key and key != OLD_KEY
    assert len(key) >= 32
    assert keyless_app(tmp_path / "instance").secret_key == key  # the next start reads it
    assert keyless_app(tmp_path / "other").secret_key != key  # one per instance, not a constant


def test_the_key_file_is_readable_by_its_owner_only(tmp_path, no_env_key):
    key = keyless_app(tmp_path / "instance").secret_key
    path = tmp_path / "instance" / "secret_key"
    assert path.read_text().strip() == key
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def _start_together(folder: str, count: int = 8) -> list[str]:
    """The keys ``count`` threads find when they all start on ``folder`` at once."""
    ready = threading.Barrier(count)
    keys = []

    def start():
        ready.wait()
        keys.append(instance_secret_key(folder))

    threads = [threading.Thread(target=start) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return keys


def test_processes_starting_at_once_share_one_key(tmp_path):
    # Threads stand in for processes: what matters is that they meet at the file. Several
    # rounds, as a race is not lost every time.
    for attempt in range(20):
        folder = tmp_path / str(attempt)
        folder.mkdir()
        keys = _start_together(str(folder))
        assert len(keys) == 8 and len(set(keys)) == 1
        assert os.listdir(folder) == ["secret_key"]  # and no partial file is left behind


def test_a_configured_key_wins_and_writes_no_file(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASK_SECRET_KEY", "from-the-environment")
    assert keyless_app(tmp_path / "a").secret_key == "from-the-environment"
    assert keyless_app(tmp_path / "b", SECRET_KEY="from-config").secret_key == "from-config"
    assert not (tmp_path / "a" / "secret_key").exists()
    assert not (tmp_path / "b" / "secret_key").exists()


def _admin_cookie(app, key: str) -> str:
    """A session cookie for the administrator, signed with ``key``."""
    with app.app_context():
        admin_id = db.session.scalar(sa.select(User.id).filter_by(username="admin"))
    signer = Flask(__name__)
    signer.secret_key = key
    serializer = SecureCookieSessionInterface().get_signing_serializer(signer)
    return serializer.dumps({"_user_id": str(admin_id), "_fresh": True})


@pytest.fixture
def served(app, tmp_path, no_env_key):
    """The ``app`` fixture's wiki, served the way wsgi.py serves it: no key configured."""
    settings = {key: app.config[key] for key in (
        "SQLALCHEMY_DATABASE_URI", "WIKINOTIFY_REDIS_URL", "WIKINOTIFY_QUEUE")}
    served = keyless_app(tmp_path / "instance", **settings)
    yield served
    with served.app_context():
        db.engine.dispose()


def test_a_cookie_signed_with_the_old_constant_is_refused(app, served):
    name = served.config["SESSION_COOKIE_NAME"]

    forged = served.test_client()
    forged.set_cookie(name, _admin_cookie(app, OLD_KEY))
    assert forged.get(ADMIN_SETTINGS).status_code == 401

    # The same cookie signed with the key the app really uses is accepted: the refusal
    # above is the key's doing, not a malformed cookie's.
    genuine = served.test_client()
    genuine.set_cookie(name, _admin_cookie(app, served.secret_key))
    assert genuine.get(ADMIN_SETTINGS).status_code == 200


# -- item 11: the mailbox ---------------------------------------------------------------


@pytest.fixture
def sink_folder(tmp_path):
    """The sink's folder, holding one message for alice."""
    folder = str(tmp_path / "mailbox")
    store(folder, "00000000000000000001", b"To: alice@example.com\r\nSubject: For alice\r\n\r\nHi")
    return folder


pytestmark = pytest.mark.app_config(lambda sink_folder: {"DEMO_MAILBOX": sink_folder})


def test_an_administrator_reads_the_mailbox(app, client):
    login(client, "admin")
    response = client.get("/demo/mailbox")
    assert response.status_code == 200
    assert "For alice" in response.get_data(as_text=True)
    assert 'href="/demo/mailbox"' in client.get("/").get_data(as_text=True)


def test_anyone_else_is_refused_the_mailbox(app, client, sink_folder):
    assert client.get("/demo/mailbox").status_code == 302  # a guest signs in first
    assert client.get("/demo/mailbox").location.startswith("/login")
    login(client, "alice")
    assert client.get("/demo/mailbox").status_code == 403
    assert client.post("/demo/mailbox/clear").status_code == 403
    assert len(list_messages(sink_folder)) == 1
    assert "/demo/mailbox" not in client.get("/").get_data(as_text=True)


@pytest.mark.parametrize("app_config", [{}])  # the defaults: no sink configured
def test_without_the_sink_there_is_no_mailbox(app, client):
    assert app.config["DEMO_MAILBOX"] is None
    login(client, "admin")
    assert client.get("/demo/mailbox").status_code == 404
    assert client.post("/demo/mailbox/clear").status_code == 404
    assert "/demo/mailbox" not in client.get("/").get_data(as_text=True)


def test_demo_run_opens_the_mailbox_when_it_starts_its_sink(tmp_path):
    app = create_app(
        {"TESTING": True, "SECRET_KEY": "test", "MAIL_PORT": free_port()},
        instance_path=str(tmp_path),
    )
    sink = start_mail_sink(app)
    try:
        assert sink is not None
        assert app.config["DEMO_MAILBOX"] == str(tmp_path / "mailbox")
    finally:
        sink.stop()


def test_demo_run_with_a_real_relay_has_no_mailbox(tmp_path):
    app = create_app(
        {"TESTING": True, "SECRET_KEY": "test", "MAIL_SERVER": "smtp.example.com"},
        instance_path=str(tmp_path),
    )
    assert start_mail_sink(app) is None
    assert app.config["DEMO_MAILBOX"] is None


# -- item 12: the session cookie and the engine -----------------------------------------


def test_the_session_cookie_is_same_site_lax(app, client):
    cookies = login(client, "alice").headers.getlist("Set-Cookie")
    session = [c for c in cookies if c.startswith(app.config["SESSION_COOKIE_NAME"] + "=")]
    assert session and "SameSite=Lax" in session[0]


def test_failed_statements_do_not_show_their_parameters(app):
    secret = f"secret-{uuid.uuid4().hex}"
    with app.app_context():
        with pytest.raises(sa.exc.DBAPIError) as error:
            db.session.execute(sa.text("INSERT INTO no_such_table (x) VALUES (:x)"), {"x": secret})
        db.session.rollback()
    assert "no_such_table" in str(error.value)
    assert secret not in str(error.value)


def test_the_engine_options_of_the_caller_still_apply(tmp_path):
    own = {"SQLALCHEMY_ENGINE_OPTIONS": {"pool_recycle": 300}}
    app = create_app({"TESTING": True, "SECRET_KEY": "test", **own},
                     instance_path=str(tmp_path))
    expected = {"pool_pre_ping": True, "hide_parameters": True, "pool_recycle": 300}
    assert app.config["SQLALCHEMY_ENGINE_OPTIONS"] == expected


def test_a_connection_killed_server_side_is_replaced_unnoticed(postgres_url, redis_url, queue_name):
    # A name of this test's own, so only its connections are killed: other tests share
    # the server.
    name = f"wikinotify-test-{uuid.uuid4().hex[:12]}"
    app = make_app(named_database_url(postgres_url, name),
                   WIKINOTIFY_REDIS_URL=redis_url, WIKINOTIFY_QUEUE=queue_name)
    with app.app_context():
        seed()
        db.session.remove()
    client = app.test_client()
    assert client.get("/").status_code == 200  # the pool now holds a connection

    try:
        assert connections_named(name)
        terminate_connections(name)
        deadline = time.monotonic() + 10
        while connections_named(name) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not connections_named(name)
        assert client.get("/").status_code == 200  # a 500 without pool_pre_ping
    finally:
        with app.app_context():
            db.session.remove()
            db.engine.dispose()


def test_the_demo_refuses_a_request_body_over_a_megabyte(app, client):
    login(client, "bob")
    response = client.post("/pages/home/edit", data={"title": "Home", "content": "x" * 2_000_000})
    assert response.status_code == 413


@pytest.mark.parametrize("raw_id", [str(2**31), str(2**63), "9" * 40])
def test_an_id_past_what_the_demo_holds_is_a_404_or_a_400_never_a_500(app, client, raw_id):
    """The demo's keys are INTEGER (32 bits on PostgreSQL): a larger id names nothing, and
    must not reach a database that refuses to compare it."""
    login(client, "carol")
    for url in (f"/comments/{raw_id}/edit", f"/comments/{raw_id}/delete",
                f"/submissions/{raw_id}/approve", f"/submissions/{raw_id}/reject"):
        assert client.post(url, data={"body": "Edited"}).status_code == 404, url
    reply = client.post("/pages/home/comments", data={"body": "Hi", "parent_id": raw_id})
    assert reply.status_code == 400
    assert "The comment you replied to is not on this page." in reply.get_data(as_text=True)


@pytest.mark.parametrize("elsewhere", ["//evil.example/", "/\t/evil.example/", "/\\evil.example",
                                       "/pages/home\r\nSet-Cookie: a=b", "https://evil.example/"])
def test_signing_in_never_sends_the_reader_off_site(app, client, elsewhere):
    response = client.post("/login", query_string={"next": elsewhere},
                           data={"username": "alice", "password": "password"})
    assert (response.status_code, response.location) == (302, "/")
