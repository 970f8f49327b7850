"""A stream handed off by gunicorn's gevent worker (docs/operating.md#serving-many-open-streams):
once open, its connection is its hub's, which writes its events, checks and keep-alives
and ends it; no greenlet waits for it. The same rules as a stream a server iterates
(tests/test_live.py, tests/test_stream_limits.py), over a real gunicorn, real Redis and
real sockets, one server for the whole module."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa

from demo.models import db
from tests.helpers import tls
from tests.helpers.app import ROOT, dispose, seeded_app
from tests.helpers.database import PostgresSchema, postgres_or_skip
from tests.helpers.jobs import run_jobs
from tests.helpers.sse import STREAM, WAIT, EventStream, request, session_cookie
from tests.helpers.wiki import edit, user
from wikinotify.inbox import live, stream_places
from wikinotify.models import Base as WikiNotifyBase
from wikinotify.queue import connection

GUNICORN = os.path.join(os.path.dirname(sys.executable), "gunicorn")
#: The server's bounds: few, so a test reaches them.
PER_PROCESS, PER_ACCOUNT, KEEPALIVE = 3, 1, 0.5
ACCOUNTS = ("alice", "bob", "carol", "dave", "admin")


@pytest.fixture(scope="module")
def served(redis_url):
    """The demo wiki on PostgreSQL under ``gunicorn -k gevent`` (one worker: one hub, one
    process bound), and the same wiki in this process, to commit and publish as the
    workers do; ``(app, base URL)``."""
    schema = PostgresSchema(postgres_or_skip(), f"wikinotify_handoff_{uuid.uuid4().hex[:10]}")
    url = schema.create()
    engine = sa.create_engine(url)
    db.metadata.create_all(engine)
    WikiNotifyBase.metadata.create_all(engine)
    engine.dispose()
    queue = f"wikinotify-test-{uuid.uuid4().hex[:10]}"
    app = seeded_app(url, WIKINOTIFY_REDIS_URL=redis_url, WIKINOTIFY_QUEUE=queue)
    try:
        with _gunicorn(app) as (_, base):
            yield app, base
    finally:
        dispose(app)
        schema.drop()


@contextmanager
def _gunicorn(app, *workers: str, settings: dict[str, str] | None = None,
              tls_in: Path | None = None, access_log: Path | None = None,
              ) -> Iterator[tuple[subprocess.Popen, str]]:
    """``app``'s database, Redis and queue served by a gunicorn of its own (``workers``:
    its worker class options, gevent's by default; ``settings``: more ``FLASK_``
    variables; ``tls_in``: a directory for the certificate of a gunicorn that speaks TLS
    itself, whose base URL is then ``https``; ``access_log``: its ``--access-logfile``)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "FLASK_SECRET_KEY": "handoff-secret",
           "FLASK_SQLALCHEMY_DATABASE_URI": app.config["SQLALCHEMY_DATABASE_URI"],
           "FLASK_WTF_CSRF_ENABLED": "false",
           "FLASK_WIKINOTIFY_REDIS_URL": app.config["WIKINOTIFY_REDIS_URL"],
           "FLASK_WIKINOTIFY_QUEUE": app.config["WIKINOTIFY_QUEUE"],
           "FLASK_WIKINOTIFY_STREAM_PER_PROCESS": str(PER_PROCESS),
           "FLASK_WIKINOTIFY_STREAM_PER_ACCOUNT": str(PER_ACCOUNT),
           "WIKINOTIFY_TEST_KEEPALIVE_SECONDS": str(KEEPALIVE), **(settings or {})}
    certified: list[str] = []
    if tls_in is not None:
        cert, key = tls.server_files(tls_in)
        certified = ["--certfile", cert, "--keyfile", key]
    server = subprocess.Popen(
        [GUNICORN, "-w", "1", *(workers or ("-k", "gevent")), *certified,
         *(["--access-logfile", str(access_log)] if access_log else []),
         "-b", f"127.0.0.1:{port}", "--graceful-timeout", "1", "--log-level", "warning",
         "tests.helpers.handoff_app:app"], cwd=ROOT, env=env)
    base = f"{'https' if certified else 'http'}://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                request(base, "GET", "/login")
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "no gunicorn"
                time.sleep(0.2)
        yield server, base
    finally:
        server.terminate()
        server.wait(timeout=30)


def _places(app, name: str) -> int:
    with app.app_context():
        key = stream_places.places_key(app, str(user(name).id))
    return connection(app).zcard(key)


def _given_back(app, names=ACCOUNTS) -> bool:
    """Whether every place of these accounts was given back within :data:`WAIT`."""
    deadline = time.monotonic() + WAIT
    while any(_places(app, name) for name in names):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture
