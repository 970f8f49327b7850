"""Whether wikinotify can work (docs/operating.md#health-checks): the database answers,
Redis answers, and the schema is at wikinotify's Alembic head.

``GET /readyz`` and ``flask wikinotify status`` (its exit status 2) ask the same checks.
Each check answers within ``WIKINOTIFY_READY_TIMEOUT`` whatever the dependency does: it
runs in a thread of its own that the caller waits for that long. Probes that arrive
together share one check (single flight): a caller finding a check of the same dependency
running waits for that check's answer, so a flood of probes neither opens a connection
each nor turns a healthy dependency "down" for all but one. The database is asked through
an engine of the probe's own whose connections give up (connect and statement timeouts),
and a check that still hangs after :data:`ABANDON_AFTER` timeouts is left behind (at most
:data:`ABANDONED_MAX` of them) and a new one asked, so a dependency that is back reads
"ok" again. What failed is logged by its class only: an exception's text may carry an
address or a user name.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import sqlalchemy as sa
from alembic.script import ScriptDirectory
from flask import Flask
from sqlalchemy.engine import URL, Engine
from sqlalchemy.pool import NullPool

from . import queue
from .migrations import VERSIONS
from .state import state

log = logging.getLogger(__name__)

#: wikinotify's Alembic branch label (wikinotify/migrations).
BRANCH = "wikinotify"
#: A table wikinotify's first revision creates: present, the branch was applied.
SOME_TABLE = "wikinotify_events"

OK = "ok"
DOWN = "down"

#: A check still running after this many timeouts is abandoned and a new one started:
#: what hangs in a way no timeout of the driver bounds must not say "down" for ever.
ABANDON_AFTER = 3
#: Abandoned checks still alive, per dependency, beyond which none is abandoned more (a
#: dependency that wedges every connection costs this many threads, not one per probe).
ABANDONED_MAX = 2
#: How long a database found at the head is taken to stay there (seconds): a restored
#: older backup reads "down" again within this.
AT_HEAD_FOR = 60.0


@dataclass
class _Check:
    """One check of a dependency, running in :attr:`thread`; its answer once ended."""

    thread: threading.Thread
    started: float = field(default_factory=time.monotonic)
    answer: list[bool] = field(default_factory=list)

    @property
    def age(self) -> float:
        return time.monotonic() - self.started


_lock = threading.Lock()
#: Per dependency (its URL): the latest check, and the abandoned ones.
_running: dict[str, _Check] = {}
_abandoned: dict[str, list[_Check]] = {}
#: Per engine: when its database was last found at the head (time.monotonic()).
_at_head: weakref.WeakKeyDictionary[Engine, float] = weakref.WeakKeyDictionary()
#: Per app's engine: the probe's engine of the same database (:func:`probe_engine`).
_probe_engines: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Readiness:
    """``"ok"`` or ``"down"`` for each of ``database``, ``redis`` and ``schema``."""

    database: str
    redis: str
    schema: str

    @property
    def ready(self) -> bool:
        return self.database == self.redis == self.schema == OK

    def as_dict(self) -> dict[str, str]:
        return {"database": self.database, "redis": self.redis, "schema": self.schema}


def readiness(app: Flask) -> Readiness:
    """Ask the database, Redis and the schema (the schema only when the database
    answered)."""
    database = check_database(app)
    schema = check_schema(app) if database else False
    return Readiness(database=_word(database), redis=_word(check_redis(app)),
                     schema=_word(schema))


def check_database(app: Flask) -> bool:
    """Whether the database answers a ``SELECT 1`` in time."""
    engine = probe_engine(app)
    return _bounded(app, f"database:{engine.url}", lambda: _select_one(engine))


def check_redis(app: Flask) -> bool:
    """Whether Redis answers a ``PING`` in time."""
    client = queue.probe_client(app)
    return _bounded(app, f"redis:{queue.redis_url(app)}", client.ping)


def check_schema(app: Flask) -> bool:
    """Whether the database holds wikinotify's schema at this code's head: its
    ``alembic_version`` rows hold the branch's head. A database whose rows hold none of
    this branch's revisions while its tables exist was migrated by a newer wikinotify
    (during a rolling upgrade): that is ready too, as revisions add before they remove."""
    engine = probe_engine(app)
    found_at = _at_head.get(engine)
    if found_at is not None and time.monotonic() - found_at < AT_HEAD_FOR:
        return True
    current = _bounded(app, f"schema:{engine.url}", lambda: _schema_current(engine))
    with _lock:
        if current:
            _at_head[engine] = time.monotonic()
        else:
            _at_head.pop(engine, None)
    return current


@functools.cache
def branch_revisions() -> tuple[str, tuple[str, ...]]:
    """wikinotify's head revision and every revision of its branch (newest first): read
    from the migration scripts once per process, as they do not change under it."""
    scripts = ScriptDirectory(VERSIONS, version_locations=[VERSIONS])
    revisions = tuple(script.revision for script in scripts.walk_revisions())
    return scripts.get_current_head() or "", revisions


def probe_engine(app: Flask) -> Engine:
    """The engine the checks ask the app's database through: one per app's engine, with
    no pool (a probe of a database that was down must not get a connection that died with
    it) and connections bounded by ``WIKINOTIFY_READY_TIMEOUT``: connecting (psycopg's
    ``connect_timeout``, two seconds at least) and each statement (``statement_timeout``)
    on PostgreSQL, waiting for a lock (``timeout``) on a SQLite file. The wiki's own
    ``connect_args`` (SQLALCHEMY_ENGINE_OPTIONS: certificates, a password) are kept."""
    engine = _engine(app)
    with _lock:
        if engine not in _probe_engines:
            options = app.config.get("SQLALCHEMY_ENGINE_OPTIONS") or {}
            probe = _bounded_engine(engine.url, dict(options.get("connect_args") or {}),
                                    float(app.config["WIKINOTIFY_READY_TIMEOUT"]))
            if probe is None:
                return engine  # an in-memory database is the app's engine's own
            _probe_engines[engine] = probe
        return _probe_engines[engine]


def _bounded_engine(url: URL, connect_args: dict[str, object],
                    timeout: float) -> Engine | None:
    if url.get_backend_name() == "postgresql":
        # options may carry the wiki's own (a search_path): the timeout joins them.
        statement = f"-c statement_timeout={int(timeout * 1000)}"
        if "options" in connect_args:  # psycopg takes it over the URL's
            connect_args["options"] = f"{connect_args['options']} {statement}"
        else:
            url = url.update_query_dict({"options": f"{url.query.get('options', '')} {statement}"
                                         .strip()})
        connect_args["connect_timeout"] = max(1, math.ceil(timeout))
    elif url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        connect_args["timeout"] = timeout
    else:
        return None
    return sa.create_engine(url, poolclass=NullPool, connect_args=connect_args)


def _schema_current(engine: Engine) -> bool:
    head, ours = branch_revisions()
    with engine.connect() as connection:
        if not sa.inspect(connection).has_table("alembic_version"):
            return False
        rows = set(connection.scalars(sa.text("SELECT version_num FROM alembic_version")))
        if head in rows:
            return True
        if rows & set(ours):
            return False  # an older revision of ours: the upgrade has not run
        return sa.inspect(connection).has_table(SOME_TABLE)


def _engine(app: Flask) -> Engine:
    with app.app_context():
        return state(app).db.engine


def _select_one(engine: Engine) -> bool:
    with engine.connect() as connection:
        connection.execute(sa.text("SELECT 1"))
    return True


def _word(ok: bool) -> str:
    return OK if ok else DOWN


def _bounded(app: Flask, name: str, check: Callable[[], bool]) -> bool:
    """Run ``check`` in a thread, or join the one of ``name`` already running, and wait
    ``WIKINOTIFY_READY_TIMEOUT`` for its answer; ``False`` when it answered so, raised,
    did not end in time, or the one running is already older than the timeout."""
    timeout = float(app.config["WIKINOTIFY_READY_TIMEOUT"])
    with _lock:
        running = _running.get(name)
        if running is None or not running.thread.is_alive():
            running = _start(name, check)
        elif running.age >= ABANDON_AFTER * timeout and _abandon(name, running):
            running = _start(name, check)
        elif running.age >= timeout:
            return False  # it hangs: joining it would only wait to say so
    running.thread.join(timeout)
    return running.answer == [True]


def _start(name: str, check: Callable[[], bool]) -> _Check:
    """Start a check of ``name`` (under ``_lock``)."""

    def run() -> None:
        try:
            answer = bool(check())
        except Exception as error:  # any failure at all means "down", and says which
            log.warning("wikinotify: readiness: %s failed (%s)", name.split(":")[0],
                        type(error).__name__)
            started.answer.append(False)
        else:
            started.answer.append(answer)

    started = _running[name] = _Check(threading.Thread(
        target=run, name=f"wikinotify-readiness-{name.split(':')[0]}", daemon=True))
    started.thread.start()
    return started


def _abandon(name: str, hung: _Check) -> bool:
    """Leave ``hung`` behind, if fewer than :data:`ABANDONED_MAX` are (under ``_lock``)."""
    alive = [check for check in _abandoned.get(name, []) if check.thread.is_alive()]
    if len(alive) >= ABANDONED_MAX:
        _abandoned[name] = alive
        return False
    _abandoned[name] = [*alive, hung]
    log.warning("wikinotify: readiness: %s check abandoned after %.0f s", name.split(":")[0],
                hung.age)
    return True