def opened(served):
    """Streams a test opens, closed after it; then every place is given back (a stream
    whose client closed is noticed at its next keep-alive)."""
    app, _ = served
    streams: list[EventStream] = []
    yield streams
    for stream in streams:
        stream.close()
    assert _given_back(app)


def _open(served, opened, name: str, cookie: str | None = None) -> EventStream:
    _, base = served
    stream = EventStream(base, cookie or session_cookie(base, name))
    opened.append(stream)
    return stream


def _summaries(stream: EventStream) -> list[str]:
    return [block for block in stream.rest() if "event: summary" in block]


def test_the_head_and_first_summary_are_the_streams_own_then_a_commit_reaches_it(
        served, opened):
    app, _ = served
    alice = _open(served, opened, "alice")
    assert alice.response.status == 200
    assert alice.response.getheader("Content-Type").startswith("text/event-stream")
    # Written by the stream, not by gunicorn (which says who it is): handed off.
    assert alice.response.getheader("Server") is None
    assert alice.response.getheader("Connection") == "close"
    first_id, first = alice.next_summary()
    assert alice.blocks[0].startswith("retry: ")
    with app.app_context():
        edit("handbook/onboarding", "bob", f"An edit {uuid.uuid4()}")  # alice watches it
    run_jobs(app)  # the fan-out commits, then publishes
    changed_id, changed = alice.next_summary()
    assert changed_id != first_id and changed["unread"] == first["unread"] + 1


def test_a_quiet_handed_off_stream_gets_its_keep_alives(served, opened):
    bob = _open(served, opened, "bob")
    bob.next_summary()
    started = time.monotonic()
    assert [bob.block() for _ in range(3)] == [": keep-alive\n"] * 3
    assert time.monotonic() - started < 3 * KEEPALIVE + 2


def test_a_sign_out_ends_the_handed_off_stream_and_gives_its_place_back(served, opened):
    app, base = served
    cookie = session_cookie(base, "carol")
    carol = _open(served, opened, "carol", cookie)
    carol.next_summary()
    assert _places(app, "carol") == 1
    assert request(base, "POST", "/logout", Cookie=cookie).status == 302
    assert _summaries(carol) == []  # it ends, with nothing more
    assert _given_back(app, ["carol"])


def test_a_newer_stream_of_the_account_ousts_the_handed_off_one_with_its_end_event(
        served, opened):
    app, base = served
    cookie = session_cookie(base, "dave")
    first = _open(served, opened, "dave", cookie)
    first.next_summary()
    second = _open(served, opened, "dave", cookie)
    second.next_summary()
    assert first.rest()[-1] == "event: end\ndata: {}\n"  # its badge polls
    assert _places(app, "dave") == PER_ACCOUNT


def test_a_deactivated_accounts_handed_off_stream_ends_at_its_check(served, opened):
    app, _ = served
    admin = _open(served, opened, "admin")
    admin.next_summary()
    with app.app_context():
        user("admin").active = False
        db.session.commit()
    try:
        assert _summaries(admin) == []
        assert _given_back(app, ["admin"])
    finally:
        with app.app_context():
            user("admin").active = True
            db.session.commit()


def test_a_client_that_reads_nothing_is_closed_when_its_socket_is_full(served, opened):
    app, base = served
    where = urlsplit(base)
    cookie = session_cookie(base, "bob")
    with socket.socket() as stuck:
        # As small a window as the kernel allows: what fills is the server's send
        # buffer (stream_handoff.SEND_BUFFER).
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
        stuck.connect((where.hostname, where.port))
        stuck.sendall(f"GET {STREAM} HTTP/1.1\r\nHost: {where.netloc}\r\n"
                      f"Cookie: {cookie}\r\n\r\n".encode())
        deadline = time.monotonic() + 6 * WAIT
        with app.app_context():
            bob = str(user("bob").id)
        while _places(app, "bob") == 0:  # opened
            assert time.monotonic() < deadline
            time.sleep(0.05)
        while _places(app, "bob"):  # each change an event it does not read
            assert time.monotonic() < deadline, "a full socket kept its stream"
            live.changed(app, [bob])
            time.sleep(0.02)
    again = _open(served, opened, "bob", cookie)  # the account opens again at once
    assert again.response.status == 200 and again.next_summary()


def test_the_process_bound_holds_for_handed_off_streams(served, opened):
    _, base = served
    held = [_open(served, opened, name) for name in ACCOUNTS[:PER_PROCESS]]
    assert [one.next_summary() and one.response.status for one in held] == [200] * PER_PROCESS
    refused = _open(served, opened, ACCOUNTS[PER_PROCESS])
    assert refused.response.status == 503
    assert int(refused.response.getheader("Retry-After")) > 0
    held.pop().close()  # noticed at its next keep-alive: its process place is free again
    deadline = time.monotonic() + WAIT
    while (again := _open(served, opened, ACCOUNTS[PER_PROCESS])).response.status == 503:
        assert time.monotonic() < deadline
        time.sleep(KEEPALIVE)
    assert again.next_summary()


def test_a_stopping_process_ends_its_handed_off_streams_and_gives_their_places_back(
        served):
    app, _ = served
    with _gunicorn(app) as (server, base):
        alice = EventStream(base, session_cookie(base, "alice"))
        try:
            alice.next_summary()
            server.terminate()  # as gunicorn's master stops or restarts a worker
            assert _summaries(alice) == []
            # At once: not after the places' lease, had the process only died.
            assert _places(app, "alice") == 0
        finally:
            alice.close()


@pytest.mark.parametrize("workers, settings", [
    (("-k", "gthread", "--threads", "4"), {}),
    (("-k", "gevent"), {"FLASK_WIKINOTIFY_STREAM_HANDOFF": "false"}),
], ids=["gthread", "gevent, WIKINOTIFY_STREAM_HANDOFF off"])
def test_otherwise_gunicorn_holds_its_streams_itself(served, workers, settings):
    """Only the gevent worker leaves a request to the app (``ALREADY_HANDLED``), and only
    while ``WIKINOTIFY_STREAM_HANDOFF`` is on (off where a WSGI middleware wraps the
    wiki's answer): otherwise the stream is the body the server iterates, as under any
    server."""
    app, _ = served
    with _gunicorn(app, *workers, settings=settings) as (_, base):
        bob = EventStream(base, session_cookie(base, "bob"))
        try:
            assert bob.response.status == 200
            assert bob.response.getheader("Server", "").startswith("gunicorn")
            assert bob.next_summary() and bob.block() == ": keep-alive\n"
        finally:
            bob.close()
        assert _given_back(app, ["bob"])  # noticed at its next keep-alive


def test_a_gevent_worker_speaking_tls_itself_holds_its_streams_and_they_are_told(
        served, tmp_path):
    """gunicorn's gevent worker with its own certificate (``--certfile``): the connection's
    TLS state is gunicorn's socket's alone, and bytes written to the descriptor beneath it
    would reach the client as plaintext inside an encrypted connection, which it drops. So
    such a stream is never handed off: it is the body gunicorn iterates, and a commit
    still reaches it."""
    app, _ = served
    with _gunicorn(app, tls_in=tmp_path) as (_, base):
        assert base.startswith("https://")
        alice = EventStream(base, session_cookie(base, "alice"))
        try:
            assert alice.response.status == 200
            assert alice.response.getheader("Server", "").startswith("gunicorn")
            first_id, first = alice.next_summary()
            with app.app_context():
                edit("handbook/onboarding", "bob", f"An edit {uuid.uuid4()}")
            run_jobs(app)
            changed_id, changed = alice.next_summary()
            # A new summary (the edit joins her unread entry of the page if she has one).
            assert changed_id != first_id and changed["unread"] >= 1
        finally:
            alice.close()
        assert _given_back(app, ["alice"])  # noticed at its next keep-alive


def test_a_handed_off_stream_has_its_line_in_gunicorns_access_log_at_its_end(
        served, tmp_path):
    """gunicorn writes a request's access log line when its response ends, and never sees
    a handed-off stream's: the stream writes it at its end, as gunicorn's default format
    has it, with the bytes it sent."""
    app, _ = served
    log = tmp_path / "access.log"
    with _gunicorn(app, access_log=log) as (_, base):
        alice = EventStream(base, session_cookie(base, "alice"), **{"User-Agent": "badge/1"})
        try:
            assert alice.response.getheader("Server") is None  # handed off
            alice.next_summary()
            assert "/_notifications/stream" not in log.read_text()  # not before its end
        finally:
            alice.close()
        assert _given_back(app, ["alice"])  # its end: noticed at its next keep-alive
        deadline = time.monotonic() + WAIT
        while "/_notifications/stream" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    lines = log.read_text().splitlines()
    login = next(line for line in lines if '"POST /login HTTP/1.1" 302' in line)
    stream = next(line for line in lines if "/_notifications/stream" in line)
    # gunicorn's own line for the sign-in, and the stream's, field by field.
    shape = re.compile(
        r'^127\.0\.0\.1 - - \[[^]]+\] "([^"]+)" (\d{3}) (\d+|-) "([^"]*)" "([^"]*)"$')
    assert shape.match(login)
    request, status, sent, referer, agent = shape.match(stream).groups()
    assert (request, status, referer, agent) == (
        f"GET {STREAM} HTTP/1.1", "200", "-", "badge/1")
    # Its body's bytes, as gunicorn counts them, no head: what the client read (the retry,
    # its summary), and the keep-alives sent after it stopped reading, until one failed.
    read, keep_alive = sum(len(block.encode()) + 1 for block in alice.blocks), 14
    assert read <= int(sent) <= read + 4 * keep_alive
    assert (int(sent) - read) % keep_alive == 0
